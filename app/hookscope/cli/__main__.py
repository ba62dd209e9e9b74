"""``python -m hookscope.cli``: the ``hookscope`` command."""

from hookscope.cli import main

raise SystemExit(main())

"""``python -m app.cli``: the ``hookscope`` command."""

from app.cli import main

raise SystemExit(main())

from hookscope.cli import main

raise SystemExit(main())

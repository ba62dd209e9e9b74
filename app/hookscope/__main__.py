try:  # Ctrl-C while the command line's first module loads: its one line, as at any later moment
    from hookscope.cli import main
except KeyboardInterrupt:
    import os
    import sys

    sys.stderr.write("hookscope: interrupted\n")
    sys.stderr.flush()
    os._exit(130)

raise SystemExit(main())

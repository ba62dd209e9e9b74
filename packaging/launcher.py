"""Entry point of the bundled app (PyInstaller runs this file as __main__)."""

import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)

from app.cli import main

raise SystemExit(main())

"""Entry point of the bundled app (PyInstaller runs this file as __main__).

By the time this runs, the bootloader's splash is on screen (drawn with Tcl/Tk before Python starts; see
hookscope.spec). Then, in this order: torch, before anything imports Qt (on Windows, torch >= 2.9 imported after
Qt fails to initialise its DLLs, pytorch#166628); pretrained weights shipped in the bundle copied into the user's
torch hub cache when missing there; the command line, which opens the window and closes the splash once the window
is shown. A failure before the window (torch does not load, Qt does not load, no display) goes to the per-user
error log and a message box (hookscope.system.startup), not only to a console a windowed app does not have.
"""

import os
import sys
import traceback

from hookscope.system.startup import close_splash, report_startup_error, splash_text

WINDOWLESS_OPTIONS = {"--self-test", "--screenshot", "--install-desktop-entry", "--uninstall-desktop-entry",
                      "--version", "-h", "--help"}  # fmt: skip


def opens_window(args: list[str]) -> bool:
    """Whether these arguments open the window (else the splash goes at once): not a headless option, and not a
    subcommand (a first word that is neither an option nor an existing file)."""
    if any(arg.split("=")[0] in WINDOWLESS_OPTIONS for arg in args):
        return False
    return not (args and not args[0].startswith("-") and not os.path.exists(args[0]))


def main() -> int:
    if not opens_window(sys.argv[1:]):
        close_splash()
    splash_text("Loading PyTorch…")
    try:
        import torch  # noqa: F401  (before Qt, see above)
    except Exception as error:  # noqa: BLE001  (a broken installation: say so where a person can see it)
        return report_startup_error(f"PyTorch could not be loaded ({error}).", traceback.format_exc())
    splash_text("Opening the window…")
    from hookscope.core.models.bundled_weights import install_bundled_weights

    install_bundled_weights()
    from hookscope.cli import main as command_line

    return command_line()


raise SystemExit(main())

"""Before the window: the splash, and errors that come before Qt can show anything.

Nothing here imports torch or Qt, so it works when one of them is what failed. A problem found before the main
window (no display, a library that does not load) is written to the per-user error log, the same
``hookscope-errors.log`` the window's error dialog writes to (``data_folder()`` is the folder Qt's
``AppDataLocation`` names once the application is called Hookscope/Hookscope), is printed as one line on stderr,
and is shown in a native message box where one can be shown (Windows' MessageBox, macOS' osascript, zenity,
kdialog or xmessage on Linux when there is a display): a windowed app has no console for stderr.

The splash is PyInstaller's bootloader splash (Tcl/Tk, drawn before Python starts); ``splash_text`` and
``close_splash`` talk to it when it is there and do nothing otherwise (a source checkout, a pip install, no display).
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

SETTINGS_DIR_ENV = "HOOKSCOPE_SETTINGS_DIR"  # the same variable hookscope.ui.state.settings reads
ORGANIZATION = APPLICATION = "Hookscope"
ERROR_LOG = "hookscope-errors.log"
SPLASH_ENV = "_PYI_SPLASH_IPC"  # set by PyInstaller's bootloader when its splash is up
# Platforms that need no display server (tests, screenshots, remote desktops through VNC).
HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "linuxfb", "eglfs", "vkkhrdisplay")


def data_folder(environ: dict[str, str] | None = None, platform: str | None = None) -> Path:
    """The per-user data folder, without Qt: ``~/.local/share/Hookscope/Hookscope`` on Linux (XDG_DATA_HOME
    respected), ``%APPDATA%\\Hookscope\\Hookscope`` on Windows, ``~/Library/Application Support/Hookscope/Hookscope``
    on macOS; ``$HOOKSCOPE_SETTINGS_DIR`` when set."""
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if env.get(SETTINGS_DIR_ENV):
        return Path(env[SETTINGS_DIR_ENV])
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform == "win32":
        base = Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    elif platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / ORGANIZATION / APPLICATION


def error_log(environ: dict[str, str] | None = None) -> Path:
    return data_folder(environ) / ERROR_LOG


def log_error(message: str, details: str = "") -> Path | None:
    """Append ``message`` (one line, with the time) and ``details`` (a traceback) to the error log."""
    path = error_log()
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    text = f"{stamp} hookscope: {' '.join(message.split())}\n" + (details.rstrip() + "\n" if details else "")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        return None
    return path


def _x_display_answers(display: str) -> bool:
    """Whether an X server listens at ``display`` (":0", "unix:1.0", "localhost:10.0"); True when unsure."""
    host, _, rest = display.rpartition(":")
    number = rest.split(".")[0]
    if not number.isdigit():
        return True  # a form we do not know (a launchd socket path on macOS): let Qt try
    if host in ("", "unix"):
        path = f"/tmp/.X11-unix/X{number}"
        for address in ("\0" + path, path):  # the abstract socket first, as libxcb does
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(address)
                    return True
                except (FileNotFoundError, ConnectionRefusedError):
                    continue
                except OSError:
                    return True
        return False
    try:
        with socket.create_connection((host, 6000 + int(number)), timeout=1.0):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return True


def display_problem(environ: dict[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why a window cannot open here (Linux without a reachable display), in one sentence; None when it can."""
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return None
    if env.get("QT_QPA_PLATFORM", "").split(":")[0] in HEADLESS_PLATFORMS:
        return None
    if env.get("WAYLAND_DISPLAY"):
        return None
    display = env.get("DISPLAY", "")
    if not display:
        return (
            "Hookscope needs a graphical desktop and none was found (neither DISPLAY nor WAYLAND_DISPLAY is "
            "set): start it from your desktop, or check the installation without a window with "
            "'hookscope --self-test'."
        )
    if not _x_display_answers(display):
        return (
            f"Hookscope cannot reach the display '{display}' (no X server answers there): start it from your "
            "desktop, or check the installation without a window with 'hookscope --self-test'."
        )
    return None


def show_native_error(title: str, message: str) -> bool:
    """A message box from the system, for errors before Qt is up; False when none could be shown."""
    try:
        if sys.platform == "win32":
            import ctypes

            ctypes.windll.user32.MessageBoxW(None, message, title, 0x10)  # MB_ICONERROR
            return True
        if sys.platform == "darwin":
            script = f"display alert {_applescript(title)} message {_applescript(message)} as critical"
            return subprocess.run(["osascript", "-e", script], capture_output=True).returncode == 0
        if display_problem() is not None:
            return False
        for command in (
            ["zenity", "--error", "--no-wrap", f"--title={title}", f"--text={message}"],
            ["kdialog", "--title", title, "--error", message],
            ["xmessage", "-center", f"{title}: {message}"],
        ):
            if shutil.which(command[0]):
                return subprocess.run(command, capture_output=True).returncode in (0, 1)
    except (OSError, AttributeError, ValueError):
        return False
    return False


def _applescript(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cursor_library_bundled() -> bool:
    """Whether this installation ships the X11 cursor library Qt's xcb plugin needs (a PyInstaller bundle does)."""
    base = getattr(sys, "_MEIPASS", None)
    return base is not None and any(Path(base).rglob("libxcb-cursor.so.0*"))


def qt_fatal_summary(message: str, notes: list[str]) -> str:
    """Qt's last words before it aborts (no usable platform plugin), as one sentence a person can act on."""
    said = " ".join(notes + [message])
    if "could not connect to display" in said:
        display = os.environ.get("DISPLAY", "")
        return (
            f"Qt could not connect to the display '{display}': start Hookscope from your desktop, or check "
            "the installation without a window with 'hookscope --self-test'."
        )
    if "xcb-cursor0 or libxcb-cursor0 is needed" in said and not cursor_library_bundled():
        return (
            "Qt's window plugin needs the X11 cursor library: install it once (Debian and Ubuntu: "
            "sudo apt-get install libxcb-cursor0) and start Hookscope again."
        )
    first = next((line.strip() for line in message.splitlines() if line.strip()), "no reason given")
    return f"Qt could not open a window ({first})."


def report_startup_error(message: str, details: str = "", dialog: bool = True) -> int:
    """A problem before the main window: logged, one line on stderr, a message box where possible. Returns 1."""
    close_splash()
    path = log_error(message, details)
    where = f" (logged to {path})" if path is not None else ""
    if sys.stderr is not None:
        sys.stderr.write(f"hookscope: error: {message}{where}\n")
    if dialog:
        show_native_error("Hookscope could not start", message + where)
    return 1


def _splash():
    """PyInstaller's splash module when the bootloader's splash is up, else None (importing it without a splash
    prints a complaint on stderr, so the environment is checked first)."""
    if SPLASH_ENV not in os.environ:
        return None
    try:
        import pyi_splash  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pyi_splash


def splash_text(text: str) -> None:
    splash = _splash()
    if splash is not None:
        try:
            splash.update_text(text)
        except Exception:  # noqa: BLE001  (a splash that failed to come up must not stop the app)
            pass


def close_splash() -> None:
    splash = _splash()
    if splash is not None:
        try:
            splash.close()
        except Exception:  # noqa: BLE001
            pass
        os.environ.pop(SPLASH_ENV, None)  # closed for good: later calls do nothing

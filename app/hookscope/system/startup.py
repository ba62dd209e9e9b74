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
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

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
            # zenity wraps at the given width, so install lines and the log's path are read whole
            ["zenity", "--error", "--width=560", f"--title={title}", f"--text={message}"],
            ["kdialog", "--title", title, "--error", message],
            ["xmessage", "-center", f"{title}: {message}"],
        ):
            if shutil.which(command[0]):
                # On its own, in a session of its own: this process ends now, the box stays until it is closed.
                subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
                return True
    except (OSError, AttributeError, ValueError):
        return False
    return False


def _applescript(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The packages that hold each library Qt's xcb window plugin loads, on Debian and Ubuntu and on Fedora (by soname):
# what a message names when ``ldd`` finds one missing. A library not listed here is named by its soname alone.
XCB_PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libXau.so.6": ("libxau6", "libXau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp"),
    "libpng16.so.16": ("libpng16-16", "libpng"),
    "libexpat.so.1": ("libexpat1", "expat"),
}


def xcb_plugin() -> Path | None:
    """Qt's X11 window plugin (``libqxcb.so``) as this installation has it: PySide6's, or a bundle's copy. Found
    without importing Qt (it may be what fails)."""
    roots = [Path(sys._MEIPASS) / "PySide6"] if hasattr(sys, "_MEIPASS") else []
    spec = importlib.util.find_spec("PySide6")
    roots += [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec is not None else []
    for root in roots:
        for plugin in (
            root / "Qt" / "plugins" / "platforms" / "libqxcb.so",
            root / "plugins" / "platforms" / "libqxcb.so",
        ):
            if plugin.is_file():
                return plugin
    return None


def missing_libraries(binary: Path) -> list[str]:
    """The libraries ``binary`` needs, directly or through the libraries it loads, that the system cannot find, as
    ``ldd`` reports them ("libxcb-icccm.so.4 => not found"); empty when none is missing or ``ldd`` cannot say."""
    try:
        done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    missing = [line.split("=>")[0].strip() for line in done.stdout.splitlines() if "=> not found" in line]
    return list(dict.fromkeys(missing))


def install_advice(missing: list[str]) -> str:
    """One install line per family of Linux for ``missing`` sonames: "Debian and Ubuntu: sudo apt-get install ...;
    Fedora: sudo dnf install ..."; a library without a known package is named as it is."""
    known = [XCB_PACKAGES[name] for name in missing if name in XCB_PACKAGES]
    unknown = [name for name in missing if name not in XCB_PACKAGES]
    parts = []
    if known:
        debian = " ".join(dict.fromkeys(debian for debian, _ in known))
        fedora = " ".join(dict.fromkeys(fedora for _, fedora in known))
        parts.append(f"Debian and Ubuntu: sudo apt-get install {debian}; Fedora: sudo dnf install {fedora}")
    if unknown:
        parts.append(f"and the packages that hold {', '.join(unknown)}")
    return " ".join(parts)


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
    plugin = xcb_plugin() if "xcb" in said else None
    missing = missing_libraries(plugin) if plugin is not None else []
    if missing:  # what ldd reads from the plugin: the libraries really missing, not the one Qt always names
        return (
            f"Qt's window plugin cannot load: {'this library is' if len(missing) == 1 else 'these libraries are'} "
            f"missing: {', '.join(missing)}. Install {'it' if len(missing) == 1 else 'them'} once "
            f"({install_advice(missing)}) and start Hookscope again."
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


def _splash() -> Any:
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

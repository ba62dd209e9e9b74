"""The Linux applications-menu entry: ``hookscope --install-desktop-entry`` / ``--uninstall-desktop-entry``.

The entry names this installation's own launcher by absolute path (``sys.executable`` in a PyInstaller bundle,
the ``hookscope`` script of the Python environment otherwise) and its icon by absolute path, so it works without
anything on PATH; moving the installation means installing the entry again. It is written to
``$XDG_DATA_HOME/applications`` (``~/.local/share/applications``), where desktops look for a user's own entries.
``Exec=... %F`` passes every file chosen in a file manager: the window opens the first and lists the rest.

Windows' installer (packaging/hookscope.iss) and the macOS .app do the same their own way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import resource

ENTRY_NAME = "hookscope.desktop"
ICON = "icons/hookscope-256.png"
MIME_TYPES = "image/png;image/jpeg;image/bmp;image/tiff;image/webp;"


def applications_folder(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "share")
    return Path(base) / "applications"


def launcher_path() -> Path:
    """This installation's ``hookscope`` launcher, as an absolute path."""
    if getattr(sys, "frozen", False):
        return Path(sys.executable).resolve()
    beside = Path(sys.executable).parent / ("hookscope.exe" if sys.platform == "win32" else "hookscope")
    if beside.is_file():
        return beside.absolute()  # the venv's script, not resolved: a venv's python is a link to the base one
    found = shutil.which("hookscope")
    if found:
        return Path(found).absolute()
    raise HookscopeError(
        "The 'hookscope' command of this installation was not found, so a menu entry would "
        "start nothing: install Hookscope with pip (pip install .) and try again."
    )


def quote_exec(argument: str) -> str:
    """One argument of a desktop entry's ``Exec`` key, quoted as the Desktop Entry Specification asks (inside
    double quotes ``"`` ` $ \\`` are escaped with a backslash, ``%`` is doubled), then escaped once more as a
    string value (every backslash doubled)."""
    quoted = argument.replace("%", "%%")
    if any(c in quoted for c in " \t\n\"'\\><~|&;$*?#()`="):
        quoted = '"' + "".join("\\" + c if c in '"`$\\' else c for c in quoted) + '"'
    return quoted.replace("\\", "\\\\")


def unquote_exec(value: str) -> list[str]:
    """The arguments of an ``Exec`` value (the reverse of ``quote_exec``; field codes such as %F are kept)."""
    text = value.replace("\\\\", "\\")
    args, current, inside, escaped, started = [], [], False, False, False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif inside and char == "\\":
            escaped = True
        elif char == '"':
            inside = not inside
            started = True
        elif char in " \t" and not inside:
            if current or started:
                args.append("".join(current))
            current, started = [], False
        else:
            current.append(char)
    if current or started:
        args.append("".join(current))
    return [arg.replace("%%", "%") for arg in args]


def entry_text(launcher: Path, icon: Path) -> str:
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Name=Hookscope",
            "GenericName=Neural network inspector",
            "Comment=Look inside a PyTorch network: feature maps and gradients through real hooks",
            f"TryExec={quote_exec(str(launcher))}",
            f"Exec={quote_exec(str(launcher))} %F",
            f"Icon={icon}",
            "Terminal=false",
            "Categories=Science;Education;Development;",
            f"MimeType={MIME_TYPES}",
            "Keywords=PyTorch;neural network;feature maps;hooks;Grad-CAM;",
            "StartupNotify=true",
            "",
        ]
    )


def _refresh(folder: Path) -> None:
    """Let the desktop notice at once where it has the tool for it (it rescans the folder anyway)."""
    if shutil.which("update-desktop-database"):
        subprocess.run(["update-desktop-database", str(folder)], capture_output=True)


def install_desktop_entry(folder: Path | None = None, launcher: Path | None = None) -> Path:
    """Write the entry for this installation; returns its path."""
    if not sys.platform.startswith("linux"):
        raise HookscopeError(
            "Menu entries are for Linux desktops: on Windows the installer adds Hookscope to the "
            "Start menu, on macOS drag Hookscope.app to Applications."
        )
    folder = applications_folder() if folder is None else folder
    launcher = launcher_path() if launcher is None else launcher
    if not launcher.is_file():
        raise HookscopeError(f"The launcher '{launcher}' does not exist: the menu entry would start nothing.")
    icon = resource(ICON)
    path = folder / ENTRY_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".desktop.part")
        temporary.write_text(entry_text(launcher, icon), encoding="utf-8")
        temporary.chmod(0o755)  # some desktops only trust entries that are executable
        os.replace(temporary, path)
    except OSError as error:
        raise HookscopeError(
            f"Could not write the menu entry '{path}': {error.strerror or error}.", path=str(path)
        ) from error
    _refresh(folder)
    return path


def uninstall_desktop_entry(folder: Path | None = None) -> Path | None:
    """Remove the entry; its path, or None when there was none."""
    folder = applications_folder() if folder is None else folder
    path = folder / ENTRY_NAME
    if not path.exists():
        return None
    try:
        path.unlink()
    except OSError as error:
        raise HookscopeError(
            f"Could not remove the menu entry '{path}': {error.strerror or error}.", path=str(path)
        ) from error
    _refresh(folder)
    return path


def read_exec(path: Path) -> list[str]:
    """The ``Exec`` command of an entry file, as arguments (for tests and checks)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("Exec="):
            return unquote_exec(line[len("Exec=") :])
    raise HookscopeError(f"'{path}' has no Exec line.")

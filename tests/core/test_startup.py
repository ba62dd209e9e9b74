"""Before the window: the per-user log folder without Qt, the display check, Qt's last words as one sentence, and
the native message box (a fake zenity on PATH, a fake X server socket: no real display needed)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hookscope.system import startup
from hookscope.system.startup import data_folder, display_problem, log_error, qt_fatal_summary, report_startup_error


def test_the_data_folder_per_system() -> None:
    home = {"HOME": "/home/ada"}
    assert data_folder(home, "linux") == Path("/home/ada/.local/share/Hookscope/Hookscope")
    assert data_folder({**home, "XDG_DATA_HOME": "/data"}, "linux") == Path("/data/Hookscope/Hookscope")
    assert data_folder({**home, "APPDATA": "C:/Users/ada/AppData/Roaming"}, "win32") == Path(
        "C:/Users/ada/AppData/Roaming/Hookscope/Hookscope"
    )
    assert data_folder(home, "darwin") == Path("/home/ada/Library/Application Support/Hookscope/Hookscope")
    assert data_folder({**home, "HOOKSCOPE_SETTINGS_DIR": "/tmp/s"}, "linux") == Path("/tmp/s")


def test_no_display_is_one_sentence_and_headless_platforms_need_none() -> None:
    problem = display_problem({}, "linux")
    assert problem and "\n" not in problem and "no" in problem and "--self-test" in problem
    assert "xcb" not in problem.lower()
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, "linux") is None
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, "linux") is None
    assert display_problem({}, "win32") is None and display_problem({}, "darwin") is None


def unused_display() -> int:
    number = 4000 + os.getpid() % 1000
    while os.path.exists(f"/tmp/.X11-unix/X{number}"):
        number += 1
    return number


@pytest.fixture
def fake_x_server():
    """A listening socket where libxcb looks for display :N (abstract namespace, as Xorg and Xvfb also listen)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("X11 display sockets are Linux's")
    number = unused_display()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"\0/tmp/.X11-unix/X{number}")
    server.listen(4)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f":{number}"
    stop.set()
    thread.join()
    server.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 displays are Linux's")
def test_a_display_nobody_answers_is_named(fake_x_server) -> None:
    assert display_problem({"DISPLAY": fake_x_server}, "linux") is None
    dead = f":{unused_display() + 1}"
    problem = display_problem({"DISPLAY": dead}, "linux")
    assert problem is not None and f"'{dead}'" in problem


def test_qt_giving_up_is_one_sentence_without_the_misleading_cursor_hint_when_bundled(monkeypatch) -> None:
    notes = [
        "could not connect to display :9",
        "From 6.5.0, xcb-cursor0 or libxcb-cursor0 is needed to load the Qt xcb platform plugin.",
    ]
    fatal = "This application failed to start because no Qt platform plugin could be initialized."
    monkeypatch.setenv("DISPLAY", ":9")
    assert qt_fatal_summary(fatal, notes).startswith("Qt could not connect to the display ':9'")
    monkeypatch.setattr(startup, "cursor_library_bundled", lambda: True)
    summary = qt_fatal_summary(fatal, notes[1:])
    assert "cursor" not in summary and summary.startswith("Qt could not open a window")
    monkeypatch.setattr(startup, "cursor_library_bundled", lambda: False)
    assert "sudo apt-get install libxcb-cursor0" in qt_fatal_summary(fatal, notes[1:])


def test_the_log_gets_one_readable_line_and_the_details(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOOKSCOPE_SETTINGS_DIR", str(tmp_path))
    path = log_error("PyTorch could not be loaded\n(libgomp missing).", "Traceback (most recent call last):\n  ...")
    assert path == tmp_path / "hookscope-errors.log"
    first, *rest = path.read_text().splitlines()
    assert first.endswith("hookscope: PyTorch could not be loaded (libgomp missing).")
    assert rest[0].startswith("Traceback")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zenity is a Linux desktop's")
def test_a_startup_error_is_logged_printed_and_shown_in_a_message_box(
    tmp_path: Path, monkeypatch, capsys, fake_x_server
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shown, alive = tmp_path / "zenity.txt", tmp_path / "zenity.pid"
    # A box that stays until it is closed: the fake writes what it was given, then waits, as a person would.
    mv, sleep = shutil.which("mv"), shutil.which("sleep")
    (bin_dir / "zenity").write_text(
        f'#!/bin/sh\necho $$ > "{alive}.tmp"; {mv} "{alive}.tmp" "{alive}"\nprintf "%s\\n" "$@" > "{shown}.tmp"\n'
        f'{mv} "{shown}.tmp" "{shown}"\nexec {sleep} 60\n'
    )
    (bin_dir / "zenity").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("DISPLAY", fake_x_server)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.setenv("HOOKSCOPE_SETTINGS_DIR", str(tmp_path / "data"))
    assert report_startup_error("The window's libraries could not be loaded (libEGL.so.1: cannot open).") == 1
    log = tmp_path / "data" / "hookscope-errors.log"
    err = capsys.readouterr().err
    assert (
        err == f"hookscope: error: The window's libraries could not be loaded (libEGL.so.1: cannot open). "
        f"(logged to {log})\n"
    )
    for _ in range(200):  # the box was started, not waited for: this process went on while it shows
        if shown.exists():
            break
        time.sleep(0.05)
    arguments = shown.read_text().splitlines()
    assert "--error" in arguments and "--title=Hookscope could not start" in arguments
    assert any(a.startswith("--text=The window's libraries could not be loaded") for a in arguments)
    assert "--no-wrap" not in arguments and "--width=560" in arguments  # the text wraps: nothing is cut off
    pid = int(alive.read_text())
    os.kill(pid, 0)  # the box is still open after report_startup_error returned: the process did not wait for it
    os.kill(pid, signal.SIGTERM)
    assert log.read_text().count("\n") == 1


def test_no_message_box_without_a_display(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(startup.sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert startup.show_native_error("Hookscope could not start", "x") is False


def test_the_splash_calls_do_nothing_outside_a_bundle(monkeypatch) -> None:
    monkeypatch.delenv(startup.SPLASH_ENV, raising=False)
    startup.splash_text("Loading PyTorch…")
    startup.close_splash()


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("ldd") is None, reason="builds a library with gcc")
def test_the_libraries_the_window_plugin_misses_are_named_with_their_install_lines(tmp_path: Path, monkeypatch):
    """What ``ldd`` reads from Qt's xcb plugin, not the cursor library Qt names whatever is missing: a plugin built
    here against two libraries that are then taken away, as on a machine without them (this machine has every
    xcb library, so the two carry names of their own, given packages here)."""
    source = tmp_path / "stub.c"
    source.write_text("int stub(void) { return 0; }\n")
    libs = tmp_path / "libs"
    libs.mkdir()
    sonames = ("libhookscope-test-icccm.so.4", "libhookscope-test-keysyms.so.1")
    for soname in sonames:
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(libs / soname), f"-Wl,-soname,{soname}", str(source)],
                       check=True)  # fmt: skip
    plugin = tmp_path / "platforms" / "libqxcb.so"
    plugin.parent.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(source), "-Wl,--no-as-needed", f"-L{libs}",
                    *(f"-l:{soname}" for soname in sonames)], check=True)  # fmt: skip
    for library in libs.iterdir():
        library.unlink()
    assert startup.missing_libraries(plugin) == list(sonames)
    own = startup.xcb_plugin()  # PySide6's: every library it needs is here (.ci/run installs them)
    assert own is not None and own.name == "libqxcb.so" and startup.missing_libraries(own) == []
    monkeypatch.setattr(startup, "xcb_plugin", lambda: plugin)
    monkeypatch.setitem(startup.XCB_PACKAGES, sonames[0], startup.XCB_PACKAGES["libxcb-icccm.so.4"])
    monkeypatch.setitem(startup.XCB_PACKAGES, sonames[1], startup.XCB_PACKAGES["libxcb-keysyms.so.1"])
    notes = ["From 6.5.0, xcb-cursor0 or libxcb-cursor0 is needed to load the Qt xcb platform plugin.",
             'Could not load the Qt platform plugin "xcb" in "" even though it was found.']  # fmt: skip
    fatal = "This application failed to start because no Qt platform plugin could be initialized."
    assert qt_fatal_summary(fatal, notes) == (
        f"Qt's window plugin cannot load: these libraries are missing: {sonames[0]}, {sonames[1]}. Install them "
        "once (Debian and Ubuntu: sudo apt-get install libxcb-icccm4 libxcb-keysyms1; Fedora: sudo dnf install "
        "xcb-util-wm xcb-util-keysyms) and start Hookscope again."
    )


def test_install_lines_name_each_family_of_linux_and_what_has_no_known_package() -> None:
    advice = startup.install_advice(["libxcb-cursor.so.0", "libxcb-xkb.so.1", "libxcb-shape.so.0", "libfoo.so.2"])
    assert advice == (
        "Debian and Ubuntu: sudo apt-get install libxcb-cursor0 libxcb-xkb1 libxcb-shape0; Fedora: sudo dnf install "
        "xcb-util-cursor libxcb and the packages that hold libfoo.so.2"
    )

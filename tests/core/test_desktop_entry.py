"""The applications-menu entry: written with this installation's absolute launcher path and icon, quoted so that a
folder with spaces still starts it, passing every chosen file; removed again; the command-line flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import resource
from hookscope.system import desktop_entry
from hookscope.system.desktop_entry import (
    ENTRY_NAME,
    install_desktop_entry,
    quote_exec,
    read_exec,
    uninstall_desktop_entry,
    unquote_exec,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="desktop entries are Linux's")


def fake_launcher(folder: Path, record: Path) -> Path:
    """A launcher in a folder with a space, a quote and a percent sign, that records the arguments it gets."""
    folder.mkdir(parents=True)
    launcher = folder / "hookscope"
    launcher.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "{record}"\n')
    launcher.chmod(0o755)
    return launcher


@linux_only
def test_the_entry_starts_this_launcher_with_every_chosen_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    record = tmp_path / "args.txt"
    launcher = fake_launcher(tmp_path / "My Apps" / "it's 100% here", record)
    path = install_desktop_entry(launcher=launcher)
    assert path == tmp_path / "data" / "applications" / ENTRY_NAME
    text = path.read_text()
    assert f"Icon={resource('icons/hookscope-256.png')}" in text and Path(resource("icons/hookscope-256.png")).is_file()
    assert "Terminal=false" in text and "MimeType=image/png;image/jpeg;" in text
    command = read_exec(path)
    assert command == [str(launcher), "%F"]
    # what a desktop does with %F: one argument per chosen file
    files = [str(tmp_path / "a cat.png"), str(tmp_path / "b.jpg")]
    subprocess.run([*command[:-1], *files], check=True)
    assert record.read_text().splitlines() == files


@linux_only
def test_uninstall_removes_it_and_says_when_there_was_none(tmp_path: Path) -> None:
    launcher = fake_launcher(tmp_path / "app", tmp_path / "args.txt")
    folder = tmp_path / "applications"
    install_desktop_entry(folder, launcher)
    assert uninstall_desktop_entry(folder) == folder / ENTRY_NAME and not (folder / ENTRY_NAME).exists()
    assert uninstall_desktop_entry(folder) is None


@linux_only
def test_a_launcher_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HookscopeError, match="does not exist: the menu entry would start nothing"):
        install_desktop_entry(tmp_path / "applications", tmp_path / "gone" / "hookscope")
    assert not (tmp_path / "applications" / ENTRY_NAME).exists()


def test_other_systems_are_told_where_their_entry_comes_from(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(desktop_entry.sys, "platform", "win32")
    with pytest.raises(HookscopeError, match="Start menu"):
        install_desktop_entry(tmp_path, Path(sys.executable))


def test_the_launcher_is_the_bundle_executable_when_frozen(monkeypatch, tmp_path: Path) -> None:
    exe = tmp_path / "hookscope"
    exe.write_text("")
    monkeypatch.setattr(desktop_entry.sys, "frozen", True, raising=False)
    monkeypatch.setattr(desktop_entry.sys, "executable", str(exe))
    assert desktop_entry.launcher_path() == exe.resolve()


def test_the_launcher_is_the_environments_hookscope_script_otherwise() -> None:
    path = desktop_entry.launcher_path()
    assert path.is_absolute() and path.name.startswith("hookscope") and path.is_file()


@pytest.mark.parametrize("argument", ["/opt/hookscope/hookscope", "/home/a b/x", 'q"uo`te$s\\back', "50%", "it's"])
def test_exec_quoting_round_trips(argument: str) -> None:
    assert unquote_exec(quote_exec(argument) + " %F") == [argument, "%F"]


def test_exec_quoting_follows_the_specification() -> None:
    assert quote_exec("/opt/hookscope/hookscope") == "/opt/hookscope/hookscope"
    assert quote_exec("/home/a b/hookscope") == '"/home/a b/hookscope"'
    assert quote_exec("/x/$y") == '"/x/\\\\$y"'  # \$ inside quotes, then the backslash escaped as a string


@linux_only
def test_the_command_line_flags_install_and_remove_the_entry(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    code = "from hookscope.cli import main; raise SystemExit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "--install-desktop-entry"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    entry = tmp_path / "applications" / ENTRY_NAME
    assert done.stdout.strip() == f"hookscope: menu entry written: {entry}"
    assert Path(read_exec(entry)[0]).is_file()
    done = subprocess.run(
        [sys.executable, "-c", code, "--uninstall-desktop-entry"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and not entry.exists()

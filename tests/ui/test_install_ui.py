"""What a downloaded installation needs from the window side: several files from the desktop (the first shown, the
rest in the image list), errors before the window in the log file as one line, the menu entry from the Help
menu, and the licences from the About box."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication, QPushButton

import hookscope.ui.app as app_module
from hookscope.cli.dispatch import build_window_parser
from hookscope.system.desktop_entry import ENTRY_NAME, read_exec
from hookscope.system.startup import data_folder
from hookscope.ui.dialogs.about import show_about
from hookscope.ui.dialogs.licenses import LicensesDialog, licence_files
from hookscope.ui.features.desktop_entry import INSTALL_ACTION, REMOVE_ACTION, DesktopEntryFeature
from hookscope.ui.state.settings import SETTINGS_DIR_ENV, settings_folder

RUN_TIMEOUT_MS = 120_000


def test_the_window_parser_takes_several_files_as_a_desktop_passes_them() -> None:
    gui = build_window_parser()
    args = gui.parse_intermixed_args(["a.png", "--model", "resnet18", "b c.jpg", "d.png"])
    assert args.images == ["a.png", "b c.jpg", "d.png"] and args.model == "resnet18"
    assert gui.parse_intermixed_args([]).images == []


def test_several_files_open_the_first_and_queue_the_rest(photos, qtbot, monkeypatch) -> None:
    """run_gui as `hookscope a.png b.png c.png` runs it (the event loop replaced by a wait for the first run)."""
    made = []

    class Recorded(app_module.MainWindow):
        def __init__(self, *args, **options) -> None:
            super().__init__(*args, **options)
            made.append(self)

    def wait_instead_of_exec(*_args) -> int:
        window = made[0]
        qtbot.waitUntil(lambda: window.workspace.last is not None, timeout=RUN_TIMEOUT_MS)
        return 0

    monkeypatch.setattr(app_module, "MainWindow", Recorded)
    monkeypatch.setattr(QApplication, "exec", wait_instead_of_exec)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # run_gui installs its error dialog: restored after
    paths = [str(p) for p in photos]
    assert app_module.run_gui(paths[0], "resnet18", "none", "cpu", None, None, False, more_images=paths[1:]) == 0
    window = made[0]
    qtbot.addWidget(window)
    space = window.workspace
    assert list(space.image_list) == paths and space.image_index == 0
    assert space.last.image.path == paths[0]
    window.close()


def test_no_display_is_one_line_in_the_log_and_on_stderr(tmp_path: Path) -> None:
    """As a double-click without a desktop session would start it: the window's command, no DISPLAY."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", SETTINGS_DIR_ENV, "XDG_DATA_HOME")
    }
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "from hookscope.cli import main; raise SystemExit(main())"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    log = tmp_path / ".local" / "share" / "Hookscope" / "Hookscope" / "hookscope-errors.log"
    assert done.returncode == 1, done.stderr  # not Qt's abort (134)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("hookscope: error: Hookscope needs a graphical")
    assert f"(logged to {log})" in done.stderr
    assert "xcb-cursor" not in done.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "neither DISPLAY nor WAYLAND_DISPLAY is set" in lines[0]


def test_the_log_before_the_window_is_the_log_the_window_writes(monkeypatch, qapp) -> None:
    monkeypatch.delenv(SETTINGS_DIR_ENV)
    names = QCoreApplication.organizationName(), QCoreApplication.applicationName()
    QCoreApplication.setOrganizationName("Hookscope")
    QCoreApplication.setApplicationName("Hookscope")
    try:
        assert data_folder() == settings_folder()
    finally:
        QCoreApplication.setOrganizationName(names[0])
        QCoreApplication.setApplicationName(names[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the menu entry is Linux's")
def test_the_help_menu_adds_and_removes_the_menu_entry(workspace, host, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    DesktopEntryFeature(workspace, host)
    assert host.actions[INSTALL_ACTION].menu == "Help"
    host.trigger(INSTALL_ACTION)
    entry = tmp_path / "applications" / ENTRY_NAME
    assert Path(read_exec(entry)[0]).is_file()
    assert host.statuses[-1] == f"Hookscope is in your applications menu ({entry})."
    host.trigger(REMOVE_ACTION)
    assert not entry.exists() and host.statuses[-1] == "Hookscope's menu entry is removed."
    assert host.errors == []


def test_the_about_box_opens_every_licence(qtbot) -> None:
    parent = QApplication.activeWindow()
    box = show_about(parent)
    qtbot.addWidget(box)
    assert "MIT" in box.text() and "LGPL" in box.text()
    button = next(b for b in box.findChildren(QPushButton) if b.objectName() == "about.licences")
    button.click()
    dialog = next(w for w in QApplication.topLevelWidgets() if isinstance(w, LicensesDialog) and w.isVisible())
    qtbot.addWidget(dialog)
    titles = [dialog.list.item(i).text() for i in range(dialog.list.count())]
    assert titles[:4] == ["Third-party notices", "Hookscope (MIT)", "GNU LGPL 3.0 (Qt)", "GNU GPL 3.0"]
    assert "replace the Qt libraries" in dialog.text.toPlainText()
    dialog.list.setCurrentRow(2)
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in dialog.text.toPlainText()
    dialog.list.setCurrentRow(1)
    assert dialog.text.toPlainText().startswith("MIT License")
    assert all(path.is_file() for _title, path in licence_files())
    dialog.close()

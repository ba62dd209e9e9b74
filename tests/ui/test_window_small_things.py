"""Small things a person meets: Previous is off on the first image; file dialogs start in the folder used last."""

from __future__ import annotations

import numpy as np
from conftest import RUN_TIMEOUT_MS
from PySide6.QtWidgets import QFileDialog


def test_previous_is_off_on_the_first_image(make_window, qtbot, photos) -> None:
    window = make_window(remember=False)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    previous = window.menus.actions["file.previous_image"]
    assert not previous.isEnabled()  # one image, no list: nothing before it
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.open_files([str(path) for path in photos])
    assert window.workspace.image_index == 0
    assert not previous.isEnabled() and not window.input_panel.previous_button.isEnabled()
    previous.trigger()  # Page Up on the first image: nothing happens (it used to jump to the last one)
    assert window.workspace.image_index == 0
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.menus.actions["file.next_image"].trigger()
    assert previous.isEnabled() and window.input_panel.previous_button.isEnabled()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        previous.trigger()
    assert window.workspace.image_index == 0 and not previous.isEnabled()


class Answers:
    """Stands in for the native file dialogs (modal, they cannot run in a test): records where each one started
    and answers with a chosen path."""

    def __init__(self, monkeypatch) -> None:
        self.starts: list[str] = []
        self.answer = ""
        for name in ("getSaveFileName", "getOpenFileName"):
            monkeypatch.setattr(QFileDialog, name, staticmethod(self._file))
        monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(self._folder))

    def _file(self, parent, caption, start="", *args, **kwargs):
        self.starts.append(start)
        return self.answer, ""

    def _folder(self, parent, caption, start="", *args, **kwargs):
        self.starts.append(start)
        return self.answer


def test_file_dialogs_start_in_the_folder_used_last(make_window, qtbot, tmp_path, monkeypatch) -> None:
    import os

    window = make_window(remember=False)
    window.show_dialogs = False
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    answers = Answers(monkeypatch)
    visualize = window.features["visualize"]
    visualize._show_image(np.full((32, 32, 3), 90, np.uint8))
    saved = tmp_path / "pictures" / "dream.png"
    saved.parent.mkdir()
    answers.answer = str(saved)
    visualize.save_dialog()
    assert saved.is_file()
    visualize.save_dialog()
    assert os.path.dirname(answers.starts[-1]) == str(saved.parent)  # the second Save… starts where the first saved

    scan = window.features["scan"]
    scanned = tmp_path / "dataset"  # empty: each scan ends at once with its message
    scanned.mkdir()
    answers.answer = str(scanned)
    scan.scan_dialog()
    scan.scan_dialog()
    assert answers.starts[-1] == str(scanned)


def test_the_screenshot_dialog_starts_where_the_last_screenshot_went(make_window, qtbot, tmp_path, monkeypatch):
    import os

    from hookscope.ui.actions.builtin import screenshot_dialog

    window = make_window(remember=False)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    answers = Answers(monkeypatch)
    shot = tmp_path / "shots" / "window.png"
    shot.parent.mkdir()
    answers.answer = str(shot)
    screenshot_dialog(window)
    assert shot.is_file()
    screenshot_dialog(window)
    assert os.path.dirname(answers.starts[-1]) == str(shot.parent)

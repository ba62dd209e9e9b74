"""What makes it a desktop app: icon, About box with version and credits, unexpected errors as dialogs."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication, QMessageBox

from hookscope import __version__
from hookscope.ui.app import install_error_dialog
from hookscope.ui.dialogs.about import app_icon, show_about


def test_icon_and_about_box_credit_the_photographers(make_window) -> None:
    window = make_window()
    assert not app_icon().isNull()
    box = show_about(window)
    text = box.text()
    assert f"Hookscope {__version__}" in text
    assert "Stefan van der Walt" in text and "Rachel Michetti" in text
    assert isinstance(box, QMessageBox) and box.isVisible()
    box.close()


def test_unexpected_errors_become_a_dialog_and_a_log(make_window, private_settings, monkeypatch) -> None:
    window = make_window()
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    install_error_dialog(window)
    try:
        raise ZeroDivisionError("a bug")
    except ZeroDivisionError:
        sys.excepthook(*sys.exc_info())
    assert "Unexpected error: ZeroDivisionError: a bug" in window.last_error
    assert "ZeroDivisionError" in (private_settings / "hookscope-errors.log").read_text()
    for dialog in QApplication.topLevelWidgets():
        if isinstance(dialog, QMessageBox):
            dialog.close()

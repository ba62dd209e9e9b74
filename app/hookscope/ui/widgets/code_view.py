"""The read-only code box and the notice line that features showing plain PyTorch share (inspector, lessons)."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QLabel, QPlainTextEdit


def code_view(placeholder: str, wrap: bool = True) -> QPlainTextEdit:
    """Read-only, fixed-width; ``wrap`` at the widget's width (short snippets) or not (scripts to copy)."""
    code = QPlainTextEdit()
    code.setReadOnly(True)
    code.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth if wrap else QPlainTextEdit.LineWrapMode.NoWrap)
    code.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    code.setPlaceholderText(placeholder)
    return code


def notice_label() -> QLabel:
    """A wrapped, highlighted line (the theme's "notice"), hidden until there is something to say."""
    label = QLabel("")
    label.setObjectName("notice")
    label.setWordWrap(True)
    label.setVisible(False)
    return label

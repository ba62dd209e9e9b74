"""What a restored session could not bring back (a moved image, a module the model lacks): one box, not modal."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def show_session_problems(box: QMessageBox | None, problems: list[str], parent: QWidget) -> QMessageBox:
    """Show ``problems`` in ``box`` (made on first use, then reused so restores never stack boxes); returns it."""
    if box is None:
        box = QMessageBox(QMessageBox.Icon.Warning, "Session restored, with problems", "", parent=parent)
    box.setText("The session was restored, except for:")
    box.setInformativeText("\n\n".join(f"• {line}" for line in problems))
    box.open()
    return box

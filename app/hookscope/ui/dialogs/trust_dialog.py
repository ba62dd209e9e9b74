"""The warning before code from a file runs (a pickled model, a ``model.py:build`` factory).

It names the file and the Python objects a pickle would import; Cancel is the default and the Escape answer, so
only a deliberate click runs the code. Model files and sessions both ask it.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox, QWidget

from hookscope.core.models.files import split_factory

SHOWN_OBJECTS = 12  # the imports listed before "… and N more"


class TrustBox(QMessageBox):
    """The question; ``trust_button`` is the one that says yes."""

    trust_button: QAbstractButton


def trust_box(path: str, objects: tuple[str, ...], parent: QWidget | None = None) -> TrustBox:
    """The question for ``path`` (a file, or ``model.py:build``); ``box.trust_button`` is the one that says yes."""
    file, factory = split_factory(path)
    box = TrustBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("Run code from this file?")
    box.setTextFormat(Qt.TextFormat.RichText)
    name = html.escape(file.name)
    if factory is not None:
        box.setText(
            f"Opening <b>{name}</b> imports it and calls <code>{html.escape(factory)}()</code>: "
            "the Python code in the file runs on this computer."
        )
    else:
        box.setText(
            f"<b>{name}</b> holds a pickled Python model. Opening it unpickles it, which can run any "
            "code the file names on this computer."
        )
    parts = [f"<p>{html.escape(str(file))}</p>"]
    if objects:
        listed = "<br>".join(html.escape(o) for o in objects[:SHOWN_OBJECTS])
        more = f"<br>… and {len(objects) - SHOWN_OBJECTS} more" if len(objects) > SHOWN_OBJECTS else ""
        parts.append(f"<p>The file would import these Python objects:<br><code>{listed}{more}</code></p>")
    parts.append("<p>Open it only if you trust the person who made it.</p>")
    box.setInformativeText("".join(parts))
    box.trust_button = box.addButton("I trust this file", QMessageBox.ButtonRole.AcceptRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    return box


def ask_trust(path: str, objects: tuple[str, ...], parent: QWidget | None = None) -> bool:
    """Whether the user trusts ``path`` enough to run code from it (Cancel is the default answer)."""
    box = trust_box(path, objects, parent)
    box.exec()
    return box.clickedButton() is box.trust_button

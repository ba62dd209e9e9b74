"""The About box and the application icon: version, credits and licences, as a desktop app should show them."""

from __future__ import annotations

import platform

import torch
from PySide6 import __version__ as pyside_version
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QMessageBox, QWidget

from hookscope._version import __version__
from hookscope.core.common.resources import resource
from hookscope.ui.dialogs.licenses import show_licenses

CREDITS = (
    "Sample photographs (CC0, as distributed with scikit-image): <i>Chelsea the cat</i> by Stefan van der Walt; "
    "<i>coffee</i> by Rachel Michetti, courtesy of Pikolo Espresso Bar.<br>"
    "Colormaps viridis, magma, plasma, inferno and cividis (CC0) by Nathaniel J. Smith, Stefan van der Walt and "
    "Eric Firing, as shipped by pyqtgraph."
)


def app_icon() -> QIcon:
    icon = QIcon()
    for name in ("icons/hookscope-256.png", "icons/hookscope.png"):
        path = resource(name)
        if path.is_file():
            icon.addFile(str(path))
    return icon


def about_html() -> str:
    return (
        f"<h3>Hookscope {__version__}</h3>"
        "<p>Look inside a PyTorch network: every tick is a real hook on the live model.</p>"
        f"<p>PyTorch {torch.__version__} · Qt for Python {pyside_version} · Python {platform.python_version()}</p>"
        f"<p><small>{CREDITS}</small></p>"
        "<p><small>Hookscope is free software under the MIT licence. It includes PyTorch (BSD), Qt for Python "
        "(LGPL 3.0: you may replace its Qt libraries), pyqtgraph (MIT), superqt (BSD), NumPy (BSD) and Pillow "
        "(HPND); <b>Licences</b> shows every text.</small></p>"
    )


def show_about(parent: QWidget) -> QMessageBox:
    """Non-blocking (``open``), so tests and a busy window never wait on it."""
    box = QMessageBox(parent)
    box.setWindowTitle("About Hookscope")
    box.setIconPixmap(app_icon().pixmap(96, 96))
    box.setText(about_html())
    ok = box.addButton(QMessageBox.StandardButton.Ok)
    # Escape and the title bar's ✕ close it: with a second button a message box finds no escape button by itself
    # and refuses to close (seen as an About box left open by a test's close()).
    box.setEscapeButton(ok)
    licences = box.addButton("Licences…", QMessageBox.ButtonRole.ActionRole)
    licences.setObjectName("about.licences")
    licences.clicked.connect(lambda: show_licenses(parent))
    box.open()
    return box

"""The About box and the application icon: version, credits and licences, as a desktop app should show them."""

from __future__ import annotations

import html
import platform

import torch
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QMessageBox, QWidget

from hookscope._version import __version__
from hookscope.core.common.project import homepage, releases_page
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


def torch_build() -> str:
    """Which build of PyTorch is running, in words: the CPU-only wheels and the CUDA ones differ by gigabytes
    and by what they can run on, and the version alone does not always say it (PyPI's Linux wheel is CUDA)."""
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda} build"
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip} build"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_built():
        return "CPU and Apple GPU (MPS) build"
    return "CPU-only build"


def _link(address: str) -> str:
    shown = address.removeprefix("https://").removeprefix("http://")
    return f'<a href="{html.escape(address, quote=True)}">{html.escape(shown)}</a>'


def project_html() -> str:
    """The project's address and its releases page ([project.urls]); nothing when the metadata has none."""
    home, releases = homepage(), releases_page()
    parts = ([f"Project: {_link(home)}"] if home else []) + ([f"Downloads: {_link(releases)}"] if releases else [])
    return f"<p>{'<br>'.join(parts)}</p>" if parts else ""


def about_html() -> str:
    return (
        f"<h3>Hookscope {__version__}</h3>"
        "<p>Look inside a PyTorch network: every tick is a real hook on the live model.</p>"
        f"{project_html()}"
        f"<p>PyTorch {torch.__version__} ({torch_build()}) · Qt for Python {pyside_version} · "
        f"Python {platform.python_version()}</p>"
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
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(about_html())
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)  # the links open in the browser
    ok = box.addButton(QMessageBox.StandardButton.Ok)
    # Escape and the title bar's ✕ close it: with a second button a message box finds no escape button by itself
    # and refuses to close (seen as an About box left open by a test's close()).
    box.setEscapeButton(ok)
    licences = box.addButton("Licences…", QMessageBox.ButtonRole.ActionRole)
    licences.setObjectName("about.licences")
    licences.clicked.connect(lambda: show_licenses(parent))
    box.open()
    return box

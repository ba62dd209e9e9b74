"""Help > About Hookscope says which version runs, where the project and its downloads are (the addresses written
once, in pyproject.toml's [project.urls], read from the installed package's metadata) and which build of PyTorch
runs (CUDA or CPU-only: the two differ by gigabytes)."""

from __future__ import annotations

from pathlib import Path

import tomllib
import torch
from PySide6.QtWidgets import QLabel, QWidget

from hookscope import __version__
from hookscope.ui.dialogs.about import show_about, torch_build

ROOT = Path(__file__).resolve().parents[2]


def project_urls() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]


def test_the_about_box_links_the_project_and_its_releases_page(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    box = show_about(parent)
    qtbot.addWidget(box)
    urls = project_urls()
    label = box.findChild(QLabel, "qt_msgbox_label")
    assert label is not None and label.isVisible()
    assert f"Hookscope {__version__}" in label.text()
    assert f'<a href="{urls["Homepage"]}">' in label.text() and f'<a href="{urls["Releases"]}">' in label.text()
    assert label.openExternalLinks()  # a click opens the page in the desktop's browser
    box.close()


def test_the_about_box_says_which_torch_build_runs(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    box = show_about(parent)
    qtbot.addWidget(box)
    words = torch_build()
    assert f"PyTorch {torch.__version__} ({words})" in box.text()
    if torch.version.cuda:  # this project's machines run PyPI's Linux torch, a CUDA build
        assert words == f"CUDA {torch.version.cuda} build"
    else:
        assert words in ("CPU-only build", "CPU and Apple GPU (MPS) build") or words.startswith("ROCm ")
    box.close()

"""Files shipped in ``resources/``: found the same way from a source checkout, a pip install or a bundle."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import numpy as np

SAMPLE_IMAGE = "chelsea.png"
COLORMAPS = ("viridis", "magma", "plasma", "inferno", "cividis", "gray")


@cache
def resource_dir() -> Path:
    """``hookscope/resources`` when installed, the checkout's ``resources/`` (beside ``app/``) or a PyInstaller
    bundle's."""
    here = Path(__file__).resolve().parents[2]  # hookscope/ (this file is hookscope/core/common/resources.py)
    candidates = [here / "resources", here.parents[1] / "resources"]  # installed; a checkout's app/hookscope
    if hasattr(sys, "_MEIPASS"):
        candidates.insert(0, Path(sys._MEIPASS) / "resources")
    for candidate in candidates:
        if (candidate / SAMPLE_IMAGE).is_file():
            return candidate
    raise FileNotFoundError("Hookscope's resources folder is missing from this installation.")


def resource(name: str) -> Path:
    return resource_dir() / name


def sample_image() -> Path:
    """The bundled photograph the app starts on (CC0, see resources/SAMPLE-IMAGES-LICENSE.md)."""
    return resource(SAMPLE_IMAGE)


@cache
def colormap_lut(name: str) -> np.ndarray:
    """A (256, 3) uint8 lookup table; the same data pyqtgraph ships (matplotlib's CC0 maps)."""
    if name == "gray":
        ramp = np.arange(256, dtype=np.uint8)
        return np.stack([ramp, ramp, ramp], axis=1)
    if name not in COLORMAPS:
        raise ValueError(f"Unknown colormap '{name}'; use one of: {', '.join(COLORMAPS)}.")
    table = np.loadtxt(resource(f"colormaps/{name}.csv"), delimiter=",", comments=";")
    return np.clip(np.round(table * 255), 0, 255).astype(np.uint8)


def apply_colormap(image: np.ndarray, name: str = "viridis") -> np.ndarray:
    """uint8 (H, W) -> uint8 (H, W, 3) RGB through the named lookup table."""
    return colormap_lut(name)[image]

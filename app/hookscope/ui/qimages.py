"""Qt's images as numpy arrays: the one copy out of a ``QImage`` (a pasted picture, the viewer's screenshot)."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QImage


def qimage_array(image: QImage, alpha: bool = True) -> np.ndarray:
    """``image`` as uint8 (height, width, 4) RGBA, or (height, width, 3) RGB without ``alpha``; rows copied without
    Qt's line padding."""
    channels = 4 if alpha else 3
    converted = image.convertToFormat(QImage.Format.Format_RGBA8888 if alpha else QImage.Format.Format_RGB888)
    width, height, stride = converted.width(), converted.height(), converted.bytesPerLine()
    buffer = np.frombuffer(converted.constBits(), dtype=np.uint8, count=stride * height)
    return buffer.reshape(height, stride)[:, : width * channels].reshape(height, width, channels).copy()

"""Real video files for the tests, written with OpenCV's own writer (no camera is attached to the test machines).

Frame ``i`` is one flat colour whose green level says its index (``GREEN_STEP * i``), red full and blue zero, so
that a test can tell from the pixels which frame it got and that the channels come out in RGB order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

cv2 = __import__("pytest").importorskip("cv2")  # the 'live' extra; the 'test' extra installs it

GREEN_STEP = 8  # up to 32 frames (index 31: green 248); mp4v is off by a few levels


def write_video(path: Path, frames: int = 30, fps: float = 25.0, size: tuple[int, int] = (64, 48)) -> Path:
    """Write ``frames`` frames: MJPG for .avi, mp4v for .mp4 (both in every OpenCV wheel's FFmpeg)."""
    assert frames * GREEN_STEP <= 256, "frame numbers are green levels: at most 32 frames"
    fourcc = {".avi": "MJPG", ".mp4": "mp4v"}[path.suffix]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
    assert writer.isOpened(), f"OpenCV cannot write {path.suffix} here"
    width, height = size
    for index in range(frames):
        bgr = np.zeros((height, width, 3), np.uint8)
        bgr[..., 1] = GREEN_STEP * index
        bgr[..., 2] = 255
        writer.write(bgr)
    writer.release()
    return path


def frame_number(rgb: np.ndarray) -> int:
    """The index a frame written by :func:`write_video` carries in its green level."""
    return int(round(float(rgb[..., 1].mean()) / GREEN_STEP))


def truncate(path: Path, out: Path, keep: float = 0.5) -> Path:
    """The first ``keep`` of ``path``'s bytes, as a download or a copy that stopped half way leaves it."""
    data = path.read_bytes()
    out.write_bytes(data[: int(len(data) * keep)])
    return out

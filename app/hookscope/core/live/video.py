"""Video files and cameras as a stream of RGB frames, read on their own thread, the newest frame winning.

The reader interface, Qt-free, that the command line (``hookscope live``, ``hookscope export --video``) and the
window share:

- :func:`open_video` (a file) and :func:`open_camera` (a camera by index) give a :class:`VideoSource`: its
  :class:`SourceInfo` and ``read()``, one :class:`Frame` at a time (RGB ``uint8`` (H, W, 3), with its index and
  time), None at the end. :func:`list_cameras` says which cameras there are; :func:`no_camera_line` is the one
  line for when there are none.
- :class:`LatestFrame` reads a source on a thread of its own and hands the consumer the newest frame: a consumer
  slower than the source gets fewer frames, never older ones (a frame it did not take in time is dropped and
  counted, never queued). A file plays at its own frame rate, as a camera would (``paced``), or as fast as the
  consumer takes frames, none dropped (``lossless``).

Capture is OpenCV's (``opencv-python-headless``, the ``live`` extra): cameras through V4L2 / DirectShow /
AVFoundation, files through its bundled FFmpeg. It is imported only when a source is opened, so the rest of the
app runs without it. Every failure a user can cause is one :class:`VideoError` line naming the file or camera.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from hookscope.core.common.errors import HookscopeError, Remedy

VIDEO_SUFFIXES: frozenset[str] = frozenset(
    {".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv", ".3gp", ".ts"}
)
# A file whose header announces more frames than it holds by more than this is truncated (FFmpeg's frame count
# is the container's, or its duration times its rate, which may be off by a frame for a sound file).
_TRUNCATION_SLACK = 1
_CAMERA_PROBES = 8  # indices tried where the system lists no camera devices (Windows, macOS)
INSTALL_HINT = "pip install 'hookscope[live]' (opencv-python-headless)"


class VideoError(HookscopeError):
    """A video file or camera that cannot be read; ``path`` is the file, when one is at fault."""


@dataclass(frozen=True)
class Frame:
    """One frame: ``rgb`` is (H, W, 3) uint8, C-contiguous. ``index`` counts from 0 in the source; ``time_s`` is
    its presentation time in a file, the seconds since the camera was opened for a camera."""

    index: int
    time_s: float
    rgb: np.ndarray


@dataclass(frozen=True)
class SourceInfo:
    """What a source is: ``kind`` "video" or "camera"; ``fps`` as the source announces it (None when it does not);
    ``frame_count`` of a file (None when unknown, and for a camera)."""

    name: str
    kind: str
    width: int
    height: int
    fps: float | None
    frame_count: int | None

    def describe(self) -> str:
        rate = f" at {self.fps:g} fps" if self.fps else ""
        count = f", {self.frame_count} frames" if self.frame_count else ""
        return f"{self.name} ({self.width}x{self.height}{rate}{count})"


@dataclass(frozen=True)
class CameraInfo:
    index: int
    name: str


def _cv2() -> Any:
    """OpenCV, quiet: its own warnings and FFmpeg's go to stderr by themselves (a bad file would print 'moov atom
    not found' above our one line), so both are silenced before it is first imported; what went wrong is said by
    :class:`VideoError` instead."""
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
    try:
        import cv2
    except ImportError as error:
        raise VideoError(f"Reading video needs OpenCV, which is not installed: {INSTALL_HINT}.") from error
    # OpenCV's colour conversion would otherwise start a thread pool as wide as the machine, next to the model's
    # own threads; converting one frame is a fraction of a millisecond on one core.
    cv2.setNumThreads(1)
    return cv2


def _display(path: str | os.PathLike) -> str:
    return os.fsdecode(path).replace("\r", " ").replace("\n", " ")


class VideoSource:
    """A video file or a camera, read one frame at a time (``read``) on whichever thread calls it; not thread-safe:
    :class:`LatestFrame` gives it a thread of its own. A context manager; ``close`` releases the device or file."""

    def __init__(self, capture: Any, info: SourceInfo, path: str | None) -> None:
        self._capture = capture
        self.info = info
        self.path = path
        self._next_index = 0
        self._opened_at = time.monotonic()
        self._cv2 = _cv2()

    @property
    def frames_read(self) -> int:
        return self._next_index

    def read(self) -> Frame | None:
        """The next frame, or None at the end of a file (or when a camera stops giving frames).

        Raises :class:`VideoError` at the end of a file that holds fewer frames than its header announces (truncated
        or damaged), after every frame it does hold was read.
        """
        if self._capture is None:
            return None
        ok, bgr = self._capture.read()
        if not ok or bgr is None:
            self._check_complete()
            return None
        self._next_index += 1
        return self._frame(bgr)

    def _frame(self, bgr: np.ndarray) -> Frame:
        """The frame just decoded (``_next_index`` already counts it), in RGB, with its time."""
        index = self._next_index - 1
        if self.info.kind == "camera":
            when = time.monotonic() - self._opened_at
        else:
            msec = self._capture.get(self._cv2.CAP_PROP_POS_MSEC)
            when = msec / 1000 if msec > 0 or index == 0 else index / (self.info.fps or 1.0)
        if bgr.ndim == 2:
            rgb = self._cv2.cvtColor(bgr, self._cv2.COLOR_GRAY2RGB)
        else:
            rgb = self._cv2.cvtColor(bgr, self._cv2.COLOR_BGR2RGB)
        return Frame(index, float(when), np.ascontiguousarray(rgb))

    def _check_complete(self) -> None:
        announced = self.info.frame_count
        if self.info.kind != "video" or not announced:
            return
        if self._next_index == 0:
            raise VideoError(f"Cannot read '{self.info.name}': no frame of it could be decoded (damaged, or a codec "
                             "this OpenCV's FFmpeg does not have).", path=self.path)  # fmt: skip
        if announced - self._next_index > _TRUNCATION_SLACK:
            raise VideoError(
                f"'{self.info.name}' ends after frame {self._next_index - 1}, but its header announces "
                f"{announced} frames: the file is truncated or damaged.",
                path=self.path,
            )

    def skip_to(self, index: int) -> None:
        """Read (and drop) frames until the next ``read`` gives frame ``index``: decoded in order, so exact for
        every codec (a seek by frame number lands on a key frame in some). Raises :class:`VideoError` when the
        file ends first."""
        while self._next_index < index:
            ok = self._capture.grab() if self._capture is not None else False
            if not ok:
                self._check_complete()
                raise VideoError(f"'{self.info.name}' has only {self._next_index} frames (0-{self._next_index - 1}); "
                                 f"frame {index} does not exist.", path=self.path)  # fmt: skip
            self._next_index += 1

    def drop(self, count: int) -> int:
        """Decode and drop the next ``count`` frames without converting them (OpenCV's ``grab``: the colour
        conversion is skipped); the number dropped, fewer at the end of the file (the next ``read`` then says
        whether the file is complete)."""
        dropped = 0
        while dropped < count:
            if self._capture is None or not self._capture.grab():
                break  # the end (or where a truncated file breaks off): the next ``read`` says which
            self._next_index += 1
            dropped += 1
        return dropped

    def seek(self, index: int) -> None:
        """Make the next ``read`` give frame ``index`` of a file: OpenCV's FFmpeg reader seeks to the key frame
        before it and decodes up to it (exact for the formats the tests write: MJPG .avi, mp4v .mp4)."""
        if self.info.kind != "video" or self._capture is None:
            raise VideoError(f"{self.info.name} cannot seek (only a video file can).")
        last = (self.info.frame_count or index + 1) - 1
        index = max(0, min(int(index), last))
        self._capture.set(self._cv2.CAP_PROP_POS_FRAMES, index)
        self._next_index = index

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None

    @property
    def closed(self) -> bool:
        return self._capture is None

    def __enter__(self) -> VideoSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_picture(path: str | os.PathLike) -> bool:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return getattr(image, "n_frames", 1) == 1  # an animated GIF or PNG plays as a video
    except (OSError, UnidentifiedImageError, ValueError):
        return False


def open_video(path: str | os.PathLike) -> VideoSource:
    """Open a video file; :class:`VideoError` (one line, ``path``) for a missing file, a folder, an empty file, a
    picture, or a file FFmpeg cannot open as a video."""
    name = _display(path)
    fail_path = os.fsdecode(path)
    if not os.path.exists(path):
        raise VideoError(f"Cannot read '{name}': the file does not exist.", path=fail_path)
    if os.path.isdir(path):
        raise VideoError(f"Cannot read '{name}': it is a folder, not a video file.", path=fail_path)
    if os.path.getsize(path) == 0:
        raise VideoError(f"Cannot read '{name}': the file is empty.", path=fail_path)
    if _is_picture(path):
        raise VideoError(f"'{name}' is a picture, not a video: open it as an image.", path=fail_path)
    cv2 = _cv2()
    # FFmpeg alone for files: OpenCV's fallbacks would open a picture or a numbered image sequence as a "video".
    # One decoding thread: the model's threads have the cores, and FFmpeg's frame threads handing each frame over
    # cost more than they save (a 320x240 frame read in 0.26 ms instead of 0.38, its dropped ones grabbed in half
    # the time); a frame is decoded when it is wanted, not ahead (see LatestFrame).
    capture = cv2.VideoCapture(os.fsdecode(path), cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
    if not capture.isOpened():
        capture.release()
        raise VideoError(
            f"Cannot read '{name}': it is not a video file FFmpeg can open (not a video, truncated before its "
            "index, or damaged).",
            path=fail_path,
        )
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    fps = float(capture.get(cv2.CAP_PROP_FPS))
    info = SourceInfo(
        name=name,
        kind="video",
        width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        fps=fps if 0 < fps < 1000 else None,
        frame_count=count if count > 0 else None,
    )
    if info.width <= 0 or info.height <= 0:
        capture.release()
        raise VideoError(f"Cannot read '{name}': it holds no video picture (sound only?).", path=fail_path)
    return VideoSource(capture, info, fail_path)


def _camera_backend(cv2: Any) -> int:
    return {"linux": cv2.CAP_V4L2, "win32": cv2.CAP_DSHOW, "darwin": cv2.CAP_AVFOUNDATION}.get(
        sys.platform, cv2.CAP_ANY
    )


def _candidate_cameras() -> list[int]:
    """The camera indices worth trying: on Linux the V4L2 device nodes that exist (a machine without any has no
    camera, and probing would only print warnings); elsewhere the first few indices."""
    if sys.platform.startswith("linux"):
        nodes = glob.glob("/dev/video[0-9]*")
        return sorted(int(node[len("/dev/video") :]) for node in nodes if node[len("/dev/video") :].isdigit())
    return list(range(_CAMERA_PROBES))


def list_cameras() -> list[CameraInfo]:
    """The cameras that open and give a frame (a V4L2 node can be a metadata node of a camera, not a camera)."""
    cameras: list[CameraInfo] = []
    candidates = _candidate_cameras()
    if not candidates:
        return cameras
    cv2 = _cv2()
    for index in candidates:
        capture = cv2.VideoCapture(index, _camera_backend(cv2))
        try:
            if capture.isOpened() and capture.grab():
                width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
                height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
                cameras.append(CameraInfo(index, f"camera {index} ({width}x{height}, {capture.getBackendName()})"))
        finally:
            capture.release()
    return cameras


def no_camera_error() -> VideoError:
    """The error of a machine with no camera, saying where it looked; its remedy (a video file) each front end
    words its own way."""
    if sys.platform.startswith("linux"):
        where = "no /dev/video* device answers" if _candidate_cameras() else "there is no /dev/video* device"
    else:
        where = f"none of the first {_CAMERA_PROBES} camera indices answers"
    return VideoError(f"No camera found: {where}.", remedy=Remedy.VIDEO_INSTEAD)


def no_camera_line() -> str:
    """The one line for a machine with no camera, in plain words."""
    return str(no_camera_error())


def open_camera(index: int = 0) -> VideoSource:
    """Open camera ``index``; :class:`VideoError` with :func:`no_camera_line` when there is none, or naming the
    camera when that one cannot be opened."""
    if index not in _candidate_cameras():
        if not list_cameras():
            raise no_camera_error()
        raise VideoError(f"There is no camera {index}; the cameras found: {', '.join(c.name for c in list_cameras())}.")
    cv2 = _cv2()
    capture = cv2.VideoCapture(index, _camera_backend(cv2))
    if not capture.isOpened():
        capture.release()
        raise VideoError(f"Camera {index} cannot be opened (in use by another program, or not a camera).")
    fps = float(capture.get(cv2.CAP_PROP_FPS))
    info = SourceInfo(
        name=f"camera {index}",
        kind="camera",
        width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        fps=fps if 0 < fps < 1000 else None,
        frame_count=None,
    )
    return VideoSource(capture, info, None)


class LatestFrame:
    """A source read on a thread of its own into a one-frame mailbox: ``take`` gives the newest frame.

    A frame the consumer did not take before the next one arrived is dropped (counted in ``dropped``), never
    queued: memory holds at most two frames, and a slow model always works on the latest picture.

    ``paced``: a file's frames are released at their own times (as a camera gives them), so a slow consumer drops
    frames; a camera paces itself. A paced file is read on demand: the reader sleeps until the consumer asks for a
    frame (``take``), then passes over the frames that came due meanwhile without converting them (counted as read
    and dropped, as if they had been put and replaced) and puts the newest one, or waits for the next one's time.
    The reader so never wakes while the model runs: on two cores, a thread that wakes 30 times a second beside
    PyTorch's two threads cost the model 2-3% of its rate (``hookscope live``, ResNet-18). ``on_frame`` is called
    on the reader's thread after each frame put (the window turns it into a queued signal). ``lossless``: the reader waits until the consumer took a frame before putting
    the next one (every frame is processed, the next one decoded meanwhile); for a file run as fast as it can go.
    ``pause`` holds a file where it is (nothing is read), ``step`` then reads one frame at a time, ``seek`` puts
    any frame, and ``resume`` plays on from the last frame put, at the file's own spacing.
    A context manager: closing stops the thread and releases the source.
    """

    def __init__(
        self,
        source: VideoSource,
        *,
        paced: bool = True,
        lossless: bool = False,
        loop: bool = False,
        on_frame: Callable[[], object] | None = None,
    ) -> None:
        if paced and lossless:
            raise ValueError("LatestFrame: a stream is paced (frames dropped when late) or lossless, not both.")
        self.source = source
        self.paced = paced and source.info.kind == "video"
        self.on_frame = on_frame
        self._wanted = False  # the consumer asked for a frame and none was put since (a paced file reads on demand)
        self._offset = 0.0  # the stream time at the start of the current pass through a looping file
        self.lossless = lossless
        self.loop = loop and source.info.kind == "video"
        self.read_count = 0  # frames the reader put into the mailbox
        self.taken = 0  # frames the consumer took
        self.dropped = 0  # frames replaced before the consumer took them
        self._lock = threading.Condition()
        self._slot: Frame | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._paused = False
        self._resumed = False  # a pause ended: the reader moves its clock on (``_after_pause``)
        self._steps = 0  # frames to read while paused
        self._seek_to: int | None = None  # a frame asked for while paused
        self._stepping = False
        # A file plays on from the frame it is at, at once: frames a caller read before (``hookscope live`` runs the
        # first one to time the model alone) are the stream's past, so the next frame is due now, not a frame later.
        self._start_time = source.frames_read / (source.info.fps or 25.0) if source.info.kind == "video" else 0.0
        self._played = 0.0  # the stream time of the last frame put
        self._anchor = time.monotonic() - self._start_time
        self._started_at = time.monotonic()
        self._last_read_at = self._started_at
        self._thread = threading.Thread(target=self._read_all, name=f"video reader: {source.info.name}", daemon=True)
        self._thread.start()

    @property
    def source_fps(self) -> float:
        """Frames the reader delivered per second of wall time (the source's real rate, as measured)."""
        elapsed = self._last_read_at - self._started_at
        return (self.read_count - 1) / elapsed if self.read_count > 1 and elapsed > 0 else 0.0

    def _read_all(self) -> None:
        offset = 0.0  # the time of the frames already played, when a file loops
        self._offset = offset
        self._anchor = time.monotonic() - self._start_time  # the wall time of the stream's time 0 (moved by a pause)
        try:
            while self._next_turn():
                with self._lock:
                    seek, self._seek_to = self._seek_to, None
                frame = None
                if seek is not None:
                    self.source.seek(seek)
                elif self.paced and not self._stepping:
                    turn = self._wait_for_demand()
                    if turn == "stop":
                        break
                    if turn == "again":  # paused or a seek asked for meanwhile: the top of the loop handles it
                        continue
                    frame = self._pass_over_due_frames(offset)
                if frame is None:
                    frame = self.source.read()
                if frame is None and self.loop and self.source.frames_read:
                    offset += self.source.frames_read / (self.source.info.fps or 25.0)
                    self._offset = offset
                    self.source.close()
                    self.source = open_video(self.source.path or "")
                    frame = self.source.read()
                if frame is None:
                    break
                if self.paced and not self._stepping:
                    turn = self._wait_for_time(offset + frame.time_s)
                    if turn == "stop":
                        break
                    if turn == "seek":  # a frame read before a seek: the one asked for comes instead
                        continue
                self._played = offset + frame.time_s
                self._put(frame)
        except BaseException as error:  # a truncated file, a camera unplugged: given to the consumer, in order
            with self._lock:
                self._error = error
        finally:
            self.source.close()
            with self._lock:
                self._ended = True
                self._lock.notify_all()
            if self.on_frame is not None:  # the end is news too: the consumer learns it without polling
                self.on_frame()

    def _next_turn(self) -> bool:
        """Whether to read the next frame: at once while playing; while paused, only for a ``step``. False once
        closing."""
        with self._lock:
            self._lock.wait_for(lambda: self._stop.is_set() or not self._paused or self._steps > 0
                                or self._seek_to is not None)  # fmt: skip
            self._stepping = self._paused and (self._steps > 0 or self._seek_to is not None)
            if self._stepping and self._seek_to is None:
                self._steps -= 1
            self._after_pause()
            return not self._stop.is_set()

    def _wait_for_demand(self) -> str:
        """Wait until the consumer wants a frame: "go"; "again" when a pause or a seek came first; "stop" when
        closing."""
        with self._lock:
            self._lock.wait_for(lambda: self._stop.is_set() or self._wanted or self._paused
                                or self._seek_to is not None)  # fmt: skip
            if self._stop.is_set():
                return "stop"
            return "go" if self._wanted and not self._paused and self._seek_to is None else "again"

    def _pass_over_due_frames(self, offset: float) -> Frame | None:
        """Decode, without converting, the frames that came due while nobody asked, up to the newest due one
        (read next); the last frame of a file is always read. Counted as read and dropped, as a frame put and
        replaced before it was taken would have been. Returns the last frame passed over when the file ended
        during the pass (a truncated one, or a header that announced more): it is the newest there is."""
        info = self.source.info
        fps = info.fps or 25.0
        newest = int((time.monotonic() - self._anchor - offset) * fps + 1e-6)
        if info.frame_count:
            newest = min(newest, info.frame_count - 1)
        wanted = newest - self.source.frames_read
        passed = self.source.drop(wanted) if wanted > 0 else 0
        last = None
        if 0 < passed < wanted:  # the file ended during the pass: its last frame is the newest, shown after all
            self.source.seek(self.source.frames_read - 1)  # once, at the end (OpenCV keeps no frame a grab failed on)
            last = self.source.read()
        dropped = passed - (last is not None)  # the last one is put, and counted then
        if dropped:
            with self._lock:
                self.read_count += dropped
                self.dropped += dropped
                self._last_read_at = time.monotonic()
        return last

    def _wait_for_time(self, when: float) -> str:
        """Wait until the stream time ``when`` on the wall clock (a pause holds the clock): "put" the frame then,
        "seek" (drop it: a seek was asked for meanwhile) or "stop" (closing)."""
        with self._lock:
            while not self._stop.is_set():
                if self._seek_to is not None:
                    return "seek"
                if self._paused:  # the frame read before the pause waits for a step, a seek or the resume
                    self._lock.wait_for(lambda: self._stop.is_set() or not self._paused or self._steps > 0
                                        or self._seek_to is not None)  # fmt: skip
                    if self._seek_to is not None:
                        continue
                    if self._paused and self._steps > 0:
                        self._steps -= 1
                        return "put"
                    self._after_pause()
                    continue
                remaining = self._anchor + when - time.monotonic()
                if remaining <= 0:
                    return "put"
                self._lock.wait(remaining)
            return "stop"

    def _after_pause(self) -> None:
        """After a pause (and the frames stepped through in it), play on from the last frame put, not from where
        the wall clock would have got to: the frames that follow keep their spacing. Called with the lock held."""
        if self._resumed:
            self._resumed = False
            self._anchor = time.monotonic() - self._played

    def pause(self) -> None:
        """Hold a file where it is (frozen): no frame is read until ``resume``, except one per ``step``."""
        with self._lock:
            self._paused = True
            self._lock.notify_all()

    def resume(self) -> None:
        with self._lock:
            if self._paused:
                self._paused, self._resumed, self._steps = False, True, 0
                self._lock.notify_all()

    def seek(self, index: int) -> None:
        """While paused, on a file: put frame ``index`` (clamped to the file), at once; a frame already waiting in
        the mailbox is dropped. Playing on (``resume``) continues from it."""
        if self.source.info.kind != "video":
            raise VideoError(f"{self.source.info.name} cannot seek (only a video file can).")
        with self._lock:
            if self._paused:
                self._seek_to = int(index)
                self._steps = 0
                self._slot = None
                self._lock.notify_all()

    def step(self) -> None:
        """While paused: read the next frame and put it, at once."""
        with self._lock:
            if self._paused:
                self._steps += 1
                self._lock.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def pending(self) -> bool:
        """Whether a frame is waiting in the mailbox or asked for (``ask``, a ``take`` still waiting)."""
        with self._lock:
            return self._slot is not None or self._wanted

    @property
    def holds_frame(self) -> bool:
        """Whether a frame is waiting in the mailbox (``take`` would return it at once)."""
        with self._lock:
            return self._slot is not None

    def _put(self, frame: Frame) -> None:
        with self._lock:
            if self.lossless:
                while self._slot is not None and not self._stop.is_set():
                    self._lock.wait()
            if self._stop.is_set():  # closing: a frame nobody will take is neither delivered nor dropped
                return
            if self._slot is not None:
                self.dropped += 1
            self._slot = frame
            self._wanted = False
            self.read_count += 1
            self._last_read_at = time.monotonic()
            self._lock.notify_all()
        if self.on_frame is not None:
            self.on_frame()

    def take(self, timeout: float | None = None) -> Frame | None:
        """The newest frame not taken yet, waiting for one; None at the end of the source (or after ``timeout``
        seconds without a frame). Raises the reader's :class:`VideoError` once the frames before it were taken."""
        with self._lock:
            self._ask_locked()  # a paced file reads on demand: this asks for the next frame
            if not self._lock.wait_for(lambda: self._slot is not None or self._ended, timeout):
                return None
            if self._slot is not None:
                frame, self._slot = self._slot, None
                self.taken += 1
                self._lock.notify_all()
                return frame
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            return None

    def ask(self) -> None:
        """Ask for the newest frame now without waiting for it: a paced file decodes it on demand meanwhile, and
        ``take`` then finds it waiting. Nothing happens while a frame waits already or a request is pending."""
        with self._lock:
            self._ask_locked()

    def _ask_locked(self) -> None:
        if self._slot is None and not self._ended and not self._wanted:
            self._wanted = True
            self._lock.notify_all()

    def take_due(self, wait: float) -> Frame | None:
        """``take`` without blocking, except when a paced file's next frame is due already: then the reader is
        decoding it on demand, and this waits for it up to ``wait`` seconds (a fraction of a millisecond at video
        sizes) rather than leave the consumer to come back for it."""
        return self.take(timeout=wait if self._next_frame_due() else 0)

    def _next_frame_due(self) -> bool:
        if not self.paced or self._paused:
            return False
        fps = self.source.info.fps or 25.0
        return self._offset + self.source.frames_read / fps <= time.monotonic() - self._anchor

    def __iter__(self) -> Iterator[Frame]:
        while True:
            frame = self.take()
            if frame is None:
                return
            yield frame

    @property
    def ended(self) -> bool:
        with self._lock:
            return self._ended and self._slot is None

    def close(self, timeout: float = 2.0) -> None:
        """Stop the reader and release the source (a camera's read can block up to a frame's time)."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._thread.join(timeout)

    def __enter__(self) -> LatestFrame:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingFull(VideoError):
    """The disk of a recording filled up: the recording stopped, and the file holds ``frames_kept`` pictures."""


_ROOM_BYTES = 8 * 1024  # a disk with less free than two pages is full (a write that did not fit took the rest)


def _free_bytes(folder: str) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # cannot tell: the writes are trusted


def _mount_of(folder: str) -> str:
    here = os.path.abspath(folder)
    while not os.path.ismount(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here


def _frames_in(cv2: Any, path: str) -> int:
    """How many pictures a file just written holds, decoded one by one (a file cut short by a full disk holds fewer
    than were given to the writer, and its header may still announce them all)."""
    capture = cv2.VideoCapture(path, cv2.CAP_FFMPEG)
    count = 0
    try:
        while capture.isOpened() and capture.grab():
            count += 1
    finally:
        capture.release()
    return count


class VideoRecorder:
    """Writes what was seen as a video file: one picture per source frame, so that it plays at the source's pace.

    ``add(index, rgb)`` gives the picture shown from source frame ``index`` on; a frame the model had no time for
    (dropped) repeats the picture before it, as the screen did. The same index again replaces its picture (a frozen
    frame run again after an edit); an earlier index (a step back) follows the picture before it after one frame. MJPG for .avi, mp4v for .mp4 (both in OpenCV's
    own FFmpeg). Pictures are padded to the first one's size rounded up to even numbers (codecs want them even).
    """

    CODECS = {".mp4": "mp4v", ".avi": "MJPG"}

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        if suffix not in self.CODECS:
            raise VideoError(f"Cannot record to '{_display(path)}': give a .mp4 or .avi file name.",
                             path=os.fsdecode(path))  # fmt: skip
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise VideoError(f"Cannot record to '{_display(path)}': the folder '{folder}' does not exist.",
                             path=os.fsdecode(path))  # fmt: skip
        self.path = os.fsdecode(path)
        self.fps = fps if fps > 0 else 25.0
        self.frames_written = 0
        self.frames_kept: int | None = None  # read back from the file when its disk filled up (see ``close``)
        self._folder = folder
        self._full = False
        self._cv2 = _cv2()
        self._writer: Any = None
        self._size: tuple[int, int] | None = None
        self._last: tuple[int, np.ndarray] | None = None

    def add(self, index: int, rgb: np.ndarray) -> None:
        if self._last is not None:
            last_index, last = self._last
            if index == last_index:  # the same frame run again (a frozen frame, edited): what is seen now
                self._last = (index, rgb)
                return
            for _ in range(max(1, index - last_index)):  # shown until this one came (once, for a step back)
                self._write(last)
        self._last = (index, rgb)

    def close(self) -> None:
        """Write the last picture and close the file (playable from then on). Raises :class:`RecordingFull` when
        its disk filled up: how many pictures the file holds is read back from it (``frames_kept``)."""
        try:
            if self._last is not None and not self._full:
                self._write(self._last[1])
        except RecordingFull:
            pass  # said below, with what was kept
        finally:
            self._last = None
            if self._writer is not None:
                self._writer.release()
                self._writer = None
        if self._full or (self.frames_written and _free_bytes(self._folder) < _ROOM_BYTES):
            self.frames_kept = _frames_in(self._cv2, self.path)
            if self.frames_kept < self.frames_written or self._full:
                raise self._full_error()

    def _full_error(self) -> RecordingFull:
        kept = self.frames_kept if self.frames_kept is not None else 0
        return RecordingFull(
            f"Cannot record to '{_display(self.path)}': the disk {_mount_of(self._folder)} is full; {kept} of the "
            f"{self.frames_written} pictures written ({kept / self.fps:.1f} s) are kept in it.",
            path=self.path,
        )

    def _write(self, rgb: np.ndarray) -> None:
        if self._writer is None:
            height, width = rgb.shape[:2]
            self._size = (width + width % 2, height + height % 2)
            fourcc = self._cv2.VideoWriter_fourcc(*self.CODECS[os.path.splitext(self.path)[1].lower()])
            self._writer = self._cv2.VideoWriter(self.path, fourcc, self.fps, self._size)
            if not self._writer.isOpened():
                self._writer = None
                raise VideoError(f"Cannot record to '{_display(self.path)}': OpenCV cannot write that file.",
                                 path=self.path)  # fmt: skip
        width, height = self._size or (0, 0)
        canvas = np.zeros((height, width, 3), np.uint8)
        h, w = min(height, rgb.shape[0]), min(width, rgb.shape[1])
        canvas[:h, :w] = rgb[:h, :w]
        if self._full:
            raise self._full_error()
        self._writer.write(self._cv2.cvtColor(canvas, self._cv2.COLOR_RGB2BGR))
        self.frames_written += 1
        # OpenCV's writer says nothing when a write fails: the room left on the disk is checked after each picture,
        # and a disk that has filled up stops the recording here (what the file holds is read back from it).
        if _free_bytes(self._folder) < _ROOM_BYTES:
            self._full = True
            self._writer.release()
            self._writer = None
            self.frames_kept = _frames_in(self._cv2, self.path)
            raise self._full_error()

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

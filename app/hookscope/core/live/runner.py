"""A video or camera through the hooked model, frame after frame, measured against the model alone.

:func:`live_run` is the loop ``hookscope live`` runs (and what the window's live view will run in its worker): the
newest frame of a :class:`~hookscope.core.live.video.LatestFrame` is preprocessed and run forward and backward through the
hooks with ``capture_run``, the engine of every other run. Around the hooked frames, the same model runs alone
(``bench.bare_run``: forward, top-1 logit, backward to the input, no hook registered) on a frame of the same
source, before and after, so the processed rate is compared with the model's own rate measured in the same
process, on the same machine state.

The hooks live exactly as long as the run: they are registered on a fresh registry after the first bare phase and
removed before the second one, whatever ends the run (the end of the file, Ctrl-C, a damaged frame).
"""

from __future__ import annotations

import gc
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image

from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.devices import resolve_device
from hookscope.core.engine.floor import bare_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.objectives import with_reference
from hookscope.core.engine.run import run_image
from hookscope.core.engine.target_words import Target
from hookscope.core.live.video import Frame, LatestFrame, VideoError, VideoRecorder, VideoSource
from hookscope.core.models.loaded import LoadedModel
from hookscope.system.termination import Terminated

BARE_WARMUP = 2  # untimed runs before the first bare phase: the allocator and the threads settle
# The model alone is timed before and after the frames; when the two medians differ by more than this, the machine's
# speed changed during the run and the ratio is uncertain by about as much (a shared machine drifts by 3-10% a minute).
DRIFT_NOTICE = 0.05
# A source that delivers frames no more than this much faster than the model alone takes them bounds the processed
# rate by its own: the model waits for frames now and then, and the ratio then measures the source too.
SOURCE_MARGIN = 0.05


@dataclass
class LiveReport:
    """What a live run did. Rates are per second of wall time; ``hooked_ms`` is each processed frame's forward and
    backward as ``capture_run`` timed them, ``bare_ms`` each run of the model alone."""

    frames: int = 0  # frames run through the hooks (timed)
    seconds: float = 0.0  # from taking the first timed frame to the end of the last one's run
    read: int = 0  # frames the source delivered during the timed part
    dropped: int = 0  # of those, frames a newer one replaced before the model was free
    source_fps: float = 0.0  # the source's delivered rate, as measured
    hooked_ms: list[float] = field(default_factory=list)
    bare_ms: list[float] = field(default_factory=list)
    bare_before: int = 0  # how many of ``bare_ms`` ran before the frames (the rest ran after them)
    input_shape: tuple[int, ...] = ()
    hooks: int = 0  # hooks registered during the run
    ended_by: str = "frames"  # "frames" (the count asked for), "end" (of the file), "Ctrl-C", "SIGTERM", "error"
    error: VideoError | None = None  # a truncated or damaged file: what was processed before it stays
    rss_mb: tuple[float, float] | None = None  # resident memory at the first and last timed frame (Linux)

    @property
    def processed_fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 and self.frames else 0.0

    @property
    def engine_fps(self) -> float:
        """The model's own forward+backward rate: 1 / the median bare run."""
        return 1000.0 / statistics.median(self.bare_ms) if self.bare_ms else 0.0

    @property
    def bare_phases(self) -> tuple[list[float], list[float]]:
        """``bare_ms`` split: the runs before the frames and those after them (empty when stopped before)."""
        return self.bare_ms[: self.bare_before], self.bare_ms[self.bare_before :]

    @property
    def ratio(self) -> float:
        """Processed rate over the model's own rate (1.0: reading, preprocessing and the hooks cost nothing)."""
        return self.processed_fps / self.engine_fps if self.engine_fps else 0.0


def model_alone_text(before_ms: list[float], after_ms: list[float]) -> tuple[str, str | None]:
    """How a benchmark names its reference: the model alone's rate over both phases, and each phase's, with a
    notice (None when there is nothing to say) when the two differ by more than ``DRIFT_NOTICE``."""
    both = before_ms + after_ms
    text = f"model alone (forward+backward, median of {len(both)} runs): "
    text += f"{1000.0 / statistics.median(both):.2f} fps" if both else "not timed"
    if not before_ms or not after_ms:
        return text, None
    before, after = 1000.0 / statistics.median(before_ms), 1000.0 / statistics.median(after_ms)
    text += f" ({before:.2f} before the frames, {after:.2f} after)"
    drift = abs(after - before) / min(before, after)
    if drift <= DRIFT_NOTICE:
        return text, None
    notice = (f"the model alone ran {drift:.0%} {'faster' if after > before else 'slower'} after the frames than "
              f"before: the machine's speed changed during the run, so the ratio is uncertain by about as much "
              "(other work on the machine does this, and so can a shared virtual machine)")  # fmt: skip
    return text, notice


def source_bound_text(
    processed_fps: float, source_fps: float, engine_fps: float, remedy: str | None = None
) -> str | None:
    """A notice (None when there is nothing to say) when a source that plays at its own rate held the processed
    rate back: it delivered frames no faster than the model alone takes them, and the processed rate came close to
    the source's (both within ``SOURCE_MARGIN``). The ratio is then bounded by the source and is no measure of the
    overheads alone. ``remedy`` names how to feed frames faster than the model (the command's own option; None for
    a camera, which has its own rate)."""
    if min(processed_fps, source_fps, engine_fps) <= 0 or source_fps > engine_fps * (1 + SOURCE_MARGIN):
        return None
    if processed_fps < source_fps * (1 - SOURCE_MARGIN):  # every frame was due before the model was free
        return None
    if source_fps < engine_fps:
        text = (f"the source delivered {source_fps:.1f} frames a second, fewer than the model alone takes "
                f"({engine_fps:.1f}): the processed rate cannot pass the source's, so the ratio is at most "
                f"{source_fps / engine_fps:.2f} here and measures the source as well as the overheads")  # fmt: skip
    else:
        text = (f"the source delivered {source_fps:.1f} frames a second, about as many as the model alone takes "
                f"({engine_fps:.1f}): the model waits for a frame now and then, so the ratio measures the source as "
                "well as the overheads")  # fmt: skip
    return text + (f"; {remedy} gives frames as fast as the model takes them" if remedy else "")


def resident_mb() -> float | None:
    """This process's resident memory in MB (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError, AttributeError):
        return None  # not Linux: the report says nothing about memory


def frame_input(loaded: LoadedModel, frame: Frame) -> torch.Tensor:
    """The (1, C, H, W) tensor the model takes for a frame: the model's own preprocessing, as for an image file."""
    return loaded.preprocess.to_tensor(Image.fromarray(frame.rgb))


@dataclass(frozen=True)
class SeenView:
    """What a recording shows beside the input: module ``path``'s panel for hook kind ``kind`` (its first call),
    or, with ``kind`` "grad_cam", the module's Grad-CAM laid over the input."""

    path: str
    kind: str

    def describe(self) -> str:
        from hookscope.core.pictures.panels import KIND_LABELS

        if self.kind == GRAD_CAM:
            return f"Grad-CAM of {self.path}"
        return f"{self.path} ({KIND_LABELS.get(self.kind, self.kind)})"


GRAD_CAM = "grad_cam"
CAM_OPACITY = 0.5  # the Grad-CAM view's default opacity


def picture_beside(shown: np.ndarray, result: RunResult, view: SeenView) -> np.ndarray:
    """``shown`` (the input as the model sees it, uint8 (H, W, 3)) with ``view`` beside it, 4 black pixels apart:
    the module's mosaic through viridis scaled to the input's height, or its Grad-CAM over the input (inferno, half
    opacity). :class:`~hookscope.core.common.errors.HookscopeError` when the run has no record for it (Grad-CAM: activations
    and gradient both)."""
    from hookscope.core.common.errors import HookscopeError
    from hookscope.core.common.resources import apply_colormap, colormap_lut
    from hookscope.core.outputs.export import picture_image, record_picture
    from hookscope.core.pictures.cam import overlay, run_grad_cam

    height = shown.shape[0]
    if view.kind == GRAD_CAM:
        panel = overlay(shown, run_grad_cam(result, view.path), CAM_OPACITY, colormap_lut("inferno"))
    else:
        record = next((r for r in result.records if r.path == view.path and r.kind == view.kind and not r.call
                       and not r.leaf), None)  # fmt: skip
        if record is None:
            raise HookscopeError(f"The run has no {view.describe()} to record: tick it.", module_path=view.path)
        mosaic = Image.fromarray(apply_colormap(picture_image(record_picture(record)), "viridis"))
        width = max(1, round(mosaic.width * height / mosaic.height))
        panel = np.asarray(mosaic.resize((width, height), Image.Resampling.NEAREST))
    gap = np.zeros((height, 4, 3), np.uint8)
    return np.ascontiguousarray(np.concatenate([shown, gap, panel], axis=1))


def seen_picture(loaded: LoadedModel, result: RunResult, path: str, kind: str = "forward") -> np.ndarray:
    """What the screen shows of a run, as one RGB picture: the input as the model sees it with ``path``'s ``kind``
    panel (or its Grad-CAM, ``kind`` "grad_cam") beside it; the input alone when the run has no such record."""
    from hookscope.core.common.errors import HookscopeError

    shown = loaded.preprocess.to_display(result.input)
    try:
        return picture_beside(shown, result, SeenView(path, kind))
    except HookscopeError:
        return shown


class BackgroundRecorder:
    """A :class:`~hookscope.core.live.video.VideoRecorder` fed from a thread of its own, for the window: ``add`` hands over a
    run (the input as shown, the records) and returns at once; the picture is drawn and encoded on the recorder's
    thread. At most ``backlog`` runs wait: a run that finds them all waiting is skipped (``skipped``), and the
    recording holds the picture before it a little longer, as a dropped frame does. A run that lacks the view
    (unticked meanwhile) records the input alone and says so in ``problem``; a file that cannot be written stops
    the recording (``error``)."""

    def __init__(self, path: str | os.PathLike, fps: float, view: SeenView, backlog: int = 4) -> None:
        self._recorder = VideoRecorder(path, fps)  # a bad name or folder: VideoError here, before anything runs
        self.path = self._recorder.path
        self.fps = self._recorder.fps
        self.view = view
        self.added = 0
        self.skipped = 0
        self.problem: str | None = None
        self.error: VideoError | None = None
        self._jobs: queue.Queue = queue.Queue(maxsize=backlog)
        self._thread = threading.Thread(target=self._write_all, name=f"recorder: {self.path}", daemon=True)
        self._thread.start()

    @property
    def frames_written(self) -> int:
        return self._recorder.frames_written

    def add(self, index: int, shown: np.ndarray, result: RunResult) -> bool:
        """Record source frame ``index``'s run (``shown``: the input as the model sees it); False when skipped."""
        if self.error is not None or not self._thread.is_alive():
            return False
        try:
            self._jobs.put_nowait((index, shown, result))
        except queue.Full:
            self.skipped += 1
            return False
        self.added += 1
        return True

    def _write_all(self) -> None:
        from hookscope.core.common.errors import HookscopeError

        while True:
            job = self._jobs.get()
            if job is None:
                return
            index, shown, result = job
            del job
            try:
                picture = picture_beside(shown, result, self.view)
            except HookscopeError as problem:
                self.problem, picture = str(problem), shown
            del result
            try:
                self._recorder.add(index, picture)
            except VideoError as error:
                self.error = error
                return

    def close(self, timeout: float = 10.0) -> int:
        """Write what waits, close the file (playable from then on); the number of pictures written."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout)
        try:
            self._recorder.close()
        except VideoError as error:
            self.error = self.error or error
        return self._recorder.frames_written


def _sync(dev: torch.device) -> None:
    """Wait for the device, so that a timing covers the work and not just its launch."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def _bare_phase(model: torch.nn.Module, x: torch.Tensor, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        bare_run(model, x)
        _sync(x.device)
        times.append((time.perf_counter() - start) * 1000)
    return times


# long because: one try/finally owns the reader thread, the hooks and the memory readings of the loop inside it; split,
# the cleanup would sit apart from what it cleans
def live_run(
    loaded: LoadedModel,
    source: VideoSource,
    register: Callable[[HookRegistry], object],
    *,
    frames: int | None,
    paced: bool = True,
    loop: bool = False,
    device: str = "cpu",
    target: Target = "top1",
    bare_runs: int = 5,
    on_result: Callable[[Frame, RunResult], object] | None = None,
    on_start: Callable[[], object] | None = None,
) -> LiveReport:
    """Run up to ``frames`` frames of ``source`` (None: until it ends, or until Ctrl-C) through ``loaded.module`` with
    the hooks ``register`` adds to a fresh registry, and time the model alone for ``bare_runs`` runs before and after
    (0: no timing of the model alone, as ``hookscope live`` plays a file unless asked to ``--measure``).

    The source's first frame is read here, for the model-alone runs and the untimed first hooked run (it surveys
    the model); only then does the source start playing on its own thread (:class:`LatestFrame`, ``paced``: a file
    at its own frame rate, frames dropped when the model is slower; not paced: as fast as the model takes them,
    none dropped), so that a paced file does not play on while the model is timed alone.

    ``on_start`` is called when the timed part begins. Each frame's records go to ``on_result`` (if given) and are then let go, so memory stays flat however long it
    runs. Ctrl-C (or SIGTERM made to raise, ``termination.sigterm_raises``) ends the run with what was done:
    ``ended_by`` "Ctrl-C" or "SIGTERM" (the second bare phase is skipped). A file that ends early because it is
    truncated ends it with ``error``. The source is closed and every hook removed before this returns.
    """
    report = LiveReport()
    target = with_reference(target, loaded)  # similar:/text: the embedding compared with, made once
    model = loaded.module
    dev = resolve_device(device)
    registry: HookRegistry | None = None
    stream: LatestFrame | None = None
    start = time.perf_counter()
    read0 = dropped0 = 0
    rss_start: float | None = None
    frozen = False
    try:
        first = source.read()
        if first is None:
            report.ended_by = "end"
            return report
        model.to(dev)
        x = frame_input(loaded, first).to(dev)
        report.input_shape = tuple(x.shape)
        if bare_runs:  # measuring: the allocator and the threads settle, then the model alone is timed
            _bare_phase(model, x, BARE_WARMUP)
            report.bare_ms += _bare_phase(model, x, bare_runs)
        report.bare_before = len(report.bare_ms)
        registry = HookRegistry(model)
        register(registry)
        report.hooks = len(registry.handles())
        run_image(loaded, registry, frame_input(loaded, first), device=device, target=target)
        if on_start is not None:  # the model is measured and the hooks are on: the timed part begins
            on_start()
        stream = LatestFrame(source, paced=paced, lossless=not paced, loop=loop)
        # The cyclic collector's full passes rescan every object in the process (40-120 ms with the GIL held, every
        # few seconds): what exists now is set aside while the frames run, and handed back at the end.
        gc.freeze()
        frozen = True
        start = time.perf_counter()
        rss_start = resident_mb()
        while frames is None or report.frames < frames:
            frame = stream.take()
            if frame is None:
                report.ended_by = "end"
                break
            result = run_image(loaded, registry, frame_input(loaded, frame), device=device, target=target)
            report.hooked_ms.append(result.timings["forward_ms"] + result.timings["backward_ms"])
            report.frames += 1
            if on_result is not None:
                on_result(frame, result)
            del result  # the records go now, not when the next frame's replace them
        report.seconds = time.perf_counter() - start
        rss_end = resident_mb()
        report.rss_mb = (rss_start, rss_end) if rss_start is not None and rss_end is not None else None
        stream.close()
        registry.clear()
        registry = None
        report.bare_ms += _bare_phase(model, x, bare_runs)
    except VideoError as error:
        report.ended_by, report.error = "error", error
    except KeyboardInterrupt as stop:
        report.ended_by = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
    finally:
        if frozen:
            gc.unfreeze()
        if registry is not None:
            registry.clear()
        if stream is not None:
            stream.close()
        source.close()
    if report.frames and not report.seconds:  # stopped early: the rate of what was done
        report.seconds = time.perf_counter() - start
    if report.rss_mb is None and rss_start is not None and report.frames:  # and the memory, when it was stopped
        rss_end = resident_mb()
        report.rss_mb = (rss_start, rss_end) if rss_end is not None else None
    if stream is not None:
        report.read, report.dropped = stream.read_count - read0, stream.dropped - dropped0
        report.source_fps = stream.source_fps
    return report

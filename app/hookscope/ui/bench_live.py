"""How a video goes through the window: the processed frame rate, panels painted, against the model's own rate.

    python -m hookscope.ui.bench_live [--model resnet18] [--layers layer1,layer2,layer3,layer4] [--frames 60]
                                [--video FILE] [--device cpu] [--bare-runs 5]

Issue 26's window figures, measured in one process, in the real window (offscreen when there is no display):

* the model alone: ``--bare-runs`` forward+backward passes (``bench.bare_run``: top-1 logit, backward to the
  input, no hook) on the video's first frame, before the modules are ticked and after they are unticked;
* the video playing through the window (File > Open video, at its own frame rate, looped) with ``--layers`` ticked
  for Act and Grad (the module tree's forward and tensor hooks): every frame asked for as the image on screen, run
  by the workspace's one run path, its panels updated and painted; ``--frames`` frames are timed after a few
  untimed ones. Processed rate: frames on screen per second of wall time. Target: >= 0.85 of the model's own rate;
* the event loop's longest stall while the video plays (a 5 ms timer on the GUI thread; target: 50 ms), over as
  many frames again, played once the model alone has been timed again, with the modules ticked again: the timer's
  200 wake-ups a second cost the model about 2% of its rate on two cores, so the rate is timed without it;
* resident memory at the first and last timed frame, and every 100 frames between (target: +50 MB at most over
  2,000 frames: ``--frames 2000``).

The model alone runs on the thread the window runs the model on (``worker.model_pool``), as every run of the
window does: a model run on the GUI thread would start a second OpenMP thread team, which slows both.

Without ``--video`` a 320x240 video at 30 fps (300 frames, a moving pattern, as a camera might give) is written to
a temporary folder first. The machine should be idle: other work on it slows the model and the window unevenly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer

from hookscope.core.engine.floor import bare_run
from hookscope.core.live.runner import frame_input, model_alone_text, resident_mb, source_bound_text
from hookscope.core.live.video import VideoRecorder, open_video
from hookscope.system.allocator import keep_freed_memory
from hookscope.ui.app import Window, _close, wait_for_run
from hookscope.ui.bench_gui import WINDOW_SIZE, StallMeter, measured_window
from hookscope.ui.state.worker import model_pool
from hookscope.ui.widgets.module_tree import ACTIVATIONS, GRADIENTS, TICK_KINDS

if TYPE_CHECKING:
    from hookscope.ui.features.live import LiveFeature

RATIO_TARGET = 0.85  # processed / model alone, in the window (issue 26)
STALL_TARGET_MS = 50.0
MEMORY_TARGET_MB = 50.0  # over 2,000 frames
WARMUP_FRAMES = 3
BARE_WARMUP = 2


def write_clip(folder: Path, frames: int = 300, fps: float = 30.0, size: tuple[int, int] = (320, 240)) -> Path:
    """A video with a pattern that moves from frame to frame (mp4v, in every OpenCV wheel's FFmpeg).

    Written by the app's own recorder, so that OpenCV is first loaded the way the app loads it (quiet: a file that
    is not a video opened later in the same process says so in one line, without FFmpeg's own messages)."""
    path = folder / "bench-clip.mp4"
    width, height = size
    recorder = VideoRecorder(path, fps)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    try:
        for index in range(frames):
            phase = index / frames * 2 * np.pi
            picture = np.stack(
                [np.sin((x + y) / 29 + phase), np.cos(y / 13 - phase * 2), np.sin(x / 17 + phase * 3)], -1
            )
            recorder.add(index, ((picture + 1) * 127.5).astype(np.uint8))
    finally:
        recorder.close()
    return path


def bare_ms(model: torch.nn.Module, x: torch.Tensor, runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall ms of each bare run, on the thread the window runs the model on (the GUI thread waits); the process's
    CPU ms of each go to ``cpu``.

    Waited for by an event, not ``QThreadPool.waitForDone``: that also removes the pool's threads, so every phase of
    the model alone, and the frames after it, ran on a new thread with a new OpenMP team (the first timed run paying
    for the team's start) instead of the one thread the window keeps for the model."""
    times: list[float] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            for _ in range(runs):
                start, start_cpu = time.perf_counter(), time.process_time()
                bare_run(model, x)
                times.append((time.perf_counter() - start) * 1000)
                if cpu is not None:
                    cpu.append((time.process_time() - start_cpu) * 1000)
        except BaseException as error:  # noqa: BLE001  (raised again on the GUI thread)
            failed.append(error)
        finally:
            done.set()

    model_pool().start(work)
    done.wait()
    if failed:
        raise failed[0]
    return times


class PaintCounter(QObject):
    """Counts the window's repaints: the update requests its top-level widget gets, each one a pass that paints
    every widget changed since the last one (the panels painted, not only updated) and shows the result.

    Filtered on the window alone: a filter on the whole application ran Python for each of some 160 events a
    frame, a cost the window itself does not have."""

    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802  (Qt's name)
        if event.type() == QEvent.Type.UpdateRequest:
            self.paints += 1
        return False


def play(
    window: Window,
    live: LiveFeature,
    video: Path,
    on_screen: Callable[[], None],
    done: Callable[[], bool],
    frames: int,
) -> bool:
    """Play ``video`` (looped) in the window until ``done()`` after a frame came on screen (``on_screen`` is called
    for each run the window shows first); False, with a line on stderr, on an error or when it takes over 5 s a
    frame."""
    loop = QEventLoop()
    failed: list[str] = []

    def shown() -> None:
        on_screen()
        if done():
            loop.quit()

    def error(message: str) -> None:
        failed.append(message)
        loop.quit()

    window.run_finished.connect(shown)
    window.error_shown.connect(error)
    QTimer.singleShot(int(max(120.0, frames * 5.0) * 1000), loop.quit)
    if not live.open_video(video, loop=True):
        return False
    loop.exec()
    window.run_finished.disconnect(shown)
    window.error_shown.disconnect(error)
    live.stop()
    if failed or not done():
        print(f"bench_live: {failed[0] if failed else 'the frames did not come on screen in time'}", file=sys.stderr)
        _close(window)
        return False
    return True


# long because: a benchmark script: the measured steps in order, each printed as it goes
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hookscope.ui.bench_live", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--layers", default="layer1,layer2,layer3,layer4")
    parser.add_argument("--frames", type=int, default=60, help="frames timed (2000 for the memory target)")
    parser.add_argument("--video", type=Path, help="the video to play (default: a 320x240 one, written)")
    parser.add_argument("--clip-fps", type=float, default=30.0,
                        help="the written video's frame rate (default 30; above the model's own rate, the source "
                             "never holds the model back)")  # fmt: skip
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bare-runs", type=int, default=5)
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the hookscope command does for the window

    with tempfile.TemporaryDirectory(prefix="bench-live-") as folder:
        video = args.video or write_clip(Path(folder), fps=args.clip_fps)
        with open_video(video) as source:
            info = source.info
            first = source.read()
        if first is None:
            print(f"bench_live: {video} gives no frame", file=sys.stderr)
            return 1
        window, error = measured_window(args.model, args.device)
        if error:
            print(f"bench_live: {error}", file=sys.stderr)
            return 1
        space = window.workspace
        loaded = space.loaded
        assert loaded is not None  # measured_window waited for the first run
        x = frame_input(loaded, first).to(args.device)
        model = loaded.module
        bare_ms(model, x, BARE_WARMUP)
        bare_cpu: list[float] = []
        before = bare_ms(model, x, args.bare_runs, bare_cpu)

        paths = [path.strip() for path in args.layers.split(",") if path.strip()]
        kinds = (TICK_KINDS[ACTIVATIONS], TICK_KINDS[GRADIENTS])
        pairs = [(p, k) for p in paths for k in kinds]
        space.set_ticked(pairs, True)
        error = wait_for_run(window)
        if error:
            print(f"bench_live: {error}", file=sys.stderr)
            return 1

        live = cast("LiveFeature", window.features["live"])
        painter = PaintCounter()
        frames: list[tuple[float, dict[str, float], str]] = []  # (time on screen, the run's timings, image name)
        memory: list[tuple[int, float]] = []
        marks: dict[str, float] = {}
        wanted = WARMUP_FRAMES + args.frames

        def on_screen() -> None:
            last = space.last
            if last is None or " · frame " not in last.image.name:
                return
            frames.append((time.perf_counter(), dict(window.last_timings), last.image.name))
            timed = len(frames) - WARMUP_FRAMES
            if timed == 0:
                marks["cpu"], marks["gui_cpu"] = time.process_time(), time.thread_time()
                window.installEventFilter(painter)
                marks["dropped"] = live.stream.dropped if live.stream else 0
            if 0 <= timed < args.frames and timed % 100 == 0:
                memory.append((timed, resident_mb() or 0.0))
            if len(frames) == wanted:
                marks["cpu"] = (time.process_time() - marks["cpu"]) * 1000 / args.frames
                marks["gui_cpu"] = (time.thread_time() - marks["gui_cpu"]) * 1000 / args.frames
                marks["dropped"] = (live.stream.dropped if live.stream else 0) - marks["dropped"]
                marks["source_fps"] = live.stream.source_fps if live.stream else 0.0
                memory.append((args.frames, resident_mb() or 0.0))
                window.removeEventFilter(painter)

        asked: list[float] = []  # when each frame was asked for (the run path free again)
        space.image_requested.connect(lambda _source: asked.append(time.perf_counter()))
        if not play(window, live, video, on_screen, lambda: len(frames) >= wanted, wanted):
            return 1
        last = space.last
        assert last is not None  # frames came on screen
        records = len(last.result.records)
        panels = len(window.panel_area.panels)
        space.untick_all()
        wait_for_run(window)
        after = bare_ms(model, x, args.bare_runs, bare_cpu)  # right after the timed frames: the machine drifts

        # The stalls, over as many frames again, the modules ticked again.
        space.set_ticked(pairs, True)
        wait_for_run(window)
        meter, stalled = StallMeter(), [0]
        meter.start()

        def counted() -> None:
            stalled[0] += 1

        if not play(window, live, video, counted, lambda: stalled[0] >= args.frames, args.frames):
            return 1
        marks["stall"] = meter.stop()
        _close(window)

    timed = frames[WARMUP_FRAMES - 1 : wanted]  # from the last untimed frame on screen to the last timed one
    seconds = timed[-1][0] - timed[0][0]
    processed = args.frames / seconds
    engine = 1000.0 / statistics.median(before + after)
    alone, drift = model_alone_text(before, after)
    runs = [t for _, t, _ in timed[1:]]

    def median(key: str) -> float:
        return statistics.median(t.get(key, 0.0) for t in runs)

    run_ms = statistics.median(t["forward_ms"] + t["backward_ms"] for t in runs)
    print(f"{loaded.display_name} on {args.device}, {len(paths)} modules ticked for Act and Grad ({' and '.join(kinds)} "
          f"hooks; {records} records, {panels} panels), window {WINDOW_SIZE[0]}x{WINDOW_SIZE[1]}; source "
          f"{info.describe()}, at its own rate, looped")  # fmt: skip
    print(f"processed {args.frames} frames in {seconds:.2f} s: {processed:.2f} fps on screen (source delivered "
          f"{marks['source_fps']:.1f} fps, {marks['dropped']:.0f} dropped; {painter.paints / args.frames:.1f} "
          f"repaints a frame); {alone}")  # fmt: skip
    if drift is not None:
        print(f"note: {drift}")
    remedy = "a video faster than the model (--clip-fps 60)"
    bound = source_bound_text(processed, marks["source_fps"], engine, remedy)
    if bound is not None:
        print(f"note: {bound}")
    print(f"  per frame (medians): read {median('read_ms'):.1f} ms, forward+backward {run_ms:.1f} ms, prepare "
          f"{median('prepare_ms'):.1f} ms (worker); update {median('apply_ms'):.1f} ms (GUI thread); frame to frame "
          f"{statistics.median(b[0] - a[0] for a, b in zip(timed, timed[1:])) * 1000:.1f} ms")  # fmt: skip
    # where a frame's time goes: from asking for it to its panels on screen (the worker's run, the hand-over, the
    # update), and from one frame on screen to asking for the next (the GUI thread's turn)
    times = [t for t, _, _ in timed]
    run_spans = [done - max(a for a in asked if a < done) for done in times[1:]]
    gaps = [min((a for a in asked if a > done), default=done) - done for done in times[:-1]]
    print(
        f"  asked -> on screen {statistics.median(run_spans) * 1000:.1f} ms, on screen -> next asked "
        f"{statistics.median(gaps) * 1000:.1f} ms (medians)"
    )
    print(
        f"  CPU time a frame, all threads: {marks['cpu']:.1f} ms (of which the GUI thread {marks['gui_cpu']:.1f} ms); "
        f"a bare run: {statistics.median(bare_cpu):.1f} ms"
    )
    print(f"processed / model alone: {processed / engine:.3f} (target >= {RATIO_TARGET})")
    print(
        f"longest event-loop stall while the video played ({args.frames} frames more, the stall timer on): "
        f"{marks['stall']:.1f} ms (target <= {STALL_TARGET_MS:.0f} ms)"
    )
    grown = memory[-1][1] - memory[0][1]
    print(f"resident memory over {args.frames} frames: {memory[0][1]:.0f} -> {memory[-1][1]:.0f} MB ({grown:+.0f} MB; "
          f"target <= +{MEMORY_TARGET_MB:.0f} MB over 2,000 frames); by frame: "
          + ", ".join(f"{n}: {mb:.0f}" for n, mb in memory))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How the window keeps up: panel rendering against the run itself, and the longest stall of the GUI event loop.

    python -m hookscope.ui.bench_gui [--model resnet50] [--modules 20] [--runs 3] [--device cpu]

Ticks ``--modules`` modules (spread over the network) for activations and gradients, the hook kinds the module
tree's Act and Grad columns register, then runs the sample image ``--runs`` times in the real window. Per run it
measures, in one process:

* forward and backward time (the engine's own timings);
* render time as the window does it (target: at most 10% of forward and backward on the CPU): preparing the
  pictures of the panels in view and about to scroll in (the worker) + updating the panels on the GUI thread +
  what the window paints; and, beside it, the former figure: every panel prepared and painted, in view or not;
* how long a card scrolled into view takes to show its picture (target: 50 ms): the page jumped to its end (the
  worst case: nothing there prepared yet), and scrolled a page at a time (the panels a page ahead are prepared
  before they come into view);
* the event loop's longest stall from the moment the run is requested until it is on screen, from a 5 ms timer
  on the GUI thread.

Then it compares one panel of 2048 channels (7x7) with one of 64 channels (56x56): update + paint and a hover.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PySide6.QtCore import QElapsedTimer, QPointF, QRectF, QTimer
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication, QWidget

from hookscope.core.engine.hooks import Record
from hookscope.core.pictures.panels import PanelSettings, picture_of
from hookscope.system.allocator import keep_freed_memory
from hookscope.ui.app import Window, _close, _no_display, application, make_window, settle, wait_for_run
from hookscope.ui.state.rendering import with_rendering
from hookscope.ui.widgets.disposal import dispose
from hookscope.ui.widgets.feature_map_panel import FeatureMapPanel
from hookscope.ui.widgets.module_tree import ACTIVATIONS, GRADIENTS, TICK_KINDS

TIMER_MS = 5
RENDER_TARGET = 0.10  # the render as the window paints, a fraction of forward + backward on the CPU (issue 21)
SCROLL_TARGET_MS = 50.0  # a card scrolled into view shows its picture within this
WINDOW_SIZE = (1366, 768)  # the window measured: a common laptop screen


class StallMeter:
    """The longest gap between ticks of a fast timer on the GUI thread: how long the window stopped answering."""

    def __init__(self) -> None:
        self._timer = QTimer()
        self._timer.setInterval(TIMER_MS)
        self._timer.timeout.connect(self._tick)
        self._clock = QElapsedTimer()
        self.worst_ms = 0.0

    def start(self) -> None:
        self.worst_ms = 0.0
        self._clock.start()
        self._timer.start()

    def _tick(self) -> None:
        gap = self._clock.nsecsElapsed() / 1e6
        self._clock.restart()
        self.worst_ms = max(self.worst_ms, gap - TIMER_MS)

    def stop(self) -> float:
        self._tick()
        self._timer.stop()
        return self.worst_ms


def spread_modules(window: Window, count: int) -> list[str]:
    """``count`` modules evenly spread through the network (convolutions and blocks, so outputs are maps)."""
    candidates = [n.path for n in window.tree_model.nodes if n.type_name in ("Conv2d", "Bottleneck", "BasicBlock")]
    if len(candidates) <= count:
        return candidates
    step = len(candidates) / count
    return [candidates[int(i * step)] for i in range(count)]


def _new_data(window: Window) -> list:
    """Give every panel its picture again (as after a run: every mosaic item is told to repaint)."""
    QApplication.processEvents()
    shown = [(panel, panel.picture) for panel in window.panel_area.panels.values()]
    panels = []
    for panel, picture in shown:
        if picture is not None:
            panel.show_picture(picture)
            panels.append(panel)
    return panels


class PanelTargets:
    """One image per panel view, of its size in device pixels, kept from run to run as a window keeps its backing
    store: painting into an image fresh from the allocator would also time the system handing it its memory
    pages (about 6 of 18 ms for 40 panels, measured), which no window pays at every paint."""

    def __init__(self) -> None:
        self._images: dict[int, QImage] = {}

    def image_for(self, view: QWidget) -> QImage:
        ratio = view.devicePixelRatioF()
        size = (round(view.width() * ratio), round(view.height() * ratio))
        image = self._images.get(id(view))
        if image is None or (image.width(), image.height()) != size:
            image = QImage(*size, QImage.Format.Format_ARGB32_Premultiplied)
            image.setDevicePixelRatio(ratio)
            image.fill(0)
            self._images[id(view)] = image
        return image


def paint_each_panel(window: Window, targets: PanelTargets) -> float:
    """Every panel's view painted once into an image of its own size, whether or not it is scrolled into view:
    the painting work the window does for all panels after a run, without the window's own compositing. In ms."""
    panels = _new_data(window)
    jobs = [(panel._view, targets.image_for(panel._view)) for panel in panels]
    start = time.perf_counter()
    for view, image in jobs:
        painter = QPainter(image)
        # the target in logical pixels: without it, render() fills the image's device pixels, one more scaling
        # by the device pixel ratio on a high-DPI screen
        view.render(painter, QRectF(0, 0, view.width(), view.height()))
        painter.end()
    return (time.perf_counter() - start) * 1000


def paint_in_view(window: Window) -> float:
    """What the window itself paints after new data (the panels in view, their dirty regions only), in ms."""
    _new_data(window)
    start = time.perf_counter()
    for _ in range(3):  # scene update -> viewport update -> paint
        QApplication.processEvents()
    return (time.perf_counter() - start) * 1000


def waiting_in_view(window: Window) -> list:
    """Panels in view whose picture the run left until they scroll in, and that do not have it yet."""
    area = window.panel_area
    return [panel for panel in area.panels.values() if panel.ident in area.stale and area.in_view(panel, ahead=0)]


def time_to_show(window: Window, move: Callable[[], object], timeout_s: float = 10.0) -> float:
    """ms from ``move()`` (a scroll) until every panel in view shows its picture and has been painted."""
    start = time.perf_counter()
    move()
    deadline = start + timeout_s
    while time.perf_counter() < deadline:
        QApplication.processEvents()
        if not waiting_in_view(window):
            break
    QApplication.processEvents()  # the paint of what came
    return (time.perf_counter() - start) * 1000


def scroll_latencies(window: Window) -> tuple[float, float]:
    """(a jump to the end of the page, the worst page of a page-by-page scroll): ms until the panels in view show
    their pictures, after a fresh run (from the top of the page, where the run leaves the far cards undrawn)."""
    bar = window.panel_area.verticalScrollBar()
    bar.setValue(0)
    window.workspace.run_again()
    wait_for_run(window)
    settle(300)
    jump = time_to_show(window, lambda: bar.setValue(bar.maximum()))
    bar.setValue(0)
    window.workspace.run_again()
    wait_for_run(window)
    settle(300)
    page = max(1, bar.pageStep())
    worst = 0.0
    while bar.value() < bar.maximum():
        worst = max(worst, time_to_show(window, lambda: bar.setValue(min(bar.maximum(), bar.value() + page))))
        settle(100)  # the reader looks at the page before scrolling on
    return jump, worst


def compare_channel_counts() -> list[str]:
    lines = []
    results = {}
    for channels, side in ((64, 56), (2048, 7)):
        values = torch.rand(1, channels, side, side, generator=torch.Generator().manual_seed(0))
        record = Record("layer", "forward", 0, "", "register_forward_hook", values)
        panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
        panel.resize(520, 560)
        panel.show()
        QApplication.processEvents()
        times, hovers, prepare = [], [], []
        for _ in range(10):
            start = time.perf_counter()
            picture = with_rendering(picture_of(record, PanelSettings()), panel.view_size())  # as the worker does
            prepare.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            panel.show_picture(picture)
            panel._view.grab()
            times.append((time.perf_counter() - start) * 1000)
            layout = picture.arrangement.layout
            assert layout is not None  # a map's picture
            x, y = layout.tile_origin(channels - 1)
            scene = panel._viewbox.mapViewToScene(QPointF(x + 0.5, y + 0.5))
            start = time.perf_counter()
            panel._on_mouse_moved(scene)
            hovers.append((time.perf_counter() - start) * 1000)
        results[channels] = statistics.median(times)
        lines.append(
            f"  {channels:>5} channels of {side}x{side}: prepare (worker) {statistics.median(prepare):6.2f} ms, "
            f"update + paint (GUI) {statistics.median(times):6.2f} ms, hover {statistics.median(hovers):.3f} ms"
        )
        panel.close()
        dispose(panel)
    lines.append(f"  2048 vs 64 channels, update + paint: {results[2048] / results[64]:.2f}x")
    return lines


def measured_window(model: str, device: str) -> tuple[Window, str | None]:
    """The window the benches measure (on the screen if there is one, else offscreen): ``model`` with random
    weights, nothing ticked, no dialogs, ``WINDOW_SIZE``, its first run done; and the run's error, if any."""
    application(offscreen=_no_display())
    window = make_window(model, "none", device, None, ticks=[], remember=False)
    window.show_dialogs = False
    window.resize(*WINDOW_SIZE)
    window.show()
    return window, wait_for_run(window)


# long because: a benchmark script: the measured steps in order, each printed as it goes
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hookscope.ui.bench_gui", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--modules", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the hookscope command does for the window

    window, error = measured_window(args.model, args.device)
    if error:
        print(f"bench_gui: {error}", file=sys.stderr)
        return 1
    paths = spread_modules(window, args.modules)
    kinds = (TICK_KINDS[ACTIVATIONS], TICK_KINDS[GRADIENTS])  # what ticking Act and Grad in the tree registers
    meter = StallMeter()
    meter.start()
    start = time.perf_counter()
    window.workspace.set_ticked([(p, k) for p in paths for k in kinds], True)
    tick_ms = (time.perf_counter() - start) * 1000  # hooks registered, the first panels built
    error = wait_for_run(window)  # the first hooked run (includes the survey)
    settle(300)
    first_stall = meter.stop()
    if error:
        print(f"bench_gui: {error}", file=sys.stderr)
        return 1

    rows = []
    targets = PanelTargets()
    for _ in range(args.runs):
        meter.start()
        window.workspace.run_again()
        error = wait_for_run(window)
        settle(300)  # the paints that follow the update
        stall = meter.stop()
        if error:
            print(f"bench_gui: {error}", file=sys.stderr)
            return 1
        t = dict(window.last_timings)
        last = window.workspace.last
        assert last is not None  # the run just waited for
        left = len(last.deferred)
        visible = paint_in_view(window)
        shown = t["prepare_ms"] + t["apply_ms"] + visible
        rows.append((t["forward_ms"] + t["backward_ms"], t["prepare_ms"], t["apply_ms"], visible, shown, stall, left))
    final = window.workspace.last
    assert final is not None
    records = len(final.result.records)
    panels = len(window.panel_area.panels)
    # The former figure, for comparison: every panel's picture prepared and painted, in view or not.
    space = window.workspace
    follows_screen = space.hidden_panels
    space.attach_view(space.view_size, frozenset)
    every = []
    for _ in range(args.runs):
        window.workspace.run_again()
        wait_for_run(window)
        settle(300)
        t = dict(window.last_timings)
        every.append(
            (t["prepare_ms"] + t["apply_ms"] + paint_each_panel(window, targets)) / (t["forward_ms"] + t["backward_ms"])
        )
    space.attach_view(space.view_size, follows_screen)
    jump_ms, page_ms = scroll_latencies(window)
    _close(window)

    print(
        f"{args.model} on {args.device}, {len(paths)} modules ticked for activations and gradients "
        f"({' and '.join(kinds)} hooks; {records} records, {panels} panels), window {WINDOW_SIZE[0]}x"
        f"{WINDOW_SIZE[1]}, {args.runs} runs:"
    )
    for n, (run, prepare, apply, visible, shown, stall, left) in enumerate(rows, 1):
        print(
            f"  run {n}: forward+backward {run:7.1f} ms | render as the window paints {shown:6.1f} ms (prepare "
            f"{prepare:.1f} + update {apply:.1f} + paint {visible:.1f}; {records - left} of {records} pictures "
            f"made, the rest when scrolled in) = {shown / run:6.1%} | longest stall {stall:5.1f} ms"
        )
    shown_ratio = statistics.median(r[4] / r[0] for r in rows)
    worst = max(r[5] for r in rows)
    print(
        f"render as the window paints / (forward+backward), median: {shown_ratio:.1%} (target <= {RENDER_TARGET:.0%})"
    )
    print(f"  for comparison, every one of the {panels} panels prepared and painted: {statistics.median(every):.1%}")
    print(
        f"a card scrolled into view shows its picture: {page_ms:.1f} ms scrolling a page at a time (worst page), "
        f"{jump_ms:.1f} ms after a jump to the end of the page (target <= {SCROLL_TARGET_MS:.0f} ms)"
    )
    print(f"longest event-loop stall during a run: {worst:.1f} ms (target <= 100 ms)")
    print(
        f"ticking all {len(paths)} modules at once (hooks on, the first of {panels} new panels built, the rest a "
        f"few per turn of the event loop): {tick_ms:.0f} ms on the GUI thread; longest stall from that tick to "
        f"the end of the first hooked run: {first_stall:.1f} ms"
    )
    print("one panel, 64 vs 2048 channels (median of 10):")
    for line in compare_channel_counts():
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

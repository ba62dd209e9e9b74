"""Drives the real window on an X server and reads back what the server shows (run as a script by
``test_real_screen.py``, under Xvfb with ``QT_QPA_PLATFORM=xcb``).

Offscreen rendering and ``QWidget.grab()`` re-render each widget on its own and hide paint bugs of the shared
backing store (a partial repaint placed at the wrong offset): so after each step of a person's session this reads
the screen's own pixels (``QScreen.grabWindow(0)``: the root window, as ``import -window root`` would) and checks
that every mosaic in view shows its picture: shown pixels are sampled and compared with the colour of the mosaic
under their centres. It writes a JSON report (and the screenshots) into ``--out``.

    python tests/ui/real_screen.py --out DIR --size 1366x768 [--photos A.png,B.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch  # noqa: F401  (torch before Qt)
from PySide6.QtCore import QEventLoop, QPoint, QPointF, QRect, QTimer
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QApplication, QWidget

from hookscope.ui.app import application, make_window
from hookscope.ui.state.rendering import color_table, lut_of
from hookscope.ui.state.requests import ImageSource

MODULES = ("layer1.0.conv1", "layer2.0.conv1", "layer3.0.conv2", "layer4.1.conv2")
KINDS = ("pre", "forward", "tensor", "grad_input")  # In, Act, Grad, Grad in
GRID = 14  # samples per side of each plot's visible part
TOLERANCE = 3  # per colour channel: the screen is 24-bit, the same RGB32 values
MATCH_NEEDED = 0.9  # of a plot's samples that must show the mosaic's colour under their centre


def pause(ms: int) -> None:
    """Run the event loop for ``ms`` (QTest.qWait would hold Python's lock through its sleeps, starving the run's
    worker thread: runs took ten times as long under it)."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def settle(window, app: QApplication, quiet_ms: int = 350, timeout_s: float = 120.0) -> None:
    """Until no run is in flight or queued and the event loop has been quiet for a while (paints flushed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pause(50)
        if not window.workspace.scheduler.busy and not window.workspace.preparing:
            break
    pause(quiet_ms)
    app.processEvents()


def screen_image() -> QImage:
    """What the X server shows: the root window's pixels."""
    screen = QGuiApplication.primaryScreen()
    return screen.grabWindow(0).toImage().convertToFormat(QImage.Format.Format_RGB32)


def visible_rect(widget: QWidget) -> QRect:
    """The part of ``widget`` that can be seen, in global coordinates: clipped by every scrolling viewport and
    parent on the way up (a card scrolled half out of the page shows only its visible half)."""
    rect = QRect(widget.mapToGlobal(QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None:
        rect = rect.intersected(QRect(parent.mapToGlobal(QPoint(0, 0)), parent.size()))
        parent = parent.parentWidget()
    return rect


def mosaic_colours(picture) -> np.ndarray:
    """The full mosaic of a picture as (H, W, 3) RGB through its lookup table."""
    table = np.array(color_table(lut_of(picture)), dtype=np.uint32)
    argb = table[picture.arrangement.image]
    return np.stack([(argb >> 16) & 255, (argb >> 8) & 255, argb & 255], axis=-1).astype(np.int16)


def check_plot(panel, shot: QImage) -> dict | None:
    """Sample the shown pixels of one panel's mosaic view; None when no part of its mosaic is in view."""
    picture = panel.picture
    if picture is None or picture.flat or picture.channels.kind != "maps" or picture.arrangement.image is None:
        return None
    view = panel._view
    if not view.isVisible() or panel.plot_widget() is not view:
        return None
    viewport = view.viewport()
    seen = visible_rect(viewport).intersected(QRect(0, 0, shot.width(), shot.height()))
    if seen.width() < 8 or seen.height() < 8:
        return None
    colours = mosaic_colours(picture)
    height, width = colours.shape[:2]
    to_scene, _ = view.viewportTransform().inverted()
    # Mosaic pixels are the view box's units. Mapped through the box's range as it stands (``mapSceneToView``
    # applies a range not yet painted), not the item's transform as last painted: a zoom that never reached the
    # screen would otherwise be checked against the screen it left.
    to_mosaic = panel._viewbox.mapSceneToView
    # How many mosaic pixels one screen pixel spans: the worker samples every step-th one, so the pixel shown
    # can be that far from the one under the centre.
    corner_a = to_mosaic(to_scene.map(QPointF(0, 0)))
    corner_b = to_mosaic(to_scene.map(QPointF(1, 1)))
    span = max(abs(corner_b.x() - corner_a.x()), abs(corner_b.y() - corner_a.y()))
    radius = max(1, int(np.ceil(span)))
    checked = matched = 0
    misses: list[dict] = []
    for gy in np.linspace(seen.top() + 1, seen.bottom() - 1, GRID).round().astype(int):
        for gx in np.linspace(seen.left() + 1, seen.right() - 1, GRID).round().astype(int):
            local = viewport.mapFromGlobal(QPointF(gx + 0.5, gy + 0.5))
            point = to_mosaic(to_scene.map(local))
            x, y = int(np.floor(point.x())), int(np.floor(point.y()))
            if not (radius <= x < width - radius and radius <= y < height - radius):
                continue  # off the mosaic, or at its edge
            if QApplication.widgetAt(QPoint(int(gx), int(gy))) is not viewport:
                continue  # under another window (a popped-out panel floating over the page)
            shown = shot.pixel(int(gx), int(gy))
            rgb = np.array([(shown >> 16) & 255, (shown >> 8) & 255, shown & 255], dtype=np.int16)
            near = colours[y - radius : y + radius + 1, x - radius : x + radius + 1].reshape(-1, 3)
            checked += 1
            if (np.abs(near - rgb).max(axis=1) <= TOLERANCE).any():
                matched += 1
            elif len(misses) < 3:
                misses.append({"screen": [int(gx), int(gy)], "shown": rgb.tolist(), "expected": colours[y, x].tolist()})
    if checked == 0:
        return None
    return {
        "panel": f"{panel.key} {panel.kind}",
        "checked": checked,
        "matched": matched,
        "ratio": matched / checked,
        "rect": [seen.x(), seen.y(), seen.width(), seen.height()],
        "misses": misses,
    }


def check_screen(window, step: str, out: Path, report: list) -> None:
    shot = screen_image()
    name = f"{len(report):02d}-{step.replace(' ', '-')}.png"
    shot.save(str(out / name))
    panels = [p for p in window.panel_area.panels.values()]
    plots = [result for panel in panels if (result := check_plot(panel, shot)) is not None]
    channel = window.channel_view
    # a panel in view still waiting for its picture (the run left it while it was out of view)
    waiting = [
        f"{p.key} {p.kind}"
        for p in panels
        if p.ident in window.panel_area.stale and visible_rect(p).width() > 0 and visible_rect(p).height() > 0
    ]
    last = window.workspace.last
    report.append(
        {
            "step": step,
            "screenshot": name,
            "plots": plots,
            "waiting": waiting,
            "image": last.image.name if last is not None else "",
            "deferred": len(last.deferred) if last is not None else 0,
            "channel_view": window.dock("channel").isVisible() and channel.isVisible(),
        }
    )
    bad = [p for p in plots if p["ratio"] < MATCH_NEEDED]
    print(
        f"{step}: {len(plots)} plots in view, {len(bad)} not showing their mosaic, {len(waiting)} waiting; "
        f"{report[-1]['deferred']} records left undrawn by the run",
        flush=True,
    )


def pointer(*commands: str) -> None:
    """A person's mouse and keys, through the X server (XTEST, by xdotool): the events reach the window as real
    ones do, with the server's own timing (so a click after a double-click is a click)."""
    subprocess.run(["xdotool", *commands], check=True, timeout=30)
    pause(120)


def at(widget: QWidget, point: QPoint) -> list[str]:
    """xdotool's words for moving the pointer over ``point`` of ``widget``."""
    where = widget.mapToGlobal(point)
    return ["mousemove", "--sync", str(where.x()), str(where.y())]


def wait_until(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        pause(20)
    return condition()


def wheel_until(viewport: QWidget, button: str, done, bursts: int = 8) -> bool:
    """Turn the wheel (X button 4 up, 5 down) over ``viewport`` in bursts of notches until ``done()``: a busy
    machine delivers a burst more slowly than it is sent."""
    for _ in range(bursts):
        pointer(
            *at(viewport, QPoint(viewport.width() // 2, viewport.height() // 2)),
            "click",
            "--repeat",
            "40",
            "--delay",
            "10",
            button,
        )
        if wait_until(done, 2.0):
            return True
    return done()


def rest_pointer(window) -> None:
    """The pointer off the panels (on the status bar), so that no tooltip or hover stays over a plot."""
    bar = window.statusBar()
    pointer(*at(bar, QPoint(bar.width() // 2, bar.height() // 2)))


def first_panel_in_view(window, kind: str = "forward"):
    """The panel of ``kind`` with the most of its mosaic view on screen (any kind when none of it shows)."""

    def seen(panel) -> int:
        rect = visible_rect(panel._view.viewport())
        return rect.height() if rect.width() > 20 else 0

    panels = [p for p in window.panel_area.panels.values() if p.picture is not None and seen(p) > 20]
    of_kind = [p for p in panels if p.kind == kind]
    return max(of_kind or panels, key=seen, default=None)


def tile_point(panel, channel: int) -> QPoint:
    layout = panel.picture.arrangement.layout
    x, y = layout.tile_origin(channel)
    scene = panel._viewbox.mapViewToScene(QPointF(x + layout.tile_w / 2, y + layout.tile_h / 2))
    return panel._view.mapFromScene(scene)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", default="1366x768")
    parser.add_argument("--photos", default="")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))
    photos = [p for p in args.photos.split(",") if p]

    app = application()
    window = make_window(ticks=list(MODULES), tick_kinds=KINDS, remember=False)
    window.show_dialogs = False
    window.resize(width, height)
    window.move(0, 0)
    window.show()
    report: list[dict] = []
    steps: list[tuple[str, object]] = []

    def step(name: str):
        def add(action):
            steps.append((name, action))
            return action

        return add

    @step("start")
    def _start() -> None:
        pass

    @step("open image")
    def _open_one() -> None:
        window.open_files(photos[:1])

    @step("next image")
    def _open_two() -> None:
        window.open_files(photos[1:2])

    @step("click a class")
    def _click_class() -> None:
        rows = [
            row
            for row in window.predictions.findChildren(QWidget)
            if type(row).__name__ == "PredictionRow" and row.isVisible() and row.index is not None
        ]
        pointer(*at(rows[2], QPoint(20, rows[2].height() // 2)), "click", "1")
        rest_pointer(window)

    @step("scroll")
    def _scroll() -> None:
        bar = window.panel_area.verticalScrollBar()
        viewport = window.panel_area.viewport()
        pointer(
            *at(viewport, QPoint(viewport.width() // 2, viewport.height() // 2)),
            "click",
            "--repeat",
            "3",
            "--delay",
            "60",
            "5",
        )  # three notches of the wheel down over the page
        assert bar.value() > 0, "the page did not scroll"
        rest_pointer(window)

    @step("scroll to the end")
    def _scroll_far() -> None:
        bar = window.panel_area.verticalScrollBar()
        viewport = window.panel_area.viewport()
        # the wheel down over the page until its end (the cards the run left undrawn come into view)
        assert wheel_until(viewport, "5", lambda: bar.value() == bar.maximum()), "the page did not scroll to its end"
        rest_pointer(window)

    @step("scroll back")
    def _scroll_back() -> None:
        bar = window.panel_area.verticalScrollBar()
        viewport = window.panel_area.viewport()
        assert wheel_until(viewport, "4", lambda: bar.value() == 0), "the page did not scroll back to its top"
        rest_pointer(window)

    @step("zoom")
    def _zoom() -> None:
        panel = first_panel_in_view(window)
        viewport = panel._view.viewport()
        before = panel._viewbox.viewRange()
        shown = screen_image().copy(visible_rect(viewport))
        # Ctrl+wheel up twice over tile 0; the pointer stays there: the zoom must show without another event
        pointer(
            *at(viewport, tile_point(panel, 0)),
            "keydown",
            "ctrl",
            "click",
            "--repeat",
            "2",
            "--delay",
            "60",
            "4",
            "keyup",
            "ctrl",
        )
        assert panel._viewbox.viewRange() != before, "Ctrl+wheel did not zoom"
        settle(window, QApplication.instance())
        assert screen_image().copy(visible_rect(viewport)) != shown, "the zoom did not reach the screen"

    @step("double-click")
    def _double_click() -> None:
        panel = first_panel_in_view(window)
        zoomed = panel._viewbox.viewRange()
        pointer(*at(panel._view.viewport(), tile_point(panel, 0)), "click", "--repeat", "2", "--delay", "80", "1")
        assert panel._viewbox.viewRange() != zoomed, "the double-click did not show the whole mosaic"
        rest_pointer(window)

    @step("channel view")
    def _channel() -> None:
        panel = first_panel_in_view(window)
        pause(QApplication.doubleClickInterval())  # a click, not the third of the double-click's
        pointer(*at(panel._view.viewport(), tile_point(panel, 1)), "click", "1")
        rest_pointer(window)

    @step("top images")
    def _top_images() -> None:
        window.show_dock("scan")

    @step("lessons")
    def _lessons() -> None:
        window.show_dock("lessons")

    @step("resize")
    def _resize() -> None:
        window.resize(width - 120, height - 60)

    @step("image b")
    def _image_b() -> None:
        window.workspace.set_image_b(ImageSource.from_path(photos[0]))

    @step("a minus b")
    def _diff() -> None:
        for panel in window.panel_area.panels.values():
            if panel.views:
                panel.choose_view("diff")

    @step("pop out")
    def _pop_out() -> None:
        panel = window.panel_area.panels[("forward", MODULES[0])]
        assert window.panel_area.pop_out(panel) is not None, "the panel did not pop out"

    @step("channel view closed")
    def _close_channel() -> None:
        window.dock("channel").close()

    @step("run again")
    def _again() -> None:
        window.workspace.run_again()

    def play_frames(count: int) -> None:
        live = window.features["live"]
        target = live.shown + count
        assert wait_until(lambda: live.shown >= target, timeout_s=120), f"only {live.shown} video frames came on screen"
        live.toggle_freeze()  # frozen, the run on screen stays: the screen is compared with it

    @step("video")
    def _video() -> None:
        from hookscope.ui.bench_live import write_clip  # a moving pattern, 320x240 at 30 fps (OpenCV writes it)

        live = window.features["live"]
        assert live.open_video(write_clip(out), loop=True), "the video did not open"
        play_frames(6)  # frames after frames through the window's one run path, each painted over the last

    @step("video resumed")
    def _video_resumed() -> None:
        window.features["live"].toggle_freeze()
        play_frames(4)

    for name, action in steps:
        try:
            action()
        except Exception as error:  # a step that could not be taken is a failure of the check, said plainly
            report.append({"step": name, "error": f"{type(error).__name__}: {error}", "plots": []})
            print(f"{name}: could not be taken: {error}", flush=True)
            continue
        settle(window, app)
        check_screen(window, name, out, report)

    (out / "report.json").write_text(json.dumps(report, indent=1))
    window.close()
    window.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The work of a run follows the screen: pictures are made for the panels in view (and a page around them); the
rest keep their records and get their pictures when they scroll in."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import RUN_TIMEOUT_MS
from PIL import Image

from hookscope.ui.state.requests import ImageSource

MODULES = (
    "conv1",
    "layer1.0.conv1",
    "layer1.1.conv2",
    "layer2.0.conv1",
    "layer2.1.conv2",
    "layer3.0.conv1",
    "layer3.1.conv2",
    "layer4.0.conv1",
    "layer4.1.conv2",
)
KINDS = ("forward", "tensor")


@pytest.fixture
def tall(make_window, qtbot):
    """Nine modules with Act and Grad ticked in a 1024x700 window: 18 panels, most of them far below the view."""
    window = make_window(ticks=list(MODULES), tick_kinds=KINDS, remember=False)
    window.show_dialogs = False
    window.resize(1024, 700)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    area = window.panel_area
    qtbot.waitUntil(lambda: area.widget().height() > 2 * area.viewport().height())  # the 18 panels laid out
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):  # laid out now: this run follows the view
        window.workspace.run_again()
    return window


def in_view(window, panel) -> bool:
    return window.panel_area.in_view(panel, ahead=0)


def current(window, panel) -> bool:
    """Whether the panel shows a picture of the run on screen (its own record, not an earlier run's)."""
    records = {id(r) for r in window.workspace.last.result.records}
    return panel.picture is not None and id(panel.picture.record) in records


def test_a_run_makes_pictures_only_for_the_panels_in_view_and_a_page_around(tall) -> None:
    window, area = tall, tall.panel_area
    outcome = window.workspace.last
    records = outcome.result.records
    deferred = {(r.kind, r.key) for r in outcome.deferred}
    assert len(area.panels) == len(records) == 18
    assert 0 < len(deferred) < len(records), "the run prepared every panel, or none"
    assert len(outcome.pictures) + len(deferred) == len(records)
    for ident, panel in area.panels.items():
        if ident in deferred:
            assert not area.in_view(panel), f"{ident} is in view (or a page from it) but was left undrawn"
            assert ident in area.stale and not current(window, panel)
        else:
            assert current(window, panel), f"{ident}: no picture of this run"
    # every panel actually on screen shows this run's picture
    assert all(current(window, p) for p in area.panels.values() if in_view(window, p))


def test_a_panel_scrolled_into_view_gets_its_picture(tall, qtbot) -> None:
    window, area = tall, tall.panel_area
    last = window.workspace.last
    far = [p for ident, p in area.panels.items() if ident in area.stale]
    assert far
    bar = area.verticalScrollBar()
    bar.setValue(bar.maximum())  # the far end of the page
    shown = [p for p in area.panels.values() if in_view(window, p)]
    assert any(p in far for p in shown)
    qtbot.waitUntil(lambda: all(current(window, p) for p in shown), timeout=10_000)
    assert window.workspace.last is last  # made from the run's kept records, not by running again
    for panel in shown:
        record = panel.picture.record
        data = record.data.numpy() if hasattr(record.data, "numpy") else np.asarray(record.data)
        assert panel.picture.shape == tuple(data.shape)
        assert panel.legend.isVisible()
    assert not (area.stale & {p.ident for p in shown})


def test_the_channel_views_panel_follows_every_run_wherever_it_is(tall, qtbot) -> None:
    window, area = tall, tall.panel_area
    first = next(p for p in area.panels.values() if in_view(window, p) and p.picture is not None)
    window.open_channel(first.picture, 2)
    qtbot.waitUntil(lambda: window.dock("channel").isVisible())
    area.verticalScrollBar().setValue(area.verticalScrollBar().maximum())  # the panel scrolls far out of view
    qtbot.waitUntil(lambda: not window.workspace.preparing)
    assert not area.in_view(first)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.run_again()
    assert first.ident not in {(r.kind, r.key) for r in window.workspace.last.deferred}
    assert window.channel_view.picture.record is next(
        r for r in window.workspace.last.result.records if (r.kind, r.key) == first.ident
    )


def test_with_image_b_a_panel_scrolled_in_gets_its_a_b_and_difference_views(tall, qtbot, photos) -> None:
    window, area = tall, tall.panel_area
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_image_b(ImageSource.from_path(photos[0]))
    assert window.workspace.last.deferred
    stale = set(area.stale)
    bar = area.verticalScrollBar()
    bar.setValue(bar.maximum())
    shown = [p for p in area.panels.values() if in_view(window, p) and p.ident in stale]
    assert shown
    qtbot.waitUntil(lambda: all(p.views and set(p.views) == {"A", "B", "diff"} for p in shown), timeout=10_000)
    panel = shown[0]
    panel.choose_view("diff")
    assert panel.picture.view == "diff"


def test_a_video_frame_makes_pictures_only_for_the_panels_in_view(tall, qtbot) -> None:
    """A playing video's next frame comes before anyone scrolls: its run prepares no page ahead (half a frame's
    picture work, measured by ``python -m hookscope.ui.bench_live``), and a panel scrolled in still gets its picture."""
    window, area = tall, tall.panel_area
    image_run = window.workspace.last
    pixels = np.asarray(image_run.image.load())
    frame = ImageSource("clip.mp4 · frame 7", None, Image.fromarray(pixels), frame=True)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.request_image(frame, debounce=False)
    outcome = window.workspace.last
    assert outcome.image == frame
    drawn = {(p.record.kind, p.record.key) for p in outcome.pictures}
    assert drawn and len(drawn) < len(image_run.pictures), "a frame prepared the page ahead too"
    for ident, panel in area.panels.items():
        assert (ident in drawn) == in_view(window, panel), f"{ident}: drawn {ident in drawn}"
    # Nor is the page below asked for after the frame is on screen (it was, by the panel area, once per frame).
    soon = [p for p in area.panels.values() if area.in_view(p, ahead=1.0) and not in_view(window, p)]
    assert soon, "no panel within a page below the view: the window is laid out differently"
    qtbot.wait(300)  # the wait is what is tested: in this time nothing may ask for the page below
    assert not window.workspace.preparing
    assert all(p.ident in area.stale and not current(window, p) for p in soon), "the page below was drawn"
    below = next(p for p in area.panels.values() if not in_view(window, p))
    with qtbot.waitSignal(window.workspace.pictures_ready, timeout=RUN_TIMEOUT_MS):
        area.ensureWidgetVisible(below)
    qtbot.waitUntil(lambda: current(window, below), timeout=RUN_TIMEOUT_MS)

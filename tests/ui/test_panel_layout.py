"""The page of record panels on real screens: one card per module with its kinds side by side (In | Act | Grad |
Grad in),
stacked where the page is narrow, nothing out of reach, the wheel scrolling the page, a colour legend per panel.

Real panels (offscreen) over pictures of real captures of torchvision's ResNet-18 (untrained weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torchvision
from PySide6.QtCore import QPoint, QPointF, QRect, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QWidget

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.pictures.ab import compare_runs
from hookscope.core.pictures.panels import PanelPicture, PanelSettings, prepare_pictures
from hookscope.ui.host import Host
from hookscope.ui.state.rendering import DIFF_LUT
from hookscope.ui.widgets.feature_map_panel import MIN_PANEL_WIDTH, FeatureMapPanel
from hookscope.ui.widgets.legend import number
from hookscope.ui.widgets.panel_area import PanelArea

PAIRS = {
    ("layer1.0.conv1", "pre"),
    ("layer1.0.conv1", "forward"),
    ("layer1.0.conv1", "tensor"),  # the Grad column
    ("layer1.0.conv1", "grad_input"),  # the Grad in column
    ("layer1.0.relu", "forward"),  # called twice per forward: records layer1.0.relu and layer1.0.relu#1
    ("layer4.1.conv2", "forward"),
    ("layer4.1.conv2", "tensor"),
    ("avgpool", "forward"),  # 512x1x1: a bar plot
}


@dataclass
class Captured:
    pictures: list[PanelPicture]
    comparison_views: dict
    tree_order: dict[str, int]


@pytest.fixture(scope="module")
def captured() -> Captured:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    registry = HookRegistry(model)
    for path, kind in sorted(PAIRS):
        registry.add(path, kind)
    try:
        result_a = capture_run(model, registry, torch.rand(1, 3, 96, 96, generator=torch.Generator().manual_seed(1)))
        result_b = capture_run(model, registry, torch.rand(1, 3, 96, 96, generator=torch.Generator().manual_seed(2)))
    finally:
        registry.clear()
    pictures = prepare_pictures(result_a.records, lambda path, kind: PanelSettings())
    _, comparison = compare_runs(result_a, result_b, pictures, np.zeros((96, 96, 3), dtype=np.uint8))
    order = {name: n for n, (name, _) in enumerate(model.named_modules())}
    return Captured(pictures, comparison.views, order)


def make_area(
    qtbot, captured: Captured, width: int, height: int, pairs: set = PAIRS, host: Host | None = None
) -> PanelArea:
    area = PanelArea(captured.tree_order.__getitem__, host=host)
    qtbot.addWidget(area)
    area.resize(width, height)
    area.show()
    qtbot.waitExposed(area)
    # the pictures as a run hands them over, in capture order (not tree order)
    area.show_results(captured.pictures, set(pairs), lambda p, k: "did not run", lambda p, k: PanelSettings())
    settle()
    return area


def settle() -> None:
    for _ in range(3):
        QApplication.processEvents()


def page_rect(area: PanelArea, widget: QWidget) -> QRect:
    """``widget``'s rectangle on the scrolling page."""
    return QRect(widget.mapTo(area.widget(), QPoint(0, 0)), widget.size())


def scroll_to(area: PanelArea, widget: QWidget) -> None:
    """Move the scroll bars so that ``widget``'s top left corner is as near the viewport's as they go."""
    rect = page_rect(area, widget)
    area.horizontalScrollBar().setValue(rect.left())
    area.verticalScrollBar().setValue(rect.top())
    settle()


def card_of(area: PanelArea, path: str):
    return next(card for card in area.cards() if card.path == path)


# ---- cards ----------------------------------------------------------------------------------------------------


def test_a_wide_page_shows_one_card_per_module_with_its_kinds_side_by_side_in_tree_order(qtbot, captured) -> None:
    area = make_area(qtbot, captured, 1500, 900)
    assert [card.path for card in area.cards()] == ["layer1.0.conv1", "layer1.0.relu", "layer4.1.conv2", "avgpool"]
    conv = card_of(area, "layer1.0.conv1")
    assert not conv.stacked
    panels = conv.panels()
    assert [p.kind for p in panels] == ["pre", "forward", "tensor", "grad_input"]  # In | Act | Grad | Grad in
    assert all(p.parentWidget() is conv for p in panels)
    rects = [page_rect(area, p) for p in panels]
    assert len({r.top() for r in rects}) == 1  # one row
    assert all(a.right() < b.left() for a, b in zip(rects, rects[1:]))  # left to right
    relu = card_of(area, "layer1.0.relu")
    assert [p.key for p in relu.panels()] == ["layer1.0.relu", "layer1.0.relu#1"]  # both calls in one card
    assert [p._title.text() for p in relu.panels()] == ["", "#1"]  # the card says the path; a panel its call
    grads = card_of(area, "layer4.1.conv2").panels()
    assert [p.kind for p in grads] == ["forward", "tensor"]
    # cards follow the tree: the conv card comes before (above, or left of) the relu card
    assert page_rect(area, conv).top() <= page_rect(area, relu).top()
    assert page_rect(area, relu).top() < page_rect(area, card_of(area, "layer4.1.conv2")).top() or (
        page_rect(area, relu).right() < page_rect(area, card_of(area, "layer4.1.conv2")).left()
    )


def test_a_narrow_page_stacks_the_kinds_in_the_card_and_a_wider_one_puts_them_back(qtbot, captured) -> None:
    area = make_area(qtbot, captured, 450, 700)  # room for one panel's width: one column
    conv = card_of(area, "layer1.0.conv1")
    assert conv.stacked
    rects = [page_rect(area, p) for p in conv.panels()]
    assert [p.kind for p in conv.panels()] == ["pre", "forward", "tensor", "grad_input"]
    assert len({r.left() for r in rects}) == 1  # one column, In above Act above Grad above Grad in
    assert all(a.bottom() < b.top() for a, b in zip(rects, rects[1:]))
    area.resize(1500, 900)  # re-evaluated on resize
    settle()
    assert not conv.stacked
    rects = [page_rect(area, p) for p in conv.panels()]
    assert len({r.top() for r in rects}) == 1 and all(a.right() < b.left() for a, b in zip(rects, rects[1:]))
    area.resize(450, 700)
    settle()
    assert conv.stacked


@pytest.mark.parametrize("size", [(600, 700), (1024, 700), (1920, 1080), (260, 500)])
def test_every_plot_is_200_px_wide_and_can_be_scrolled_into_full_view(qtbot, captured, size) -> None:
    area = make_area(qtbot, captured, *size)
    viewport = area.viewport()
    page = area.widget()
    assert page.width() <= viewport.width() + area.horizontalScrollBar().maximum()
    assert page.height() <= viewport.height() + area.verticalScrollBar().maximum()
    panels = list(area.panels.values())
    assert len(panels) == 9
    for panel in panels:
        plot = panel.plot_widget()
        assert plot.isVisibleTo(area), (panel.ident, size)
        assert plot.width() >= 200, (panel.ident, plot.width(), size)
        assert panel.width() >= MIN_PANEL_WIDTH
        scroll_to(area, panel)  # the whole panel, toolbar and legend included, can be seen at once
        shown = QRect(panel.mapTo(viewport, QPoint(0, 0)), panel.size())
        assert viewport.rect().contains(shown), (panel.ident, shown, viewport.rect(), size)
    if size[0] < MIN_PANEL_WIDTH + 30:  # narrower than a panel: a horizontal scroll bar, no clipping
        assert area.horizontalScrollBar().maximum() > 0


# ---- the wheel and the double-click ---------------------------------------------------------------------------


def wheel(widget: QWidget, at: QPointF, modifiers=Qt.KeyboardModifier.NoModifier, steps: int = -1) -> None:
    """One notch of the wheel (down for a negative ``steps``) over ``widget`` at ``at``."""
    event = QWheelEvent(
        at,
        widget.mapToGlobal(at),
        QPoint(),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        modifiers,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def tile_centre(panel: FeatureMapPanel, channel: int) -> QPoint:
    layout = panel.picture.arrangement.layout
    x, y = layout.tile_origin(channel)
    scene = panel._viewbox.mapViewToScene(QPointF(x + layout.tile_w / 2, y + layout.tile_h / 2))
    return panel._view.mapFromScene(scene)


def test_the_wheel_scrolls_the_page_ctrl_wheel_zooms_and_a_double_click_shows_the_whole_mosaic(qtbot, captured):
    area = make_area(qtbot, captured, 1000, 700)
    panel = area.panels[("forward", "layer1.0.conv1")]
    viewport = panel._view.viewport()
    centre = QPointF(tile_centre(panel, 0))
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    whole = panel._viewbox.viewRange()

    wheel(viewport, centre)  # plain wheel: the page scrolls, the mosaic does not zoom
    assert bar.value() > 0
    assert panel._viewbox.viewRange() == whole
    scrolled = bar.value()

    wheel(viewport, centre, Qt.KeyboardModifier.ControlModifier, steps=2)  # Ctrl+wheel up: zoom in
    zoomed = panel._viewbox.viewRange()
    assert zoomed[0][1] - zoomed[0][0] < 0.9 * (whole[0][1] - whole[0][0])
    assert bar.value() == scrolled

    clicked: list[int] = []
    area.channel_clicked.connect(lambda picture, channel: clicked.append(channel))
    at = tile_centre(panel, 0)  # tile 0 under the mouse in the zoomed view
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=at)
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=at)
    assert clicked == [0]  # a single click opens the tile at once
    qtbot.mouseDClick(viewport, Qt.MouseButton.LeftButton, pos=at)  # the second press of a double-click
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=at)
    assert clicked == [0]  # the double-click opens nothing more
    fitted = panel._viewbox.viewRange()
    np.testing.assert_allclose(np.array(fitted), np.array(whole), atol=1.0)  # the whole mosaic again

    bars = area.panels[("forward", "avgpool")]  # a bar plot scrolls the page too
    scroll_to(area, bars.plot_widget())
    before, plot_range = bar.value(), bars.plot_widget().getPlotItem().vb.viewRange()
    wheel(bars.plot_widget().viewport(), QPointF(50, 50), steps=1)  # up
    assert bar.value() < before and bars.plot_widget().getPlotItem().vb.viewRange() == plot_range


# ---- the legend and the toolbar -------------------------------------------------------------------------------


def test_each_panel_has_a_colour_legend_with_the_range_it_maps(qtbot, captured) -> None:
    area = make_area(qtbot, captured, 1500, 900)
    panel = area.panels[("forward", "layer4.1.conv2")]
    low, high = (float(v) for v in (panel.picture.channels.data.min(), panel.picture.channels.data.max()))
    assert low < 0 < high
    legend = panel.legend
    assert legend.isVisibleTo(panel) and legend.legend.lut == "viridis"
    assert (legend.legend.low, legend.legend.high) == ("min", "max")  # per channel: each tile its own range
    assert "per channel" in legend.text() and f"{number(low)} … {number(high)}" in legend.text()

    panel.choose(scaling="shared", colormap="gray")
    assert (legend.legend.low, legend.legend.high) == (number(low), number(high))
    assert legend.legend.lut == "gray"
    image = legend.grab().toImage()
    y = image.height() // 2
    left_x = legend.fontMetrics().horizontalAdvance(number(low)) + 8
    dark, light = image.pixelColor(left_x, y), image.pixelColor(left_x + 48, y)
    assert dark.red() == dark.green() == dark.blue() and light.red() > dark.red() + 100  # a grey ramp, dark to light

    gradient = area.panels[("tensor", "layer1.0.conv1")]
    assert "|grad|" in gradient.legend.text() and gradient.legend.legend.values.startswith("0 … ")  # magnitudes: from 0
    assert not area.panels[("forward", "avgpool")].legend.isVisibleTo(gradient)  # a bar plot has no colormap

    views = captured.comparison_views[("forward", "layer4.1.conv2")]
    panel.show_views(views)
    panel.choose_view("diff")
    difference = views["diff"].channels.data
    magnitude = float(np.abs(difference).max())
    assert legend.legend.lut == DIFF_LUT
    assert (legend.legend.low, legend.legend.high) == (number(-magnitude), "+" + number(magnitude))  # shared, signed
    panel.choose(scaling="channel")
    assert (legend.legend.low, legend.legend.high) == ("−max", "+max") and number(magnitude) in legend.text()


def overlapping(widgets: list[QWidget]) -> list[tuple[str, str]]:
    shown = [w for w in widgets if w.isVisible()]
    rects = {id(w): QRect(w.mapToGlobal(QPoint(0, 0)), w.size()) for w in shown}
    return [
        (a.objectName() or type(a).__name__, b.objectName() or type(b).__name__)
        for n, a in enumerate(shown)
        for b in shown[n + 1 :]
        if rects[id(a)].intersects(rects[id(b)])
    ]


def test_the_toolbar_stays_readable_at_the_least_panel_width(qtbot, captured, host) -> None:
    area = make_area(qtbot, captured, 290, 700, host=host)  # every card stacked: panels at their least width
    panel = area.panels[("grad_input", "layer1.0.conv1")]
    panel.show_views(captured.comparison_views[("grad_input", "layer1.0.conv1")])  # four drop-downs
    settle()
    assert panel.width() <= MIN_PANEL_WIDTH + 20
    assert panel.control_rows == 2
    boxes = [panel.view_box, panel.colormap_box, panel.scaling_box, panel.sort_box]
    header = [panel._title, panel.export_button, panel.float_button, *boxes]
    assert all(w.isVisible() for w in header)
    assert overlapping(header) == []
    inside = panel.rect()
    for widget in header:
        assert inside.contains(QRect(widget.mapTo(panel, QPoint(0, 0)), widget.size())), widget.objectName()
    for box in boxes:  # no drop-down squeezed below its text
        assert box.width() >= box.sizeHint().width(), box.text()
    assert overlapping([panel.legend, panel._footer, panel._info, panel.plot_widget()]) == []

    wide = make_area(qtbot, captured, 1500, 900)
    assert all(p.control_rows == 1 for p in wide.panels.values())  # one row where there is room


def test_a_popped_out_panel_leaves_its_card_and_comes_back_to_it(qtbot, captured, host) -> None:
    area = make_area(qtbot, captured, 1200, 800, host=host)
    panel = area.panels[("forward", "layer4.1.conv2")]
    dock = area.pop_out(panel)
    assert dock is not None and dock.widget() is panel and not area.holds(panel)
    assert panel._title.text() == "layer4.1.conv2"  # on its own, the panel says whose it is
    assert [p.kind for p in card_of(area, "layer4.1.conv2").panels()] == ["tensor"]
    dock.close()
    settle()
    assert area.holds(panel)
    assert [p.kind for p in card_of(area, "layer4.1.conv2").panels()] == ["forward", "tensor"]
    area.remove_pair("layer4.1.conv2", "forward")
    area.remove_pair("layer4.1.conv2", "tensor")
    settle()
    assert "layer4.1.conv2" not in [card.path for card in area.cards()]


def test_a_runs_b_views_reach_the_panels_and_the_chosen_view_is_a_panel_setting(qtbot, captured) -> None:
    area = PanelArea(captured.tree_order.__getitem__)
    qtbot.addWidget(area)
    area.resize(1200, 800)
    area.show()
    pairs = {("layer4.1.conv2", "forward"), ("layer4.1.conv2", "tensor")}
    chosen = {pair: PanelSettings(view="diff") for pair in pairs}
    area.show_results(
        captured.pictures, pairs, lambda p, k: "did not run", chosen.__getitem__, views=captured.comparison_views
    )
    panel = area.panels[("forward", "layer4.1.conv2")]
    assert set(panel.views) == {"A", "B", "diff"} and panel.view_box.isVisibleTo(panel)
    shown = [p for p in captured.pictures if (p.kind, p.key) == panel.ident][0]
    panel.apply_settings(PanelSettings(view="diff"))
    assert panel.picture.view == "diff" and panel.legend.legend.lut == DIFF_LUT
    changes: list = []
    area.settings_changed.connect(lambda path, kind, settings: changes.append((path, kind, settings)))
    panel.choose_view("B")  # as the drop-down does: the setting changes and is announced
    assert changes[-1] == ("layer4.1.conv2", "forward", PanelSettings(view="B"))
    assert panel.picture.view == "B" and panel.view_box.value == "B"
    panel.choose(colormap="magma")  # another drop-down keeps the view
    assert changes[-1][2] == PanelSettings(colormap="magma", view="B")
    area.show_results(captured.pictures, pairs, lambda p, k: "did not run", chosen.__getitem__)  # B cleared
    assert not panel.views and not panel.view_box.isVisibleTo(panel) and panel.picture is shown

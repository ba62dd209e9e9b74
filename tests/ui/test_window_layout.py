"""The window at the sizes people have: every panel whole or reachable by scrolling, no text over text."""

from __future__ import annotations

import itertools

import pyqtgraph as pg
import pytest
from conftest import RUN_TIMEOUT_MS, shown_picture
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QAbstractButton, QLabel, QScrollArea, QWidget

KINDS = ("pre", "forward", "tensor", "grad_input")  # the tree's In, Act, Grad and Grad in columns
MODULES = ("layer1.0.conv1", "layer3.0.conv2")


def plot_of(panel: QWidget) -> pg.GraphicsView:
    """The panel's mosaic view: its largest graphics view."""
    views = [view for view in panel.findChildren(pg.GraphicsView) if view.isVisibleTo(panel)]
    assert views, f"panel {panel.key} has no plot"
    return max(views, key=lambda view: view.width() * view.height())


def reachable(area: QScrollArea, widget: QWidget) -> bool:
    """Whether scrolling ``area`` can bring all of ``widget`` into its viewport."""
    content = area.widget()
    top_left = widget.mapTo(content, QPoint(0, 0))
    rect = QRect(top_left, widget.size())
    viewport = area.viewport()
    reach_x = viewport.width() + area.horizontalScrollBar().maximum()
    reach_y = viewport.height() + area.verticalScrollBar().maximum()
    return (
        rect.left() >= 0
        and rect.top() >= 0
        and rect.right() < reach_x + 1
        and rect.bottom() < reach_y + 1
        and rect.width() <= viewport.width()
        and rect.height() <= max(viewport.height(), rect.height())
    )


def visible_texts(root: QWidget) -> list[tuple[str, QRect]]:
    """Every visible label and button with text inside ``root``, with its rectangle in ``root``'s coordinates."""
    found = []
    for widget in root.findChildren(QWidget):
        if not isinstance(widget, (QLabel, QAbstractButton)) or not widget.isVisibleTo(root):
            continue
        if not widget.text().strip() or widget.width() <= 0 or widget.height() <= 0:
            continue
        found.append((widget.text(), QRect(widget.mapTo(root, QPoint(0, 0)), widget.size())))
    return found


@pytest.mark.parametrize("size", [(1024, 700), (1920, 1080)])
def test_every_panel_is_whole_or_reachable_and_no_text_overlaps(make_window, qtbot, size) -> None:
    window = make_window(ticks=list(MODULES), tick_kinds=KINDS, remember=False)
    window.show_dialogs = False
    window.resize(*size)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    panels = list(window.panel_area.panels.values())
    assert {(p.path, p.kind) for p in panels} == {(m, k) for m in MODULES for k in KINDS}
    area = window.panel_area
    for panel in panels:
        shown_picture(window, panel, qtbot)  # scrolled into view: a run draws the panels in view

        def whole(panel=panel) -> None:  # once the page is laid out at the window's size
            plot = plot_of(panel)
            assert plot.width() >= 200, f"{panel.key} {panel.kind}: plot {plot.width()} px wide at {size}"
            assert reachable(area, plot), f"{panel.key} {panel.kind}: plot out of reach at {size}"

        qtbot.waitUntil(whole)

    qtbot.waitUntil(lambda: assert_no_overlap(window, size))

    # The Channel view opens at the bottom; it takes height from the panels, never squeezes the docks into overlap.
    picture = window.panel_area.panels_of(MODULES[0], "forward")[0].picture
    window.open_channel(picture, 3)
    channel = window.dock("channel")
    qtbot.waitUntil(lambda: channel.isVisible() and not channel.visibleRegion().isEmpty())  # shown and laid out
    qtbot.waitUntil(lambda: assert_no_overlap(window, size))
    for panel in panels:
        assert reachable(area, plot_of(panel)), f"{panel.key} {panel.kind}: out of reach with the Channel view open"


def assert_no_overlap(window, size) -> None:
    for dock_id in ("input", "predictions"):
        texts = visible_texts(window.dock(dock_id))
        assert texts, f"the {dock_id} dock shows no text"
        for (text_a, rect_a), (text_b, rect_b) in itertools.combinations(texts, 2):
            assert not rect_a.intersects(rect_b), f"'{text_a}' overlaps '{text_b}' in the {dock_id} dock at {size}"


def test_kinds_sit_side_by_side_in_tree_order_when_wide(make_window, qtbot) -> None:
    window = make_window(ticks=list(MODULES), tick_kinds=KINDS, remember=False)
    window.resize(1920, 1080)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    content = window.panel_area.widget()

    def side_by_side() -> None:  # once the page is laid out at 1920 px
        for module in MODULES:
            xs = [window.panel_area.panels_of(module, kind)[0].mapTo(content, QPoint(0, 0)).x() for kind in KINDS]
            assert xs == sorted(xs) and len(set(xs)) == 4, f"{module}: In | Act | Grad | Grad in not side by side: {xs}"
        first = window.panel_area.panels_of(MODULES[0], "forward")[0].mapTo(content, QPoint(0, 0)).y()
        second = window.panel_area.panels_of(MODULES[1], "forward")[0].mapTo(content, QPoint(0, 0)).y()
        assert first < second  # cards in module-tree order

    qtbot.waitUntil(side_by_side)


@pytest.mark.parametrize("size", [(1024, 700), (1920, 1080)])
def test_the_trees_tick_columns_fit_the_modules_dock(make_window, qtbot, size) -> None:
    """In, Act, Grad and Grad in are whole in the Modules dock without scrolling sideways, their titles not cut (Grad
    in on two lines), and the names keep their least width."""
    from PySide6.QtCore import Qt

    from hookscope.ui.widgets.module_tree import HEADERS, KIND_COLUMNS, NAME
    from hookscope.ui.widgets.module_tree_view import NAME_MIN_WIDTH

    window = make_window(remember=False)
    window.resize(*size)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    tree = window.tree_view.tree
    header = tree.header()

    def whole() -> None:  # once the Modules dock is laid out at the window's size
        viewport = tree.viewport().width()
        assert header.sectionSize(NAME) >= NAME_MIN_WIDTH
        for column in (c for c in KIND_COLUMNS.values() if not tree.isColumnHidden(c)):  # a ResNet has no Attn
            right = header.sectionViewportPosition(column) + header.sectionSize(column)
            assert 0 <= header.sectionViewportPosition(column) and right <= viewport, (HEADERS[column], right, viewport)
            shown = tree.model().headerData(column, Qt.Orientation.Horizontal)
            title = max(header.fontMetrics().horizontalAdvance(line) for line in shown.split("\n"))
            assert header.sectionSize(column) >= title + 6, (HEADERS[column], header.sectionSize(column), title)
        assert tree.horizontalScrollBar().value() == 0

    qtbot.waitUntil(whole)


def test_the_window_fits_the_screen_whatever_size_was_saved(make_window, qtbot) -> None:
    """The default size (1560x980) and a size saved on a larger monitor, somewhere off this screen, both open
    inside the screen's free area, frame included: nothing of the window out of reach."""
    from PySide6.QtCore import QByteArray, QSize

    from hookscope.ui.state.settings import app_settings

    def check(window) -> None:
        area = window.screen().availableGeometry()
        assert area.width() < 1560 or area.height() < 980  # the offscreen screen: smaller than the default size
        assert area.contains(window.frameGeometry()), (window.frameGeometry(), area)  # the frame too
        assert window.width() >= area.width() - 50  # fitted, not shrunk further

    first = make_window(remember=True)
    check(first)
    first.resize(QSize(3000, 2000))
    first.move(4000, 3000)
    saved = first.saveGeometry()
    first.close()
    settings = app_settings()
    settings.setValue("window/geometry", QByteArray(saved))
    settings.sync()
    check(make_window(remember=True))

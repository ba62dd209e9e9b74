"""What a person sees at laptop sizes: the cards keep their room when side views open, the side views share one tab
stack, the hook inspector and the lessons are readable, the tree's boxes are visible and its whole cell ticks, and
nothing is cut at 1024x700."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import RUN_TIMEOUT_MS, shown_picture
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication, QDockWidget, QTabBar, QWidget

from hookscope.ui.main_window import CARD_MIN_HEIGHT, CARD_SHARE

SIZES = [(1024, 700), (1366, 768)]
SIDE_VIEWS = ("channel", "scan", "visualize", "lessons", "grad_cam")


def started(make_window, qtbot, size, **options):
    window = make_window(remember=False, **options)
    window.show_dialogs = False
    window.resize(*size)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    return window


def open_side_view(window, dock_id: str) -> None:
    if dock_id == "channel":
        picture = next(iter(window.panel_area.panels.values())).picture
        window.open_channel(picture, 1)
    elif dock_id == "lessons":
        window.features["lessons"].show()
    elif dock_id == "grad_cam":
        window.features["grad_cam"].show_module("layer4")
    else:
        window.show_dock(dock_id)


def inside(widget: QWidget, root: QWidget) -> bool:
    """Whether all of ``widget`` lies inside ``root`` (nothing of it clipped away)."""
    rect = QRect(widget.mapTo(root, QPoint(0, 0)), widget.size())
    return root.rect().contains(rect)


@pytest.mark.parametrize("size", SIZES)
def test_the_cards_keep_their_room_and_the_side_views_share_one_tab_stack(make_window, qtbot, size) -> None:
    window = started(make_window, qtbot, size)
    height = window.height()
    least = max(CARD_MIN_HEIGHT, int(height * CARD_SHARE))
    for dock_id in (*SIDE_VIEWS, "inspector"):  # the inspector on the left
        open_side_view(window, dock_id)

        def opened(dock_id: str = dock_id) -> None:  # once the dock is laid out
            assert window.dock(dock_id).isVisible() and not window.dock(dock_id).visibleRegion().isEmpty(), dock_id
            assert window.panel_area.height() >= least, (dock_id, window.panel_area.height(), least, size)

        qtbot.waitUntil(opened)
    # One stack, each view a tab of it: nothing stacked above another under the cards.
    stack = window.tabifiedDockWidgets(window.dock("channel"))
    assert {dock.objectName() for dock in stack} >= set(SIDE_VIEWS) - {"channel"}
    # Dragging the stack's separator up stops at the cards' room too (QMainWindow keeps the minimum).
    window.resizeDocks([window.dock("channel")], [height], Qt.Orientation.Vertical)
    window.layout().activate()  # the asked sizes laid out now, not at the event loop's next turn
    assert window.panel_area.height() >= least
    assert window.height() == height  # the room came from the side views, the window did not grow


def test_the_lessons_open_readable(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    window.features["lessons"].show()
    dock = window.dock("lessons")
    qtbot.waitUntil(lambda: dock.isVisible() and not dock.visibleRegion().isEmpty())  # shown and laid out
    assert dock.isFloating() or dock.width() >= 480, dock.width()


def test_on_demand_docks_are_not_restored_after_a_restart(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    window.remembers = True  # this one saves its layout when it closes
    for dock_id in ("channel", "scan", "visualize"):
        open_side_view(window, dock_id)
    qtbot.waitUntil(lambda: all(window.dock(d).isVisible() for d in ("channel", "scan", "visualize")))
    window.close()
    again = make_window(weights="none")
    with qtbot.waitSignal(again.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    for dock_id in ("channel", "scan", "visualize", "lessons", "grad_cam"):
        assert not again.dock(dock_id).isVisible(), f"the empty {dock_id} dock came back"
    assert again.panel_area.height() > 0.7 * again.centralWidget().height()


@pytest.mark.parametrize("size", SIZES)
def test_the_hook_inspector_shows_five_rows_their_explanation_and_copy(make_window, qtbot, size) -> None:
    window = started(make_window, qtbot, size, ticks=["layer1.0.conv1", "layer2.0.conv1", "layer3.0.conv1"])
    window.show_dock("inspector")
    feature = window.features["inspector"]
    table = feature.table
    assert table.rowCount() >= 5
    table.selectRow(0)
    dock = window.dock("inspector")

    def readable() -> None:  # once the dock and the explanation of the selected row are laid out
        for row in range(5):
            rect = table.visualRect(table.model().index(row, 0))
            assert table.viewport().rect().contains(rect), f"row {row} needs scrolling at {size}"
        assert feature.why.text() and inside(feature.why, dock)
        why_top = feature.why.mapTo(dock, QPoint(0, 0)).y()
        assert why_top >= table.mapTo(dock, QPoint(0, 0)).y() + table.height()  # under the rows
        assert feature.why.height() >= feature.why.heightForWidth(feature.why.width())  # every line of it
        for button in (feature.copy_button, feature.copy_all_button):
            assert button.isVisible() and inside(button, dock), f"{button.text()} out of sight at {size}"

    qtbot.waitUntil(readable)


def contrast(a: QColor, b: QColor) -> float:
    def luminance(colour: QColor) -> float:
        def channel(value: float) -> float:
            return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(colour.redF()) + 0.7152 * channel(colour.greenF()) + 0.0722 * channel(colour.blueF())

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.fixture
def dark_theme(qapp):
    from hookscope.ui.theme import apply_theme

    palette, sheet, style = qapp.palette(), qapp.styleSheet(), qapp.style().name()
    apply_theme(qapp)
    yield
    qapp.setStyleSheet(sheet)
    qapp.setStyle(style)
    qapp.setPalette(palette)


def test_unticked_boxes_stand_out_of_the_dark_rows_and_the_whole_cell_ticks(dark_theme, make_window, qtbot) -> None:
    from hookscope.ui.widgets.module_tree import ACTIVATIONS, KIND_COLUMNS, TICK_KINDS

    window = started(make_window, qtbot, (1024, 700))
    view = window.tree_view
    tree = view.tree
    last = view.proxy.mapFromSource(view.model.index_of("layer1", ACTIVATIONS))
    qtbot.waitUntil(lambda: tree.visualRect(last).isValid())  # the rows laid out, the last one read below too
    # What the tree paints: for an unticked cell, the most contrasting pixel against the row's own background.
    shot: QImage = tree.viewport().grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(shot.constBits(), np.uint8).reshape(shot.height(), shot.bytesPerLine() // 4, 4)
    checked = 0
    for path in ("conv1", "bn1", "layer1"):
        for column in (c for c in KIND_COLUMNS.values() if not tree.isColumnHidden(c)):  # a ResNet has no Attn
            index = view.proxy.mapFromSource(view.model.index_of(path, column))
            rect = tree.visualRect(index)
            assert rect.isValid() and not view.model.is_ticked(path, TICK_KINDS[column])
            ratio = shot.devicePixelRatio()
            cell = pixels[
                int(rect.top() * ratio) : int(rect.bottom() * ratio),
                int(rect.left() * ratio) : int(rect.right() * ratio),
                :3,
            ]
            background = QColor(*[int(v) for v in cell[1, 1][::-1]])  # BGRA: the row's colour at the cell's corner
            best = max(
                contrast(QColor(int(r), int(g), int(b)), background)
                for b, g, r in cell.reshape(-1, 3)[:: max(1, cell.size // 3 // 400)]
            )
            assert best >= 3.0, f"unticked box of {path} column {column}: contrast {best:.2f}:1"
            checked += 1
    assert checked == 12

    # A click near the cell's edge, far from the box in its middle, ticks; a second click unticks.
    index = view.proxy.mapFromSource(view.model.index_of("layer1.0.conv1", ACTIVATIONS))
    tree.scrollTo(index)
    qtbot.waitUntil(lambda: tree.viewport().rect().contains(tree.visualRect(index)))
    rect = tree.visualRect(index)
    edge = QPoint(rect.left() + 2, rect.top() + 2)
    assert (edge - rect.center()).manhattanLength() > 8  # outside the 13 px box
    ticked_before = view.model.is_ticked("layer1.0.conv1", "forward")
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=edge)
    assert view.model.is_ticked("layer1.0.conv1", "forward") != ticked_before
    assert window.workspace.registry.has("layer1.0.conv1", "forward") != ticked_before  # the hook, not only a box
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=edge)
    assert view.model.is_ticked("layer1.0.conv1", "forward") == ticked_before


@pytest.mark.parametrize("size", [(1024, 700)])
def test_the_trees_column_headers_are_whole(make_window, qtbot, size) -> None:
    from hookscope.ui.widgets.module_tree import KIND_COLUMNS, NAME

    window = started(make_window, qtbot, size)
    tree = window.tree_view.tree
    header = tree.header()
    metrics = header.fontMetrics()

    def whole() -> None:  # once the header is laid out at the window's size
        for column in (NAME, *(c for c in KIND_COLUMNS.values() if not tree.isColumnHidden(c))):  # Attn: ViTs only
            lines = str(tree.model().headerData(column, Qt.Orientation.Horizontal)).split("\n")
            assert header.sectionSize(column) >= max(metrics.horizontalAdvance(line) for line in lines) + 6, lines
            assert header.height() >= len(lines) * metrics.height() + 4, (lines, header.height())
            right = header.sectionViewportPosition(column) + header.sectionSize(column)
            assert right <= header.viewport().width(), lines

    qtbot.waitUntil(whole)


def test_dock_tab_titles_are_whole_at_1024x700(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    for dock_id in (*SIDE_VIEWS, "inspector"):
        open_side_view(window, dock_id)

    def whole() -> None:  # once the docks' tab bars are laid out
        bars = [bar for bar in window.findChildren(QTabBar) if bar.isVisible() and bar.parent() is window]
        assert bars
        titles = {dock.windowTitle() for dock in window.findChildren(QDockWidget)}
        seen = set()
        for bar in bars:
            for tab in range(bar.count()):
                text = bar.tabText(tab)
                seen.add(text)
                rect = bar.tabRect(tab)
                assert bar.rect().contains(rect), f"tab '{text}' reaches out of its bar ({rect} in {bar.rect()})"
                assert rect.width() >= bar.fontMetrics().horizontalAdvance(text) + 8, f"tab '{text}' cut"
        assert {"Channel", "Top images", "Visualize", "Learn the hooks", "Hook inspector", "Grad-CAM"} <= seen & titles

    qtbot.waitUntil(whole)


def test_the_channel_view_and_predictions_are_whole_at_1024x700(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    open_side_view(window, "channel")
    view = window.channel_view

    def whole() -> None:  # once the Channel view is laid out
        for key, label in view.stats.items():
            assert label.width() >= label.sizeHint().width(), f"the Channel view's {key} '{label.text()}' is cut"
            assert inside(label, view), key
        assert view.opacity.isVisible() and view.opacity.width() >= 40 and inside(view.opacity, view)

    qtbot.waitUntil(whole)
    predictions = window.predictions
    scroll = window.dock("predictions").widget()
    assert scroll.horizontalScrollBar().maximum() == 0  # nothing reaches past the column sideways
    target = predictions.target_label
    assert target.height() >= target.heightForWidth(target.width()), "the gradient target line is cut"
    for row in predictions.rows:
        if row.isVisible():
            assert row.label.toolTip().endswith("gradient target") and row.label.text() in row.label.toolTip()


def test_grad_cam_shows_its_whole_map_without_scrolling(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.features["grad_cam"].show_module("layer4")
    feature = window.features["grad_cam"]
    scroll = window.dock("grad_cam").widget()

    def whole() -> None:  # once the dock is laid out
        assert scroll.verticalScrollBar().maximum() == 0 and scroll.horizontalScrollBar().maximum() == 0
        assert inside(feature.view, window.dock("grad_cam")) and feature.view.height() >= 150
        assert window.panel_area.height() >= CARD_MIN_HEIGHT

    qtbot.waitUntil(whole)


def test_the_visualize_image_is_fitted_without_a_scroll_bar(make_window, qtbot) -> None:
    window = started(make_window, qtbot, (1024, 700))
    feature = window.features["visualize"]
    feature.show()
    feature._show_image(np.full((224, 224, 3), 200, np.uint8))
    scroll = window.dock("visualize").widget()

    def fitted() -> None:  # once the dock is laid out and the picture fitted to it
        assert scroll.verticalScrollBar().maximum() == 0 and scroll.horizontalScrollBar().maximum() == 0
        shown = feature.view.pixmap()
        assert not shown.isNull() and shown.width() <= feature.view.width() and shown.height() <= feature.view.height()
        assert max(shown.width(), shown.height()) >= 96

    qtbot.waitUntil(fitted)
    assert QApplication.instance() is not None


@pytest.mark.parametrize("size", [(1024, 700), (1920, 1080)])
def test_each_legend_shows_its_minimum_and_maximum_whole(make_window, qtbot, size) -> None:
    kinds = ("pre", "forward", "tensor", "grad_input")
    window = started(make_window, qtbot, size, ticks=["layer1.0.conv1", "layer3.0.conv2"], tick_kinds=kinds)
    panels = list(window.panel_area.panels.values())
    assert len(panels) == 8
    for panel in panels:
        # Each panel scrolled into view, as a person reads it: a run draws the panels in view and a page around
        # them, the rest when they scroll in (at 1024x700 the first card's fourth panel is beyond that page; the
        # test once counted legends without scrolling and passed on whichever extra panels the first layout drew).
        shown_picture(window, panel, qtbot)
        qtbot.waitUntil(lambda panel=panel: shows_legend(panel), timeout=10_000)
        legend = panel.legend
        parts = {part: (text, rect) for part, text, rect in legend.parts()}
        ends = [parts[end][0] for end in ("low", "high") if end in parts]
        if legend.legend.low == "min":  # per channel: the values are the minimum and the maximum
            assert parts["values"][0] == legend.legend.values and " … " in legend.legend.values
        else:  # shared: the ends are the numbers
            assert ends == [legend.legend.low, legend.legend.high]
        for part in ("low", "high", "values"):
            if part in parts:
                rect = parts[part][1]
                assert rect.right() < legend.width(), f"{panel.key} {panel.kind}: legend's {part} cut at {size}"


def shows_legend(panel) -> bool:
    return panel.legend.legend is not None and panel.legend.isVisibleTo(panel)


def test_the_scans_progress_text_is_whole_at_1024x700(make_window, qtbot, tmp_path) -> None:
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for index in range(12):
        Image.fromarray(rng.integers(0, 256, (72, 96, 3), dtype=np.uint8)).save(folder / f"img{index:03d}.png")
    window = started(make_window, qtbot, (1024, 700), ticks=["layer1.0.conv1"])
    feature = window.features["scan"]
    seen: list[tuple[str, int, int]] = []

    def look(_progress: object) -> None:  # after the dock has shown this progress (connected after it)
        bar = feature.progress
        seen.append((bar.text(), bar.width(), bar.fontMetrics().horizontalAdvance(bar.text())))

    feature.progressed.connect(look)
    with qtbot.waitSignal(feature.finished, timeout=RUN_TIMEOUT_MS):
        feature.scan_folder(str(folder))
    counted = [entry for entry in seen if "images" in entry[0]]
    assert counted, seen
    for text, width, needed in counted:
        assert width >= needed + 8, f"the scan's progress '{text}' cut: {width} px for {needed}"

    # Its top images, a row of nine patches (about 770 px), scroll sideways in the dock: the window stays 1024 wide.
    width = window.width()
    picture = window.panel_area.panels_of("layer1.0.conv1", "forward")[0].picture
    with qtbot.waitSignal(feature.patches_shown, timeout=RUN_TIMEOUT_MS):
        window.open_channel(picture, 2)
    window.show_dock("scan")
    assert len(feature.entries) >= 9
    dock = window.dock("scan")
    qtbot.waitUntil(lambda: dock.isVisible() and not dock.visibleRegion().isEmpty())  # shown and laid out
    assert window.width() == width, f"the Top images widened the window to {window.width()}"
    assert dock.geometry().right() < window.width() and window.panel_area.width() > 300


def test_a_narrow_legend_keeps_its_values_whole(qtbot) -> None:
    """A gradient panel in a row of four at 1920 px: about 200 px for "min [bar] max 5.05e−9 … 0.00123": the note
    goes, the bar narrows, and the values stay whole."""
    from hookscope.ui.widgets.legend import ColorLegend, Legend, number

    legend = ColorLegend()
    qtbot.addWidget(legend)
    values = f"{number(5.05e-9)} … {number(0.00123)}"
    assert values == "5.05e−9 … 0.00123"
    legend.set_legend(Legend("viridis", "min", "max", "|grad| per channel", "", values))
    needed = legend.fontMetrics().horizontalAdvance(values)
    for width in (needed + 200, needed + 90, needed + 40):
        legend.resize(width, legend.height())
        parts = {part: (text, rect) for part, text, rect in legend.parts()}
        assert parts["values"][0] == values and parts["values"][1].right() < width, (width, parts)
        assert parts["bar"][1].width() >= 24
    legend.resize(needed + 200, legend.height())
    assert {"low", "high", "note"} <= {part for part, *_ in legend.parts()}  # room for all when wide


def test_the_side_by_side_predictions_fit_the_column_at_1024x700(make_window, qtbot, photos) -> None:
    from hookscope.ui.state.requests import ImageSource

    window = started(make_window, qtbot, (1024, 700))
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        window.workspace.set_image_b(ImageSource.from_path(str(photos[1])))
    both = window.predictions.side_by_side
    scroll = window.dock("predictions").widget()

    def fits() -> None:  # once the A and B columns are laid out
        assert both.isVisible()
        assert scroll.horizontalScrollBar().maximum() == 0, "the A and B columns reach past the predictions' column"
        for cell_a, cell_b in both.cells:
            for cell in (cell_a, cell_b):
                if cell.text():
                    assert cell.width() >= cell.sizeHint().width(), f"'{cell.text()}' cut"
                    assert cell.toolTip().startswith("class ")

    qtbot.waitUntil(fits)

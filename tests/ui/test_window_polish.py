"""Issue 44's window items, offscreen (the same on the X server's pixels: test_window_polish_screen.py).

Item 6: a card with all four kinds of one module where three fit side by side wraps two by two and fills the page,
not one half-width column with the right half empty."""

from __future__ import annotations

import time

import pytest
from test_panel_layout import captured, card_of, make_area, page_rect  # noqa: F401 (captured: a fixture)


@pytest.mark.parametrize("width", [620, 760, 830, 1000])
def test_four_kinds_that_do_not_fit_side_by_side_wrap_two_by_two_across_the_page(qtbot, captured, width) -> None:  # noqa: F811
    area = make_area(qtbot, captured, width, 700)
    conv = card_of(area, "layer1.0.conv1")
    rects = [page_rect(area, p) for p in conv.panels()]  # In, Act, Grad, Grad in
    assert [p.kind for p in conv.panels()] == ["pre", "forward", "tensor", "grad_input"]
    page = area.page_width()
    if len({r.top() for r in rects}) == 1:
        assert conv.columns == 4  # they fit side by side
        return
    # two lines of two: In | Act above Grad | Grad in
    assert rects[0].top() == rects[1].top() < rects[2].top() == rects[3].top()
    assert rects[0].left() == rects[2].left() < rects[1].left() == rects[3].left()
    assert rects[1].right() >= page - 20, f"the card ends at {rects[1].right()} of a {page} px page"


# ---- item 7: the video ------------------------------------------------------------------------------------------


@pytest.fixture
def live(workspace, host):
    from hookscope.ui.features.live import LiveFeature

    feature = LiveFeature(workspace, host)
    yield feature
    feature.shutdown()


def test_the_video_entries_act_only_with_a_video_open(live, host, tmp_path) -> None:
    from video_files import write_video

    entries = ("file.live_freeze", "file.live_record", "file.live_stop")
    steps = ("file.live_next_frame", "file.live_previous_frame")
    assert not any(host.actions[i].enabled() for i in (*entries, *steps, "file.live_stop_recording"))
    live.open_video(write_video(tmp_path / "clip.avi", frames=20, fps=5.0))
    assert all(host.actions[i].enabled() for i in (*entries, *steps))
    assert not host.actions["file.live_stop_recording"].enabled()
    live.stop()
    assert not any(host.actions[i].enabled() for i in entries)


def test_the_file_menu_greys_them_as_it_opens(make_window) -> None:
    window = make_window()
    window.menus.menu("File").aboutToShow.emit()  # what opening the menu does
    actions = window.menus.actions
    assert not actions["file.live_freeze"].isEnabled() and not actions["file.live_record"].isEnabled()
    assert actions["file.open_video"].isEnabled() and actions["file.open_image"].isEnabled()


def test_frozen_is_said_under_the_input_and_the_rates_leave_the_status_line_to_it(live, host, qtbot, tmp_path) -> None:
    from video_files import write_video

    live.open_video(write_video(tmp_path / "clip.avi", frames=30, fps=10.0), loop=True)
    assert live.bar.isVisibleTo(host.parent) and live.bar.state.text().startswith("▶ Playing")
    qtbot.waitUntil(lambda: live.shown >= 2, timeout=120_000)
    live.toggle_freeze()
    assert live.bar.state.text().startswith("Frozen") and live.bar.state.isVisibleTo(host.parent)
    said = len(host.statuses)
    assert "frozen" in host.statuses[-1]
    live._rates = "clip.avi: source 10.0 fps, processed 3.0 fps"  # a second's rates, renewed as a run came
    live._show_rates()
    assert len(host.statuses) == said, "the rates replaced 'frozen' on the status line"
    live.toggle_freeze()
    assert live.bar.state.text().startswith("▶ Playing")


def test_a_video_that_would_end_while_the_record_questions_are_open_waits_for_them(
    live, workspace, host, qtbot, tmp_path
) -> None:
    """The two questions take a person longer than the rest of the clip: the clip waits, the recording starts with
    the answers and holds the frames shown after them (it used to end meanwhile: nothing written, a 4 s line)."""
    from video_files import write_video

    from hookscope.core.live.video import open_video

    workspace.set_ticked([("layer1.0.conv1", "forward")], True)
    qtbot.waitUntil(lambda: not workspace.scheduler.busy, timeout=120_000)
    frames, fps = 12, 12.0  # one second of video
    live.open_video(write_video(tmp_path / "clip.avi", frames=frames, fps=fps))
    qtbot.waitUntil(lambda: live.shown >= 1, timeout=120_000)

    def slow_answer(names: list[str]) -> int:
        ends = time.monotonic() + 2.5 * frames / fps  # longer than the whole clip
        qtbot.waitUntil(lambda: time.monotonic() > ends, timeout=30_000)
        assert live.playing and live.frozen, "the clip did not wait for the question"
        return 0

    live.ask_record_view = slow_answer
    live.ask_record_path = lambda: str(tmp_path / "seen.avi")
    host.trigger("file.live_record")
    assert live.recorder is not None and not live.frozen, host.statuses
    qtbot.waitUntil(lambda: not live.playing, timeout=120_000)  # the end of the clip closes it and the recording
    assert any(line.startswith("Recorded ") for line in host.statuses), host.statuses
    with open_video(tmp_path / "seen.avi") as seen:
        assert seen.read() is not None
    assert not host.errors


def test_the_record_question_is_wide_enough_for_its_title(live, host, qtbot) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QInputDialog

    from hookscope.ui.features.live import RECORD_TITLE

    seen = {}

    def look() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QInputDialog):
            QTimer.singleShot(50, look)
            return
        seen["title"] = dialog.windowTitle()
        seen["width"] = dialog.width()
        seen["need"] = dialog.fontMetrics().horizontalAdvance(f"{RECORD_TITLE} — Hookscope") + 100
        dialog.reject()

    QTimer.singleShot(0, look)
    assert live.ask_record_view(["layer1 (Activations)"]) is None
    assert seen["title"] == RECORD_TITLE and seen["width"] >= seen["need"], seen


# ---- the polish -------------------------------------------------------------------------------------------------


def test_a_badge_is_never_pressed_under_its_words(qtbot, qapp) -> None:
    from PySide6.QtWidgets import QApplication

    from hookscope.core.pictures.panels import PanelSettings
    from hookscope.ui.theme import STYLE
    from hookscope.ui.widgets.feature_map_panel import MIN_PANEL_WIDTH, FeatureMapPanel

    before = qapp.styleSheet()
    qapp.setStyleSheet(STYLE)  # the window's theme: the badge's padding and bold 11 px words
    try:
        for kind in ("backward", "grad_input", "forward"):
            panel = FeatureMapPanel("layer4.1.conv2", kind, "layer4.1.conv2", PanelSettings())
            qtbot.addWidget(panel)
            panel.resize(MIN_PANEL_WIDTH, 300)
            panel.show()
            QApplication.processEvents()
            chip, save = panel.chip, panel.export_button
            need = chip.fontMetrics().horizontalAdvance(chip.text())
            assert chip.contentsRect().width() >= need, (kind, chip.text(), chip.contentsRect(), need)
            assert chip.geometry().right() < save.geometry().left(), (kind, chip.geometry(), save.geometry())
    finally:
        qapp.setStyleSheet(before)


def test_a_class_name_keeps_its_room_when_an_edit_shows_the_change(qtbot) -> None:
    from PySide6.QtWidgets import QApplication

    from hookscope.core.engine.capture import Prediction
    from hookscope.core.pictures.compare import PredictionChange
    from hookscope.ui.widgets.predictions import PredictionRow

    row = PredictionRow()
    qtbot.addWidget(row)
    row.resize(260, 24)
    row.show()
    row.show_prediction(Prediction(238, "Greater Swiss Mountain dog", 0.012), False)
    QApplication.processEvents()
    before = row.label.width()
    row.show_change(PredictionChange(238, "Greater Swiss Mountain dog", 0.01203, 0.012))  # "+0.003%"
    QApplication.processEvents()
    assert row.change.isVisible() and row.change.text()
    assert row.change.fontMetrics().horizontalAdvance(row.change.text()) <= row.change.width()
    assert row.label.width() >= before, (row.label.width(), before)


def test_a_ticked_box_is_drawn_with_its_box(qtbot) -> None:
    import numpy as np
    from PySide6.QtGui import QColor, QImage

    from hookscope.ui.theme import ACCENT
    from hookscope.ui.widgets.check_box import ThemedCheckBox

    box = ThemedCheckBox("Show the predicted mask")
    qtbot.addWidget(box)
    box.setChecked(True)
    box.show()
    picture = box.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    rect = box.indicator_rect().adjusted(1, 1, -1, -1)
    accent = QColor(ACCENT).rgb() & 0xFFFFFF
    pixels = np.array([[picture.pixel(x, y) & 0xFFFFFF for x in range(rect.left(), rect.right())]
                       for y in range(rect.top(), rect.bottom())])  # fmt: skip
    assert (pixels == accent).mean() > 0.4  # filled: a box, not a bare tick


def _tree_columns(tree) -> dict[int, int]:
    header = tree.header()
    return {c: header.sectionSize(c) for c in range(header.count()) if not tree.isColumnHidden(c)}


@pytest.mark.parametrize("width", [230, 330, 460, 760])
def test_the_tree_shows_each_column_whole_or_not_at_all_never_scrolled_to(window, qapp, width) -> None:
    """Issue 44: a narrow dock (1024x700) reached Type, Params and Shape by scrolling sideways; a wide one cut the
    Type column at the dock's edge. Now every column shown fits the dock, Type holds its longest name, and what a
    hidden column says is in every row's tooltip."""
    from PySide6.QtCore import Qt

    from hookscope.ui.widgets.module_tree import NAME, PARAMS, SHAPE, TOOLTIP, TYPE
    from hookscope.ui.widgets.module_tree_view import NAME_MIN_WIDTH

    window.resize(1366, 768)
    window.resizeDocks([window.dock("modules")], [width], Qt.Orientation.Horizontal)
    qapp.processEvents()  # the layouts, and the scroll bars' ranges after the header's
    view = window.tree_view
    tree = view.tree
    shown = _tree_columns(tree)
    assert tree.horizontalScrollBar().maximum() == 0, f"scrolls sideways: {shown} in {tree.viewport().width()}"
    assert sum(shown.values()) <= tree.viewport().width() + 1
    assert shown[NAME] >= NAME_MIN_WIDTH
    metrics = tree.fontMetrics()
    if TYPE in shown:
        assert shown[TYPE] >= max(metrics.horizontalAdvance(t) for t in window.tree_model.types()) + 8
    else:
        assert PARAMS not in shown and SHAPE not in shown  # hidden from the right
    model = window.tree_model
    conv = model.index_of("layer1.0.conv1", NAME)
    tip = model.data(conv, TOOLTIP)
    assert "Conv2d" in tip and "parameters" in tip and "1×64×56×56" in tip, tip
    if view.width() >= 700:
        assert {TYPE, PARAMS, SHAPE} <= set(shown)
    if view.width() <= 240:
        assert TYPE not in shown
    assert abs(view.width() - width) < 40, view.width()  # the dock took about the width asked for


@pytest.mark.parametrize("width", [230, 330, 760])
def test_the_inspectors_columns_fit_its_dock_and_a_hidden_ones_words_stay_in_reach(window, qapp, width) -> None:
    """Issue 44: in a narrow dock the inspector's columns were reached by scrolling sideways. Now each column of
    words is shown whole or hidden (from the right), and a hidden column's words are in the Module cell's tooltip
    and in the line under the table for the selected hook."""
    from PySide6.QtCore import Qt

    from hookscope.ui.features.inspector import COLUMNS, KIND, METHOD, MODULE, WORDS

    window.resize(1366, 768)
    window.show_dock("inspector")
    window.resizeDocks([window.dock("inspector")], [width], Qt.Orientation.Horizontal)
    qapp.processEvents()
    inspector = window.features["inspector"]
    table = inspector.table
    assert table.rowCount() == 4
    shown = [c for c in WORDS if not table.isColumnHidden(c)]
    assert table.horizontalScrollBar().maximum() == 0
    header = table.horizontalHeader()
    assert header.sectionViewportPosition(shown[-1]) + header.sectionSize(shown[-1]) <= table.viewport().width()
    assert {MODULE, KIND} <= set(shown)
    assert shown == list(WORDS[: len(shown)])  # hidden from the right
    metrics = table.fontMetrics()
    for column in shown:
        widest = max(metrics.horizontalAdvance(table.item(r, column).text()) for r in range(table.rowCount()))
        assert header.sectionSize(column) >= widest + 6, (COLUMNS[column], header.sectionSize(column), widest)
    table.selectRow(0)
    hidden = [c for c in WORDS if c not in shown]
    tip = table.item(0, MODULE).toolTip()
    for column in hidden:
        words = table.item(0, column).text()
        if words:
            assert f"{COLUMNS[column]}: {words}" in tip and words in inspector.hidden_words.text()
    assert inspector.hidden_words.isVisibleTo(inspector.widget) == bool([c for c in hidden if table.item(0, c).text()])
    if width <= 240:
        assert METHOD in hidden
    if width >= 700:
        assert not hidden


def test_at_its_default_size_the_window_gives_the_tree_room_for_its_type_column(window, qapp) -> None:
    """Issue 44: at 1920x1080 with the window at its 1560x980 default, the tree's Type column was cut at the dock's
    edge. A window with room to spare gives the Modules dock the width that shows Type whole (a quarter at most)."""
    from hookscope.ui.widgets.module_tree import TYPE

    window.resize(1560, 980)
    window.fit_docks()
    qapp.processEvents()
    tree = window.tree_view.tree
    assert not tree.isColumnHidden(TYPE)
    assert tree.horizontalScrollBar().maximum() == 0
    header = tree.header()
    widest = max(tree.fontMetrics().horizontalAdvance(name) for name in window.tree_model.types())
    assert header.sectionSize(TYPE) >= widest + 8
    assert header.sectionViewportPosition(TYPE) + header.sectionSize(TYPE) <= tree.viewport().width()
    assert window.dock("modules").width() <= 1560 // 4


def test_the_type_column_has_its_room_when_the_first_model_loads_after_the_window_shows(qtbot, qapp) -> None:
    """Seen on the X server at 1920x1080: the window showed (and fitted its docks) before its first model had
    loaded, when the tree had no type names to measure, so the Modules dock stayed too narrow for Type. The first
    model's arrival fits the docks again."""
    from hookscope.ui.main_window import MainWindow
    from hookscope.ui.widgets.module_tree import TYPE

    window = MainWindow(weights="none")
    qtbot.addWidget(window)
    window.resize(1560, 980)
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        window.show()
    qapp.processEvents()
    tree = window.tree_view.tree
    assert window.tree_model.types() and not tree.isColumnHidden(TYPE)
    assert tree.horizontalScrollBar().maximum() == 0
    window.close()


def test_the_interventions_list_fits_a_narrow_dock(window, qapp) -> None:
    """At 1024x700 the Interventions list scrolled sideways to its Spec column ("Inte" of the description shown).
    Now description and spec share the dock's width, and each row's tooltip holds both."""
    from PySide6.QtCore import Qt

    from hookscope.core.engine.interventions import Intervention

    window.resize(1024, 700)
    window.resizeDocks([window.dock("interventions")], [240], Qt.Orientation.Horizontal)
    window.workspace.add_edit(Intervention("scale", "layer1.0.conv1", factor=0.5))
    qapp.processEvents()
    tree = window.features["interventions"].tree
    assert tree.topLevelItemCount() == 1
    assert tree.horizontalScrollBar().maximum() == 0
    header = tree.header()
    last = header.count() - 1
    assert header.sectionViewportPosition(last) + header.sectionSize(last) <= tree.viewport().width()
    item = tree.topLevelItem(0)
    tip = item.toolTip(1)
    assert item.text(1).split(" — ")[0] in tip and item.text(2) in tip

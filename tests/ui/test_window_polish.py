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


def test_the_tree_s_type_column_holds_every_type_name(window) -> None:
    from hookscope.ui.widgets.module_tree import TYPE

    tree = window.tree_view.tree
    widest = max(tree.fontMetrics().horizontalAdvance(name) for name in window.tree_model.types())
    assert tree.header().sectionSize(TYPE) >= widest + 8

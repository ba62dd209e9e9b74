"""Issue 44's window items on a real X server, read back from the server's own pixels (run as a script by
``test_window_polish_screen.py`` under Xvfb + openbox with ``QT_QPA_PLATFORM=xcb``; ``real_screen.py`` explains why
offscreen rendering is not enough).

    python tests/ui/polish_screen.py --out DIR --size 1366x768

A person's session, step by step; after each step the screen is saved (``DIR/NN-step.png``) and checked: what
must be whole on screen is (its rectangle inside every parent and the screen), what must show its picture does
(screen pixels compared with the picture), what must not be cut is as wide as its words. ``DIR/report.json``
holds every check as ``[ok, detail]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch  # noqa: F401  (torch before Qt)
from PySide6.QtCore import QPoint, QRect, QTimer, QUrl
from PySide6.QtGui import QImage, QTextDocument
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QFileDialog,
    QInputDialog,
    QLineEdit,
    QWidget,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_screen import (  # noqa: E402
    MATCH_NEEDED,
    at,
    check_plot,
    pause,
    pointer,
    rest_pointer,
    screen_image,
    settle,
    visible_rect,
    wait_until,
)

from hookscope.core.engine.interventions import Intervention  # noqa: E402
from hookscope.ui.app import application, make_window  # noqa: E402
from hookscope.ui.widgets.module_tree import ATTENTION, NAME, TOOLTIP, TYPE  # noqa: E402
from hookscope.ui.widgets.module_tree_view import NAME_MIN_WIDTH  # noqa: E402

KINDS = ("pre", "forward", "tensor", "grad_input")  # In, Act, Grad, Grad in: all four columns of one layer
LAYER = "layer1.0.conv1"
SEGMENTER = "lraspp_mobilenet_v3_large"
DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"
VIT = "timm/vit_tiny_patch16_224"  # attention modules: the tree gets its Attn column
DOCKS_IN_REACH = ("modules", "input", "predictions")  # the docks open by default beside the page
CONTROLS = (QAbstractButton, QComboBox, QAbstractSpinBox, QLineEdit)
LIVE_ACTIONS = (
    "file.live_freeze",
    "file.live_next_frame",
    "file.live_previous_frame",
    "file.live_record",
    "file.live_stop_recording",
    "file.live_stop",
)


def global_rect(widget: QWidget) -> QRect:
    return QRect(widget.mapToGlobal(QPoint(0, 0)), widget.size())


def whole_on_screen(widget: QWidget) -> tuple[bool, str]:
    """Shown, and all of it in sight: not clipped by a scrolling parent, a dock's edge or the screen."""
    screen = QApplication.primaryScreen().geometry()
    seen = visible_rect(widget).intersected(screen)
    whole = global_rect(widget)
    return widget.isVisible() and seen == whole, f"{seen.getRect()} of {whole.getRect()}"


def words_fit(widget: QWidget, text: str, room: int) -> tuple[bool, str]:
    need = widget.fontMetrics().horizontalAdvance(text)
    return need <= room, f"{text!r} needs {need} px, has {room}"


def controls_in_reach(window) -> dict[str, tuple[bool, str]]:
    """Every control shown in the docks open by default is whole in sight, none scrolled out of a dock."""
    checks: dict[str, tuple[bool, str]] = {}
    for dock_id in DOCKS_IN_REACH:
        dock = window.dock(dock_id)
        for control in dock.widget().findChildren(QWidget):
            if not isinstance(control, CONTROLS) or not control.isVisible() or control.width() < 4:
                continue  # hidden (a model without it), or a part of another control (a spin box's editor)
            if isinstance(control.parentWidget(), CONTROLS):
                continue
            words = getattr(control, "text", lambda: "")() or control.toolTip()[:30] or type(control).__name__
            checks[f"{dock_id}: {words!r} in reach"] = whole_on_screen(control)
    return checks


def tree_fits(window) -> dict[str, tuple[bool, str]]:
    """The module tree's columns: each one shown whole inside the dock, none reached by scrolling sideways; Type as
    wide as its names where it shows; a hidden column's words in the rows' tooltips."""
    tree = window.tree_view.tree
    header = tree.header()
    shown = [c for c in range(header.count()) if not tree.isColumnHidden(c)]
    last = shown[-1]
    end = header.sectionViewportPosition(last) + header.sectionSize(last)
    checks = {
        "tree: no sideways scrolling": (
            tree.horizontalScrollBar().maximum() == 0 and end <= tree.viewport().width(),
            f"scroll range {tree.horizontalScrollBar().maximum()}, columns end at {end} of {tree.viewport().width()}",
        ),
        "tree: the names keep their room": (
            header.sectionSize(NAME) >= NAME_MIN_WIDTH,
            f"{header.sectionSize(NAME)} px",
        ),
    }
    types = tree.model().sourceModel().types()
    widest = max(types, key=lambda t: tree.fontMetrics().horizontalAdvance(t))
    if TYPE in shown:
        checks["tree's Type column holds its names"] = words_fit(tree, widest, header.sectionSize(TYPE) - 8)
    else:
        model = tree.model().sourceModel()
        tip = str(model.data(model.index_of("", NAME), TOOLTIP))
        checks["tree: Type hidden, said in the tooltip"] = (model.nodes[0].type_name in tip, tip.replace("\n", " | "))
    if tree.model().sourceModel().has_attention:
        checks["tree: Attn column shown"] = (ATTENTION in shown, str(shown))
    return checks


def region(shot: QImage, rect: QRect) -> np.ndarray:
    """(H, W, 3) RGB of the screen in ``rect`` (global coordinates)."""
    part = shot.copy(rect).convertToFormat(QImage.Format.Format_RGB888)
    width, height, stride = part.width(), part.height(), part.bytesPerLine()
    data = np.frombuffer(bytes(part.constBits()), dtype=np.uint8).reshape(height, stride)
    return data[:, : width * 3].reshape(height, width, 3).astype(np.int16)


def input_picture_difference(window, shot: QImage) -> float:
    """Mean absolute difference between the input image as shown on the screen and the input itself, resampled
    to the size it is shown at: near 0 with nothing over it, large under a coloured mask."""
    panel = window.input_panel
    item, view = panel.image_item, panel.view
    rgb = item.image
    scene = item.mapRectToScene(item.boundingRect())
    shown = view.mapFromScene(scene).boundingRect()
    rect = QRect(view.mapToGlobal(shown.topLeft()), shown.size()).adjusted(3, 3, -3, -3)
    rect = rect.intersected(visible_rect(view.viewport()))
    screen = region(shot, rect)
    height, width = rgb.shape[:2]
    ys = (np.arange(rect.height()) + 3.5) * height / (shown.height())
    xs = (np.arange(rect.width()) + 3.5) * width / (shown.width())
    expected = rgb[np.clip(ys.astype(int), 0, height - 1)][:, np.clip(xs.astype(int), 0, width - 1)][..., :3]
    return float(np.abs(screen - expected.astype(np.int16)).mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", default="1366x768")
    parser.add_argument("--skip-models", action="store_true", help="leave out the model switches (slow)")
    parser.add_argument("--steps", default="", help="only these steps, by name (in_reach,inspector,...)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))

    app = application()
    window = make_window(ticks=[LAYER], tick_kinds=KINDS, remember=False, weights="none")
    window.show_dialogs = False
    window.resize(width, height)
    window.move(0, 0)
    window.show()
    report: list[dict] = []
    memory: dict = {}

    def record(step: str, checks: dict[str, tuple[bool, str]], shot: QImage | None = None) -> None:
        shot = shot if shot is not None else screen_image()
        name = f"{len(report):02d}-{step.replace(' ', '-')}.png"
        shot.save(str(out / name))
        report.append({"step": step, "screenshot": name, "checks": {k: [bool(v[0]), v[1]] for k, v in checks.items()}})
        bad = [k for k, v in checks.items() if not v[0]]
        print(f"{step}: {len(checks) - len(bad)} of {len(checks)} checks hold" + (f"; not: {bad}" if bad else ""))

    def four_kinds() -> None:
        area = window.panel_area
        card = next(c for c in area.cards() if c.path == LAYER)
        panels = card.panels()
        shot = screen_image()
        rects = [global_rect(p) for p in panels]
        page = QRect(area.viewport().mapToGlobal(QPoint(0, 0)), area.viewport().size())
        columns = len({r.left() for r in rects})
        fits_two = card.width_for(2) <= area.page_width()
        checks: dict[str, tuple[bool, str]] = {
            "card fills the page": (
                max(r.right() for r in rects) >= page.right() - 40 and (columns >= 2 or not fits_two),
                f"{columns} columns, panels end at {max(r.right() for r in rects)}, page at {page.right()}",
            )
        }
        for panel in panels:
            plot = check_plot(panel, shot)
            if plot is not None:
                checks[f"{panel.kind} shows its mosaic"] = (plot["ratio"] >= MATCH_NEEDED, f"{plot['ratio']:.2f}")
            chip, save = panel.chip, panel.export_button
            checks[f"{panel.kind} badge clear of the save icon"] = (
                global_rect(chip).right() < global_rect(save).left() and chip.width() >= chip.sizeHint().width(),
                f"badge {global_rect(chip).getRect()} ({chip.text()!r}), save {global_rect(save).getRect()}",
            )
        checks.update(tree_fits(window))
        if width >= 1920:  # a dock with room for it: the Type column shown, whole in sight
            tree = window.tree_view.tree
            checks["tree's Type column shown"] = (not tree.isColumnHidden(TYPE), "")
        button = window.features["input_settings"].button
        checks["Input… button in sight"] = whole_on_screen(button)
        hint = window.predictions.hint
        checks["Predictions hint whole"] = (
            whole_on_screen(hint)[0] and hint.height() >= hint.heightForWidth(hint.width()),
            f"{whole_on_screen(hint)[1]}, {hint.height()} px for {hint.heightForWidth(hint.width())}",
        )
        memory["labels"] = [row.label.width() for row in window.predictions.rows if row.isVisible()]
        record("four kinds", checks, shot)

    def maps_shown(shot: QImage) -> tuple[bool, str]:
        """Every mosaic in view shows its picture (the parts under another window, a dialog, left out)."""
        plots = [p for p in (check_plot(q, shot) for q in window.panel_area.panels.values()) if p is not None]
        return (
            bool(plots) and all(p["ratio"] >= MATCH_NEEDED for p in plots),
            ", ".join(f"{p['panel']} {p['ratio']:.2f} of {p['checked']}" for p in plots) or "no map in sight",
        )

    def file_dialog() -> None:
        """File > Open image's real dialog (Qt's own, modal) over the window, then Escape through the X server: the
        feature maps around it keep their pictures while it is open and after it closes (they were seen to go blank
        behind one)."""
        seen: dict[str, tuple[bool, str]] = {}
        window.activateWindow()
        pause(200)

        def look() -> None:
            dialog = QApplication.activeModalWidget()
            if dialog is None:
                QTimer.singleShot(200, look)
                return
            seen["the real dialog opened"] = (isinstance(dialog, QFileDialog), type(dialog).__name__)
            wait_until(lambda: QApplication.activeWindow() is dialog, 5.0)
            pause(1200)  # its frame drawn, the window behind it repainted where it was exposed
            shot = screen_image()
            seen["maps stay behind the dialog"] = maps_shown(shot)
            record("file dialog", seen, shot)

            def still_open() -> None:  # Escape not taken: closed here, and said as a failure
                if dialog.isVisible():
                    forced.append(True)
                    dialog.reject()

            QTimer.singleShot(10_000, still_open)
            pointer("key", "Escape")

        forced: list[bool] = []
        QTimer.singleShot(300, look)
        started = time.monotonic()
        window.menus.actions["file.open_image"].trigger()  # modal: back here once the dialog is closed
        took = time.monotonic() - started
        settle(window, app)
        pause(500)
        shot = screen_image()
        checks = {
            "Escape closed it": (
                not forced and QApplication.activeModalWidget() is None,
                f"closed {took:.1f} s after File > Open image{' by the test, not Escape' if forced else ''}",
            ),
            "maps shown after it closed": maps_shown(shot),
        }
        record("file dialog closed", checks, shot)

    def file_menu() -> None:
        """File opened by a click on the menu bar: the video entries greyed with no video open."""
        bar = window.menuBar()
        menu = window.menus.menu("File")
        pointer(*at(bar, bar.actionGeometry(menu.menuAction()).center()), "click", "1")
        opened = wait_until(lambda: menu.isVisible(), 5.0)
        pause(400)
        shot = screen_image()
        actions = window.menus.actions
        checks = {"File menu open": (opened, "")}
        checks["video entries greyed"] = (
            not any(actions[a].isEnabled() for a in LIVE_ACTIONS),
            str({a: actions[a].isEnabled() for a in LIVE_ACTIONS}),
        )
        checks["Open video… enabled"] = (actions["file.open_video"].isEnabled(), "")
        record("file menu", checks, shot)
        pointer("key", "Escape")
        wait_until(lambda: not menu.isVisible(), 3.0)

    def guide() -> None:
        from hookscope.ui.widgets.guide_browser import GuideWindow

        window.activateWindow()
        pause(300)
        pointer(*at(window.panel_area, QPoint(40, 40)), "key", "F1")  # F1 through the X server
        found = wait_until(lambda: (g := window.findChild(GuideWindow)) is not None and g.isVisible(), 10.0)
        guide = window.findChild(GuideWindow)
        pause(800)
        shot = screen_image()
        checks: dict[str, tuple[bool, str]] = {"F1 opens the guide": (found, "")}
        if not found:
            record("guide", checks, shot)
            return
        page = guide.page
        viewport = visible_rect(page.viewport()).intersected(QApplication.primaryScreen().geometry())
        pixels = region(shot, viewport)
        background = np.median(pixels.reshape(-1, 3), axis=0)
        inked = int((np.abs(pixels - background).max(axis=2) > 60).sum())
        saturation = pixels.max(axis=2) - pixels.min(axis=2)
        checks["the page shows text"] = (inked > 3000, f"{inked} pixels of ink")
        checks["the page shows its picture"] = (
            int((saturation > 60).sum()) > 2000,
            f"{int((saturation > 60).sum())} coloured pixels",
        )
        checks["the guide window in sight"] = whole_on_screen(guide)
        record("guide", checks, shot)
        # a click on the first page's link to Getting started, through the X server
        cursor = page.document().find("Getting started", 0, QTextDocument.FindFlag.FindCaseSensitively)
        cursor.setPosition(cursor.selectionStart() + 3)
        page.setTextCursor(cursor)
        page.ensureCursorVisible()  # the link scrolled into view, as a person scrolls to it
        pause(300)
        spot = page.cursorRect(cursor).center()
        pointer(*at(page.viewport(), spot), "click", "1")
        moved = wait_until(lambda: page.source().fileName() == "getting-started.md", 5.0)
        pause(500)
        shot2 = screen_image()
        changed = float(np.abs(region(shot2, viewport) - pixels).mean())
        record("guide link", {"the link opens its page": (moved, page.source().toString()),
                              "the screen shows it": (changed > 2.0, f"mean change {changed:.1f}")}, shot2)  # fmt: skip
        back = guide.back
        pointer(*at(back, back.rect().center()), "click", "1")
        returned = wait_until(lambda: page.source().fileName() == "index.md", 5.0)
        pause(500)
        record("guide back", {"Back returns": (returned, page.source().toString())})
        guide.close()
        rest_pointer(window)

    def video() -> None:
        from hookscope.ui.bench_live import write_clip

        live = window.features["live"]
        assert live.open_video(write_clip(out), loop=True), "the video did not open"
        start = live.shown
        wait_until(lambda: live.shown >= start + 4, 120)
        live.toggle_freeze()
        settle(window, app)
        pause(2600)  # longer than the rates' two seconds on the status line
        shot = screen_image()
        bar = live.bar
        checks = {
            "frame slider in sight": whole_on_screen(bar.slider),
            "it says frozen": (whole_on_screen(bar.state)[0] and "Frozen" in bar.state.text(), bar.state.text()),
            "status says frozen, not rates": (
                "frozen" in window.statusBar().currentMessage(),
                window.statusBar().currentMessage(),
            ),
            "the input still shows": (window.input_panel.view.height() >= 120, str(window.input_panel.view.height())),
        }
        record("video frozen", checks, shot)

    def record_dialogs() -> None:
        live = window.features["live"]
        live.toggle_freeze()  # playing again: the questions pause it themselves
        live.ask_record_path = lambda: str(out / "seen.avi")
        seen: dict[str, tuple[bool, str]] = {}

        def look() -> None:
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, QInputDialog):
                QTimer.singleShot(200, look)
                return
            wait_until(lambda: dialog.isVisible() and dialog.frameGeometry().width() > 50, 5.0)
            pause(800)  # the window manager's frame drawn
            title = dialog.windowTitle()
            need = dialog.fontMetrics().horizontalAdvance(f"{title} — Hookscope") + 100
            frame = dialog.frameGeometry()
            seen["title room"] = (frame.width() >= need, f"{title!r}: frame {frame.width()} px, needs {need}")
            seen["video waits"] = (live.frozen, f"frozen={live.frozen}")
            record("record dialog", seen)
            dialog.accept()

        QTimer.singleShot(300, look)
        live.record_dialog()
        recording = live.recorder is not None
        start = live.shown
        wait_until(lambda: live.shown >= start + 5, 120)
        written = live.stop_recording() or 0
        record("recorded", {"recording started": (recording, ""), "pictures written": (written > 0, str(written)),
                            "playing again": (not live.frozen, "")})  # fmt: skip
        live.stop()
        settle(window, app)

    def lessons() -> None:
        window.show_dock("lessons")
        feature = window.features["lessons"]
        feature.list.setCurrentRow(0)
        settle(window, app)
        shot = screen_image()
        title, text = feature.title, feature.text
        seen_title = visible_rect(title)
        checks = {
            "list beside the lesson": (
                global_rect(feature.list).right() < global_rect(title).left(),
                f"list {global_rect(feature.list).getRect()}, title {global_rect(title).getRect()}",
            ),
            "lesson title in sight": (seen_title.height() >= title.height() - 1, str(seen_title.getRect())),
            "lesson text starts in sight": (visible_rect(text).height() >= 20, str(visible_rect(text).getRect())),
            "lessons' titles readable": words_fit(
                feature.list, feature.list.item(0).text()[:24], visible_rect(feature.list.viewport()).width()
            ),
            "one scroll area, not nested": (
                window.dock("lessons").widget() is feature.widget,
                type(window.dock("lessons").widget()).__name__,
            ),
        }
        record("lessons", checks, shot)
        window.dock("lessons").close()

    def inspector() -> None:
        window.show_dock("inspector")
        settle(window, app)
        inspector = window.features["inspector"]
        table = inspector.table
        header = table.horizontalHeader()
        shown = [c for c in range(table.columnCount()) if not table.isColumnHidden(c)]
        end = header.sectionViewportPosition(shown[-1]) + header.sectionSize(shown[-1])
        checks = {
            "no sideways scrolling": (
                table.horizontalScrollBar().maximum() == 0 and end <= table.viewport().width(),
                f"columns end at {end} of {table.viewport().width()}",
            ),
            "the table in sight": whole_on_screen(table),
        }
        table.selectRow(0)
        settle(window, app)
        for column in range(table.columnCount() - 1):
            texts = [table.item(r, column).text() for r in range(table.rowCount()) if table.item(r, column)]
            name = table.horizontalHeaderItem(column).text()
            if not any(texts):
                continue
            if column in shown:
                widest = max(texts, key=table.fontMetrics().horizontalAdvance)
                checks[f"column {name!r} holds its words"] = words_fit(table, widest, header.sectionSize(column) - 6)
            else:
                words = table.item(0, column).text()
                line = inspector.hidden_words
                checks[f"column {name!r} hidden, said under the table"] = (
                    not words or (words in line.text() and whole_on_screen(line)[0]),
                    f"{words!r} in {line.text()!r}, {whole_on_screen(line)[1]}",
                )
        record("inspector", checks, screen_image())

    def edit() -> None:
        window.workspace.add_edit(Intervention("scale", LAYER, factor=0.5))
        settle(window, app)
        shot = screen_image()
        rows = [row for row in window.predictions.rows if row.isVisible()]
        before = memory.get("labels", [])
        checks = {
            "changes shown": (all(row.change.isVisible() for row in rows), ""),
            "class names keep their room": (
                bool(rows)
                and len(before) == len(rows)
                and all(r.label.width() >= old - 8 for r, old in zip(rows, before)),
                f"{[row.label.width() for row in rows]} against {before} without the edit",
            ),
        }
        for row in rows:
            checks[f"row {row.label.text()!r} in sight"] = whole_on_screen(row)
        record("edit on", checks, shot)
        window.workspace.remove_all_edits()
        settle(window, app)

    def in_reach() -> None:
        """Every control of the docks open by default in sight, the tree's columns whole (item 1's leftovers)."""
        shot = screen_image()
        edits = window.features["interventions"].tree
        listed = {
            "interventions: no sideways scrolling": (
                edits.horizontalScrollBar().maximum() == 0,
                f"scroll range {edits.horizontalScrollBar().maximum()}",
            )
        }
        record("in reach", {**controls_in_reach(window), **tree_fits(window), **listed}, shot)

    def video_in_reach() -> None:
        """With a video open (its frame slider and its Frozen line under the input): every control of the docks
        open by default still in sight, Image B's row too, the slider and the input picture with them."""
        from hookscope.ui.bench_live import write_clip

        live = window.features["live"]
        assert live.open_video(write_clip(out, frames=60), loop=True), "the video did not open"
        start = live.shown
        wait_until(lambda: live.shown >= start + 2, 120)
        live.toggle_freeze()  # frozen: the longest state line, and a still screen to read
        settle(window, app)
        pause(500)
        shot = screen_image()
        bar, slot = live.bar, window.features["image_b"].slot
        checks = {
            **controls_in_reach(window),
            "Open image B… in reach": whole_on_screen(slot.open_button),
            "frame slider in sight": whole_on_screen(bar.slider),
            "it says frozen": (whole_on_screen(bar.state)[0] and "Frozen" in bar.state.text(), bar.state.text()),
            "the input still shows": (window.input_panel.view.height() >= 100, str(window.input_panel.view.height())),
        }
        record("video in reach", checks, shot)
        live.stop()
        settle(window, app)

    def default_size() -> None:
        """The window at the size it opens at (1560x980) where the screen holds it: the tree still fits its dock."""
        window.resize(1560, 980)
        settle(window, app)
        pause(500)
        checks = {**tree_fits(window), "tree's Type column shown": (not window.tree_view.tree.isColumnHidden(TYPE), "")}
        record("default size", checks)
        window.resize(width, height)
        window.move(0, 0)
        settle(window, app)

    def references() -> None:
        """The guide's generated pages (the command line, the Python API) in the guide's window: real pages, read
        without scrolling sideways."""
        from hookscope.ui.widgets.guide_browser import GuideWindow

        window.menus.actions["help.guide"].trigger()
        guide = window.findChild(GuideWindow)
        wait_until(guide.isVisible, 5.0)
        for page_name, words in (("reference/cli.md", "hookscope export"), ("reference/api.md", "hookscope.capture(")):
            guide.page.setSource(QUrl.fromLocalFile(str(guide.page.pages / page_name)))
            pause(800)
            page = guide.page
            found = page.document().find(words, 0)
            page.setTextCursor(found)
            page.ensureCursorVisible()
            pause(400)
            shot = screen_image()
            viewport = visible_rect(page.viewport()).intersected(QApplication.primaryScreen().geometry())
            pixels = region(shot, viewport)
            background = np.median(pixels.reshape(-1, 3), axis=0)
            inked = int((np.abs(pixels - background).max(axis=2) > 60).sum())
            bar = page.horizontalScrollBar()
            record(f"guide {page_name.split('/')[1][:-3]}", {
                "the page is generated": (not found.isNull(), f"{words!r} on the page"),
                "the page shows text": (inked > 3000, f"{inked} pixels of ink"),
                "no sideways scrolling": (bar.maximum() == 0, f"scroll range {bar.maximum()}"),
                "the guide window in sight": whole_on_screen(guide),
            }, shot)  # fmt: skip
        guide.close()
        rest_pointer(window)

    runs: list[str] = []  # the model of each run that came on screen
    window.run_finished.connect(lambda *_: runs.append(getattr(window.workspace.loaded, "name", "")))

    def choose(name: str) -> None:
        """``name`` picked in the Model box as a click on its entry does; until its first run is on screen."""
        runs.clear()
        box = window.chooser.model_box
        box.setCurrentIndex(box.findText(name))
        box.textActivated.emit(name)
        assert wait_until(lambda: name in runs, 400), f"no run of {name} came on screen"
        settle(window, app, timeout_s=300)

    def segmenter() -> None:
        choose(SEGMENTER)
        pause(500)
        shot = screen_image()
        box = window.input_panel.mask_box
        inside = QRect(box.mapToGlobal(box.indicator_rect().topLeft()), box.indicator_rect().size())
        pixels = region(shot, inside.adjusted(1, 1, -1, -1))
        accent = np.array([0x3D, 0x8F, 0xD6])
        filled = float((np.abs(pixels - accent).max(axis=2) <= 12).mean())
        memory["mask difference"] = input_picture_difference(window, shot)
        checks = {
            "the mask box is ticked and drawn": (box.isChecked() and filled > 0.4, f"{filled:.2f} of the box"),
            "the mask is on the input": (memory["mask difference"] > 15, f"{memory['mask difference']:.1f}"),
        }
        record("segmenter", checks, shot)

    def detector() -> None:
        choose(DETECTOR)
        pause(500)
        shot = screen_image()
        difference = input_picture_difference(window, shot)
        predictions = window.predictions
        checks = {
            "no mask left on the input": (
                difference < 8,
                f"{difference:.1f} (with the mask: {memory.get('mask difference')})",
            ),
            "no mask box": (not window.input_panel.mask_box.isVisible(), ""),
            "no class rows of the segmenter": (all(r.isHidden() for r in predictions.rows), ""),
            "no legend of the segmenter": (not predictions.legend.isVisible(), ""),
        }
        record("detector", checks, shot)

    def vit() -> None:
        """A ViT: the tree gets its Attn column, and still fits its dock; every control still in reach."""
        choose(VIT)
        window.show_dock("modules")
        window.tree_view.expand_to(["blocks.0.attn"])
        settle(window, app)
        pause(500)
        record("vit", {**controls_in_reach(window), **tree_fits(window)})

    steps = [in_reach, four_kinds, file_dialog, file_menu, guide, references, video, record_dialogs]
    steps += [video_in_reach, lessons]
    steps += [inspector, edit]
    if width >= 1560 and height >= 980:
        steps.append(default_size)
    if not args.skip_models:
        steps += [segmenter, detector, vit]
    if args.steps:
        steps = [step for step in steps if step.__name__ in args.steps.split(",")]
    settle(window, app)
    for step in steps:
        try:
            step()
        except Exception as error:  # a step that could not be taken is a failure, said plainly
            report.append({"step": step.__name__, "error": f"{type(error).__name__}: {error}", "checks": {}})
            print(f"{step.__name__}: could not be taken: {error}\n{traceback.format_exc()}", flush=True)
        settle(window, app)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    window.close()
    window.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

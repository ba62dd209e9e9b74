"""Drives the window's Attention panel on an X server and reads back what the server shows (run as a script by
``test_attention_screen.py``, under Xvfb with ``QT_QPA_PLATFORM=xcb``).

A ViT-Tiny (random weights) opens with Attn ticked on its last attention module; the Attention dock is shown; then,
read from the root window's pixels (``QScreen.grabWindow(0)``), the input view must show the overlay's colours and
the tiles view the heads' mosaic, before and after a click (through the X server, by xdotool) on a patch of the
input, which must make that patch the query. Also reports where the Modules dock's tree draws its tick columns'
headers (In/Act/Grad/Grad in/Attn) against its viewport, and whether the tree scrolls sideways to show them. Writes a
JSON report and the screenshots into ``--out``.

    python tests/ui/attention_screen.py --out DIR --size 1366x768
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch  # noqa: F401  (torch before Qt)
from PySide6.QtCore import QPoint, QPointF, QRect, QSize
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QApplication

sys.path.insert(0, str(Path(__file__).parent))
from real_screen import pause, screen_image, settle, visible_rect  # noqa: E402

from hookscope.core.common.resources import colormap_lut  # noqa: E402
from hookscope.core.pictures.attention import on_input  # noqa: E402
from hookscope.core.pictures.cam import overlay  # noqa: E402
from hookscope.ui.app import application, make_window  # noqa: E402
from hookscope.ui.features.attention import COLORMAP, DOCK_ID  # noqa: E402
from hookscope.ui.widgets.module_tree import HEADER_TEXTS, KIND_COLUMNS  # noqa: E402

MODULE = "blocks.11.attn"
GRID = 12  # samples per side of each view
TOLERANCE = 3


def screen_array(shot) -> np.ndarray:
    """(H, W, 3) uint8 of a Format_RGB32 QImage."""
    data = np.frombuffer(shot.constBits(), np.uint8).reshape(shot.height(), shot.bytesPerLine() // 4, 4)
    return data[:, : shot.width(), 2::-1].copy()  # BGRA -> RGB


def check_view(view, box, expected: np.ndarray, screen: np.ndarray) -> dict:
    """Sample the part of ``box`` (a ViewBox showing an image at the origin, one unit per pixel) in view: the screen's pixel against the colour of
    ``expected`` (the item's picture, (h, w, 3)) under it."""
    scene = box.sceneBoundingRect()
    top_left = view.mapToGlobal(view.mapFromScene(scene.topLeft()))
    bottom_right = view.mapToGlobal(view.mapFromScene(scene.bottomRight()))
    rect = visible_rect(view).intersected(QRect(top_left, bottom_right))
    matched = total = 0
    for fy in np.linspace(0.1, 0.9, GRID):
        for fx in np.linspace(0.1, 0.9, GRID):
            gx, gy = int(rect.left() + fx * rect.width()), int(rect.top() + fy * rect.height())
            local = view.mapFromGlobal(QPoint(gx, gy))
            at = box.mapSceneToView(QPointF(view.mapToScene(local)))
            x, y = int(at.x()), int(at.y())
            if not (0 <= x < expected.shape[1] and 0 <= y < expected.shape[0]):
                continue
            total += 1
            # The picture scaled to the screen shows, at each pixel, one of the picture's pixels around it: the
            # colour must be one of those (a 3 x 3 neighbourhood), as drawn, within the tolerance.
            near = expected[max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2].reshape(-1, 3).astype(int)
            if (np.abs(near - screen[gy, gx].astype(int)).max(axis=1) <= TOLERANCE).any():
                matched += 1
    return {"samples": total, "matched": matched}


def tree_columns(window) -> dict:
    """Where the Modules dock's tree draws each tick column's header, in the viewport's coordinates, and the
    viewport's width (a header whose right edge passes it is cut off or needs the tree scrolled sideways); whether
    the titles are written upwards and the height they need; and, read from the screen, how many pixels of each
    header section differ from the section's own background (its title, drawn)."""
    tree = window.tree_view.tree
    header = tree.header()
    screen = screen_array(screen_image())
    columns, ink = {}, {}
    for column in KIND_COLUMNS.values():
        if tree.isColumnHidden(column):
            continue
        left = header.sectionViewportPosition(column)
        title = HEADER_TEXTS[column].replace("\n", " ")
        columns[title] = [left, left + header.sectionSize(column)]
        corner = header.viewport().mapToGlobal(QPoint(left, 0))
        shown = visible_rect(header.viewport()).intersected(QRect(corner, QSize(header.sectionSize(column),
                                                                                header.height())))  # fmt: skip
        cells = screen[shown.top() + 2 : shown.bottom() - 1, shown.left() + 2 : shown.right() - 1].astype(int)
        background = np.median(cells.reshape(-1, 3), axis=0) if cells.size else np.zeros(3)
        ink[title] = int((np.abs(cells - background).max(axis=-1) > 60).sum()) if cells.size else 0
    return {
        "viewport": tree.viewport().width(),
        "scroll_x": tree.horizontalScrollBar().value(),
        "columns": columns,
        "ink": ink,
        "header_height": header.height(),
        "upright": bool(getattr(header, "upright", False)),
        "upright_height": header.upright_height() if hasattr(header, "upright_height") else None,
        "name": header.sectionSize(0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", default="1366x768")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))

    app: QApplication = application()
    window = make_window("timm/vit_tiny_patch16_224", "none", ticks=[MODULE], tick_kinds=("attention",),
                         remember=False)  # fmt: skip
    window.show_dialogs = False
    window.resize(width, height)
    window.move(0, 0)
    window.show()
    settle(window, app)
    feature = window.features["attention"]
    assert feature.show_module(MODULE)
    window.show_dock(DOCK_ID)
    settle(window, app)
    report: dict = {}

    def look(step: str) -> None:
        pause(300)
        app.processEvents()
        shot = screen_image()
        shot.save(str(out / f"{step.replace(' ', '-')}.png"))
        screen = screen_array(shot)
        picture, image = feature.picture, feature._input
        lut = colormap_lut(COLORMAP)
        blended = overlay(image, on_input(picture.overlay, *image.shape[:2]), feature.opacity.value() / 100, lut)
        report[step] = {
            "query": feature.query,
            "input": check_view(feature.view, feature.input_box, blended, screen),
            "tiles": check_view(feature.view, feature.tiles_box, lut[feature.tiles_image()], screen),
        }

    report["tree"] = tree_columns(window)
    look("class token")
    # A person's click, through the X server, on the patch in row 3, column 5 of the input (224 x 224, 16 px patches)
    target = feature.input_box.mapViewToScene(QPointF(5 * 16 + 8, 3 * 16 + 8))
    where = feature.view.mapToGlobal(feature.view.mapFromScene(target))
    subprocess.run(["xdotool", "mousemove", "--sync", str(where.x()), str(where.y()), "click", "1"], check=True)
    pause(300)
    settle(window, app)
    look("patch clicked")
    report["tree after"] = tree_columns(window)
    tree = window.tree_view.tree
    corner = tree.mapToGlobal(QPoint(0, 0))
    screen = screen_image()
    QPixmap.fromImage(screen.copy(QRect(corner, tree.size()))).save(str(out / "modules-tree.png"))
    (out / "report.json").write_text(json.dumps(report, indent=1))
    window.close()
    window.shutdown()
    # Not through the interpreter's exit: PySide's exit-time teardown of a window whose module tree was scrolled
    # (here to blocks.11) crashes in QTreeView::verticalScrollbarValueChanged -> QSortFilterProxyModel::mapToSource,
    # on any model (ResNet-50 with layer4.2.conv3 ticked too): a fault of the tree's teardown, not of this panel,
    # reported to its owner. The report is written and the window shut down by now.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())

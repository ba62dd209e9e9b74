"""One panel per hooked record: every channel as one mosaic image, or a bar plot for 1-D outputs.

All channels go into a single image (the uint8 mosaic through its colormap, coloured off the GUI thread: see
``mosaic_item``), painted by one graphics item whatever the channel count, so 2048 channels draw as fast as 64.
The tile under the mouse is found by arithmetic on ``mapSceneToView`` through the mosaic's layout, not by one
item per channel.

A panel stays readable down to ``MIN_PANEL_WIDTH``: the title elides, the drop-downs wrap onto a second row, the
colour legend's note elides. The wheel scrolls the page of panels; Ctrl+wheel zooms, a double-click fits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QStackedWidget,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from hookscope.core.common.resources import COLORMAPS, colormap_lut
from hookscope.core.engine.numeric import count_non_finite
from hookscope.core.pictures.ab import view_of
from hookscope.core.pictures.panels import KIND_LABELS, VIEWS, PanelPicture, PanelSettings
from hookscope.core.pictures.views import shape_text
from hookscope.ui.state.rendering import rendered_for
from hookscope.ui.theme import KIND_COLORS
from hookscope.ui.widgets.export_button import export_button
from hookscope.ui.widgets.legend import ColorLegend, legend_of
from hookscope.ui.widgets.mosaic_item import MosaicItem, MosaicViewBox, ScrollingLayoutWidget, ScrollingPlotWidget

MESSAGE, MAPS, BARS = range(3)
MIN_PANEL_WIDTH = 240  # the least width a panel is laid out at: its plot keeps at least 200 px
MIN_PANEL_HEIGHT = 260
MARGIN_X, MARGIN_Y, SPACING = 6, 4, 3  # the panel's layout
CONTROL_SPACING = 4
VIEW_MARGIN = 2  # between the mosaic view's edge and its view box
VIEW_TIP = (
    "Hover a tile for its channel and value; click it to open the channel view.\n"
    "Wheel: scroll the panels · Ctrl+wheel: zoom · drag: pan · double-click: show the whole mosaic."
)
SCALING_LABELS = {"channel": "per channel", "shared": "shared"}


KIND_TIPS = {
    "pre": "What goes into the module (register_forward_pre_hook)",
    "forward": "The module's output (register_forward_hook)",
    "tensor": "|d target / d output| per channel (Tensor.register_hook on the output: exact after in-place ops)",
    "backward": "|d target / d output| per channel (register_full_backward_hook's grad_output, or a tensor hook)",
    "grad_input": "|d target / d input| per channel (register_full_backward_hook's grad_input)",
}


def sort_labels(kind: str, dataset: bool = False) -> dict[str, str]:
    """The order choices; ``dataset``: a scan of a folder covers the module ("by dataset mean")."""
    what = "|grad|" if kind in ("backward", "tensor", "grad_input") else "value"
    labels = {"none": "channel order", "mean": f"by mean {what}", "max": f"by max {what}", "diff": "by |A − B|"}
    return {**labels, "dataset": "by dataset mean"} if dataset else labels


class InfoLabel(QElidingLabel):
    """An eliding label that asks for its whole text's width (superqt's asks for the width of the text as last
    elided, so once squeezed it would stay short)."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        hint = super().sizeHint()
        margins = self.contentsMargins()
        return QSize(
            self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + margins.right() + 2, hint.height()
        )


class ChoiceButton(QToolButton):
    """A compact drop-down (label ▾) whose menu is built when opened.

    A panel has three of these; a ``QComboBox`` costs more to create than the rest of a panel, and ticking
    every Conv2d of a network creates dozens of panels at once.
    """

    chosen = Signal(str)

    def __init__(self, items: dict[str, str], current: str, tip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("choice")
        self._items = dict(items)
        self._value = current if current in items else next(iter(items))
        self.setToolTip(tip)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setText(f"{self._items[self._value]} ▾")
        self.clicked.connect(self._open)

    @property
    def value(self) -> str:
        return self._value

    def widest(self) -> int:
        """Its width with the longest of its labels: a panel places its drop-downs by this, so that choosing
        another value never makes a row overflow."""
        metrics = self.fontMetrics()
        extra = self.sizeHint().width() - metrics.horizontalAdvance(self.text())
        return extra + max(metrics.horizontalAdvance(f"{label} ▾") for label in self._items.values())

    def set_items(self, items: dict[str, str]) -> None:
        """Other choices (the current value stays when it is still one of them, else the first is shown)."""
        if items != self._items:
            self._items = dict(items)
            self.set_value(self._value if self._value in items else next(iter(items)))

    def set_value(self, value: str, notify: bool = False) -> None:
        if value not in self._items:
            raise ValueError(f"'{value}' is not one of {', '.join(self._items)}.")
        changed = value != self._value
        self._value = value
        self.setText(f"{self._items[value]} ▾")
        if notify and changed:
            self.chosen.emit(value)

    def _open(self) -> None:
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        for key, label in self._items.items():
            action = menu.addAction(label)
            action.setCheckable(True)
            action.setChecked(key == self._value)
            action.triggered.connect(lambda *_, k=key: self.set_value(k, notify=True))
        menu.popup(self.mapToGlobal(self.rect().bottomLeft()))


class FeatureMapPanel(QFrame):
    """What one hook saw in the last run, for one record (module, call, leaf) and one hook kind."""

    close_requested = Signal(str, str)  # path, kind: the window unticks the pair
    message = Signal(str, bool)  # something to tell the user (an export written or failed), and whether an error
    float_requested = Signal(object)  # the panel: pop it out of the grid into a dock of its own
    channel_clicked = Signal(object, int)  # the picture, the channel index
    settings_changed = Signal(str, str, object)  # path, kind, PanelSettings
    channel_menu_requested = Signal(object, int, object)  # the picture, the channel, the global QPoint: right-click

    # long because: builds the panel's widgets, layout and connections in the order they appear on screen
    def __init__(self, path: str, kind: str, key: str, settings: PanelSettings, parent: QWidget | None = None):
        super().__init__(parent)
        self.path, self.kind, self.key = path, kind, key
        self.settings = settings
        self.picture: PanelPicture | None = None
        self._plot: pg.PlotWidget | None = None
        self._bars: pg.BarGraphItem | None = None
        self._image_shape: tuple[int, ...] | None = None
        self._texts: tuple[str, ...] = ()  # the footer's texts as last set (``_show_labels``)
        self._idle_text = " "  # the footer when the mouse is not over a tile
        self.setObjectName("recordPanel")
        self.setMinimumSize(MIN_PANEL_WIDTH, MIN_PANEL_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

        self._title = QElidingLabel(key or "(model)")
        self._title.setElideMode(Qt.TextElideMode.ElideLeft)
        self._title.setObjectName("panelTitle")
        self._title.setToolTip(f"{key or '(the whole model)'}: {KIND_LABELS.get(kind, kind).lower()}")
        chip = QLabel(KIND_LABELS.get(kind, kind))
        chip.setObjectName("kindChip")
        chip.setStyleSheet(f"background: {KIND_COLORS.get(kind, '#666')};")
        chip.setToolTip(KIND_TIPS.get(kind, ""))
        # Never squeezed under its words and padding: in a 240 px panel the layout pressed "Output gradients" into
        # the Export icon beside it (the title, elided, gives way instead).
        chip.ensurePolished()
        chip.setMinimumWidth(chip.sizeHint().width())
        chip.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.chip = chip
        close = QToolButton()
        close.setObjectName("closePanel")
        close.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        close.setText("✕")
        close.setToolTip("Close this panel: removes its hook (unticks it in the module tree)")
        close.clicked.connect(lambda: self.close_requested.emit(self.path, self.kind))
        self.float_button = QToolButton()
        self.float_button.setObjectName("closePanel")
        self.float_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.float_button.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarNormalButton))
        self.float_button.setToolTip("Pop out into a dock of its own (drag it anywhere; close it to put it back)")
        self.float_button.clicked.connect(lambda: self.float_requested.emit(self))
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(CONTROL_SPACING)
        header.addWidget(chip)
        header.addWidget(self._title, 1)
        self.export_button = export_button(self)  # Export: PNG, SVG, arrays, statistics (panel_export.PANEL_EXPORTS)
        header.addWidget(self.export_button)
        header.addWidget(self.float_button)
        header.addWidget(close)

        self.colormap_box = ChoiceButton({c: c for c in COLORMAPS}, settings.colormap, "Colormap")
        self.scaling_box = ChoiceButton(
            SCALING_LABELS,
            settings.scaling,
            "Per-channel: each tile uses its own range. Shared: one range for all tiles.",
        )
        self.sort_box = ChoiceButton(sort_labels(kind), settings.sort, "Order of the tiles (highest first)")
        for box in (self.colormap_box, self.scaling_box, self.sort_box):
            box.chosen.connect(self._on_settings_edited)
        # With image B set: which of A, B and A − B this panel draws (``show_views``).
        self.views: dict[str, PanelPicture] = {}
        self.view_box = ChoiceButton(
            VIEWS, settings.view, "Image B is set: show this record on A, on B, or the difference A − B"
        )
        self.view_box.setVisible(False)
        self.view_box.chosen.connect(self._on_view_chosen)
        # One row of drop-downs when they fit, two when the panel is narrow (``_place_controls``).
        self._controls = QVBoxLayout()
        self._controls.setContentsMargins(0, 0, 0, 0)
        self._controls.setSpacing(2)
        self._control_lines = [QHBoxLayout(), QHBoxLayout()]
        for line in self._control_lines:
            line.setContentsMargins(0, 0, 0, 0)
            line.setSpacing(CONTROL_SPACING)
            line.addStretch(1)  # the drop-downs keep their size, at the left
            self._controls.addLayout(line)
        self._placed: tuple[int, tuple[ChoiceButton, ...]] = (0, ())
        self.control_rows = 0

        self._stack = QStackedWidget()
        self._message = QLabel("Waiting for the run…")
        self._message.setObjectName("muted")
        self._message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._message.setWordWrap(True)
        self._stack.addWidget(self._message)
        self._view = ScrollingLayoutWidget()
        self._view.ci.setContentsMargins(VIEW_MARGIN, VIEW_MARGIN, VIEW_MARGIN, VIEW_MARGIN)
        self._viewbox = MosaicViewBox(lockAspect=True, invertY=True, enableMenu=False)
        self._view.add_box(self._viewbox)
        self._mosaic = MosaicItem()
        self._viewbox.addItem(self._mosaic)
        self._view.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self._view.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self._view.setToolTip(VIEW_TIP)
        self._stack.addWidget(self._view)
        self._stack.setMinimumHeight(80)

        self.legend = ColorLegend()
        self.legend.setVisible(False)
        self._footer = QElidingLabel(" ")
        self._footer.setObjectName("panelFooter")
        # The hover text gives way first; the record's shape and channel count elide only when nothing else can.
        self._footer.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._info = InfoLabel("")
        self._info.setObjectName("panelFooter")
        self._info.setElideMode(Qt.TextElideMode.ElideLeft)
        footer = QHBoxLayout()
        footer.setContentsMargins(0, 0, 0, 0)
        footer.addWidget(self._footer, 1)
        footer.addWidget(self._info)
        self._note = QElidingLabel("")
        self._note.setObjectName("panelFooter")
        self._note.setVisible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(MARGIN_X, MARGIN_Y, MARGIN_X, MARGIN_Y)
        layout.setSpacing(SPACING)
        layout.addLayout(header)
        layout.addLayout(self._controls)
        layout.addWidget(self._stack, 1)
        layout.addWidget(self.legend)
        layout.addLayout(footer)
        layout.addWidget(self._note)
        # One row to start with; the first resize (when the panel is laid out) wraps them if need be.
        first = self._control_boxes()
        for box in first:
            self._control_lines[0].insertWidget(self._control_lines[0].count() - 1, box)
        self._placed = (1, tuple(first))
        self.control_rows = 1

    # ---- layout ---------------------------------------------------------------------------------------------
    def _control_boxes(self) -> list[ChoiceButton]:
        boxes = [self.colormap_box, self.scaling_box, self.sort_box]
        return [self.view_box, *boxes] if self.views and len(self.views) > 1 else boxes

    def control_rows_at(self, width: int) -> int:
        """How many rows the drop-downs take in a panel ``width`` pixels wide (1, or 2 when narrow)."""
        boxes = self._control_boxes()
        need = sum(box.widest() for box in boxes) + CONTROL_SPACING * (len(boxes) - 1)
        return 1 if need <= width - 2 * MARGIN_X - 2 * self.frameWidth() else 2

    def _place_controls(self) -> None:
        boxes = self._control_boxes()
        rows = self.control_rows_at(self.width())
        placed = (rows, tuple(boxes))
        if placed == self._placed:
            return
        self._placed = placed
        self.control_rows = rows
        for line in self._control_lines:
            for box in (self.view_box, self.colormap_box, self.scaling_box, self.sort_box):
                line.removeWidget(box)
        per_row = len(boxes) if rows == 1 else -(-len(boxes) // 2)
        for n, box in enumerate(boxes):
            line = self._control_lines[n // per_row]
            line.insertWidget(line.count() - 1, box)
        self.view_box.setVisible(self.view_box in boxes)

    def height_for_width(self, width: int, plot_ratio: float = 0.85) -> int:
        """The height that gives a mosaic view about ``plot_ratio`` as tall as it is wide, in a panel ``width``
        pixels wide (mosaics are about square), between MIN_PANEL_HEIGHT and 900."""
        rows = self.control_rows_at(width)
        row_height = self.colormap_box.sizeHint().height()
        header = max(self._title.sizeHint().height(), self.export_button.sizeHint().height(), row_height)
        footer = self._info.sizeHint().height()
        chrome = (
            2 * MARGIN_Y
            + 2 * self.frameWidth()
            + header
            + rows * row_height
            + (rows - 1) * 2
            + self.legend.height()
            + footer
            + 4 * SPACING
        )
        if self._note.isVisibleTo(self):
            chrome += footer + SPACING
        plot = (width - 2 * MARGIN_X - 2 * self.frameWidth()) * plot_ratio
        return int(min(max(chrome + plot, MIN_PANEL_HEIGHT), 900))

    def set_in_card(self, in_card: bool) -> None:
        """In a module's card, whose title is the module's path, the panel's title is only what tells its record
        apart ("#1" for a second call, "/0" for a leaf of a structured output); on its own, the whole key."""
        key = self.key or "(model)"
        text = key[len(self.path) :] if in_card and self.path and key.startswith(self.path) else key
        if self._title.text() != text:
            self._title.setText(text)

    def plot_widget(self) -> QWidget:
        """The pyqtgraph view on show (the mosaic's, or the bar plot's), or the message label."""
        shown = self._stack.currentWidget()
        assert shown is not None  # the stack is made with its pages and never emptied
        return shown

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._place_controls()

    # ---- showing data ---------------------------------------------------------------------------------------
    @property
    def ident(self) -> tuple[str, str]:
        return self.kind, self.key

    @property
    def kind_label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)

    def view_size(self) -> tuple[int, int] | None:
        """The mosaic view box's size in device pixels, what a run colours mosaics for (``rendering.fitted_size``:
        the size a fitted mosaic is shown at, so that it paints pixel for pixel); None until laid out."""
        # From the stack's size, not the view's: until the first picture the view is a hidden page of the stack
        # and keeps a default size of its own. The view box fills the view but for its margin.
        area = self._stack
        if not self.isVisible() or min(area.width(), area.height()) < 50:  # not laid out yet
            return None
        ratio = area.devicePixelRatioF()
        return (round((area.width() - 2 * VIEW_MARGIN) * ratio), round((area.height() - 2 * VIEW_MARGIN) * ratio))

    def show_message(self, text: str) -> None:
        """No picture for this record (yet): waiting for a run, or the module did not run."""
        self.picture = None
        self._message.setText(text)
        self._stack.setCurrentIndex(MESSAGE)
        self._info.setText("")
        self._texts = ()
        self._idle_text = " "
        self._footer.setText(" ")
        self._set_note("")
        self._set_legend(None)

    def release(self) -> None:
        """Let go of the pictures (their records hold the run's tensors) when the panel is removed. A pyqtgraph
        plot is a web of reference cycles (its layout's bound methods, the scene's weak lists), so a removed panel's
        Python side waits for Python's full collection, which can be many runs away; without this, what it drew
        waited with it: a removed panel's record and mosaics, tens of MB after a few model switches (issue 21,
        item 8; ``tests/ui/test_memory.py``)."""
        self.picture = None
        self.views = {}
        self._mosaic.release()
        self._set_legend(None)
        if self._bars is not None:
            self._bars.setOpts(x0=[], height=[])

    def show_picture(self, picture: PanelPicture) -> None:
        """The hot path after every run: one ``setImage`` (or one bar item update), a few labels."""
        if self.views:
            self.views = {}
            self._place_controls()
        self._draw(picture)

    def show_views(self, views: dict[str, PanelPicture]) -> None:
        """Image B is set: this record on A, on B and A − B (keys of ``VIEWS``); the panel's setting ``view``
        (its view drop-down) picks one."""
        self.views = dict(views)
        self._place_controls()
        self._draw_view()

    def choose_view(self, view: str) -> None:
        """Show "A", "B" or "diff", as the view drop-down does."""
        self.view_box.set_value(view, notify=True)

    def _on_view_chosen(self, view: str) -> None:
        settings = replace(self.settings, view=view)
        if settings == self.settings:
            return
        self._set_settings(settings)
        self.settings_changed.emit(self.path, self.kind, settings)

    def _draw_view(self) -> None:
        view = self.settings.view if self.settings.view in self.views else "A"
        self.view_box.set_value(view)
        picture = self.views[view]
        if picture.settings != self.settings:
            picture = self.views[view] = picture.with_settings(self.settings)
        self._draw(picture)

    def _draw(self, picture: PanelPicture) -> None:
        self.picture = picture
        self.settings = picture.settings
        # "by dataset mean" is offered while a scan covers this module (kept while chosen, drawn in channel order).
        dataset = picture.dataset_order is not None or picture.settings.sort == "dataset"
        self.sort_box.set_items(sort_labels(self.kind, dataset))
        self.sort_box.set_value(picture.settings.sort)
        kind = picture.channels.kind
        self._show_labels(picture)
        self._set_legend(picture)
        if picture.flat and kind != "scalar":
            self._message.setText(self._flat_text(picture))
            self._show_page(MESSAGE)
            self._footer.setText(" ")
        elif kind == "maps" and all(picture.arrangement.size):
            self._mosaic.show_rendered(rendered_for(picture, self.view_size()))
            if picture.arrangement.size != self._image_shape:
                self._image_shape = picture.arrangement.size
                self._viewbox.fit()
            self._show_page(MAPS)
        elif kind == "vector":
            self._show_bars(picture)
        elif kind == "scalar":
            self._message.setText(f"{float(picture.channels.data.reshape(-1)[0]):.6g}")
            self._show_page(MESSAGE)
        else:
            self._message.setText("Empty output: nothing to draw.")
            self._show_page(MESSAGE)

    def _show_labels(self, picture: PanelPicture) -> None:
        """The footer's texts; set only when they change (after most runs they do not, and setting a label
        re-elides and re-lays it out: with 40 panels that is milliseconds of the GUI thread per run)."""
        kind = picture.channels.kind
        noun = {"maps": "maps", "vector": "values", "scalar": "value"}[kind]
        grad = "A − B · " if view_of(picture) == "diff" else "|grad| · " if picture.is_gradient else ""
        note = picture.channels.note
        texts = (
            f"{grad}{shape_text(picture.shape)} · {picture.channel_count} {noun}",
            f"Hook: {picture.method}" + (f"\n{note}" if note else ""),
            "hover or click a tile" if kind == "maps" else " ",
            note,
            kind,
        )
        if self._footer.text() != texts[2]:
            self._footer.setText(texts[2])  # a hover text from before the run goes
        if texts == self._texts:
            return
        self._texts = texts
        info, tip, self._idle_text, note, kind = texts
        self._info.setText(info)
        self._info.setToolTip(tip)
        self._footer.setText(self._idle_text)
        self._set_note(note)
        self.scaling_box.setEnabled(kind == "maps")
        self.sort_box.setEnabled(kind != "scalar")

    def _set_legend(self, picture: PanelPicture | None) -> None:
        legend = legend_of(picture) if picture is not None else None
        self.legend.set_legend(legend)
        if self.legend.isVisibleTo(self) != (legend is not None):
            self.legend.setVisible(legend is not None)

    def _show_page(self, page: int) -> None:
        if self._stack.currentIndex() != page:
            self._stack.setCurrentIndex(page)

    def _set_note(self, note: str) -> None:
        self._note.setText(note)
        self._note.setToolTip(note)
        self._note.setVisible(bool(note))

    @staticmethod
    def _flat_text(picture: PanelPicture) -> str:
        """Why a panel shows no picture: every value is the same."""
        # the record's tensor where the run left it (``record.tensor`` would copy it to the CPU first)
        broken = count_non_finite(picture.key, picture.record.data) if picture.record is not None else None
        if broken is not None:  # NaN or inf, drawn as 0: not an all-zero gradient, and not an untrained head
            return (
                f"{broken.words[0].upper()}{broken.words[1:]} here (drawn as 0): the numbers broke down before "
                "this point.\n(NaN or inf in the weights, or values that overflowed: the banner above the "
                "panels says which.)"
            )
        if picture.is_gradient and picture.high == 0.0:
            return (
                "Every gradient here is 0: nothing in this output changes the target score.\n"
                "(An untrained model with a zero-initialised head, such as torchvision's ViT, does this.)"
            )
        what = "|grad|" if picture.is_gradient else "value"
        return f"Every {what} here is {picture.high:.4g}: there is nothing to tell apart."

    def _show_bars(self, picture: PanelPicture) -> None:
        values = picture.arrangement.values
        if values is None:
            return
        if self._plot is None:
            self._plot = ScrollingPlotWidget()
            self._plot.setMenuEnabled(False)
            self._plot.setLabel("bottom", "channel")
            self._plot.scene().sigMouseMoved.connect(self._on_mouse_moved_bars)
            self._bars = pg.BarGraphItem(x0=[], height=[], width=0.9)
            self._plot.addItem(self._bars)
            self._stack.addWidget(self._plot)
        color = tuple(int(c) for c in colormap_lut(self.settings.colormap)[170])
        x0 = np.arange(values.size, dtype=np.float32)
        assert self._bars is not None  # made with the plot above
        self._bars.setOpts(x0=x0, height=values, width=0.9, brush=pg.mkBrush(color), pen=None)
        self._plot.setXRange(0, max(values.size, 1), padding=0.01)
        low, high = min(0.0, float(values.min(initial=0))), max(0.0, float(values.max(initial=0)))
        self._plot.setYRange(low, high if high > low else low + 1, padding=0.05)
        self._stack.setCurrentWidget(self._plot)

    def apply_settings(self, settings: PanelSettings) -> None:
        """Redraw under new settings on the GUI thread (one mosaic: milliseconds even for 2048 channels)."""
        for box, value in (
            (self.colormap_box, settings.colormap),
            (self.scaling_box, settings.scaling),
            (self.sort_box, settings.sort),
            (self.view_box, settings.view),
        ):
            box.set_value(value)
        self._set_settings(settings)

    def choose(self, **choices: str) -> None:
        """Change settings as the panel's drop-downs do, e.g. ``choose(sort="mean")``."""
        boxes = {"colormap": self.colormap_box, "scaling": self.scaling_box, "sort": self.sort_box}
        for name, value in choices.items():
            boxes[name].set_value(value)
        self._on_settings_edited()

    def _on_settings_edited(self, *_: object) -> None:
        settings = replace(
            self.settings,
            colormap=self.colormap_box.value,
            scaling=self.scaling_box.value,
            sort=self.sort_box.value,
        )
        if settings == self.settings:
            return
        self._set_settings(settings)
        self.settings_changed.emit(self.path, self.kind, settings)

    def _set_settings(self, settings: PanelSettings) -> None:
        self.settings = settings
        if self.views:
            self._draw_view()
        elif self.picture is not None:
            self._draw(self.picture.with_settings(settings))

    # ---- mouse ----------------------------------------------------------------------------------------------
    def channel_at(self, scene_pos: QPointF) -> tuple[int, float] | None:
        """(channel, value) under a scene position of the mosaic, or None over padding and outside."""
        picture = self.picture
        if picture is None or picture.arrangement.layout is None:
            return None
        point = self._viewbox.mapSceneToView(scene_pos)
        x, y = point.x(), point.y()
        layout = picture.arrangement.layout
        channel = layout.tile_at(x, y)
        if channel is None:
            return None
        ox, oy = layout.tile_origin(channel)
        value = float(picture.channels.data[channel, int(y) - oy, int(x) - ox])
        return channel, value

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        hit = self.channel_at(scene_pos)
        if hit is None or self.picture is None:
            self._footer.setText(self._idle_text)
            return
        channel, value = hit
        what = "|grad|" if self.picture.is_gradient else "value"
        self._footer.setText(
            f"channel {channel} · {what} {value:.4g} · channel mean {float(self.picture.channels.data[channel].mean()):.4g}"
        )

    def _on_mouse_clicked(self, event: Any) -> None:  # pyqtgraph's MouseClickEvent
        if event.button() == Qt.MouseButton.RightButton:
            hit = self.channel_at(event.scenePos())
            if hit is not None and self.picture is not None:
                event.accept()
                self.channel_menu_requested.emit(self.picture, hit[0], event.screenPos().toPoint())
            return
        if event.button() != Qt.MouseButton.LeftButton:
            return
        if event.double():  # the whole mosaic again; the first click of the two opened the channel already
            event.accept()
            self._viewbox.fit()
            return
        hit = self.channel_at(event.scenePos())
        if hit is not None and self.picture is not None:
            event.accept()
            self.channel_clicked.emit(self.picture, hit[0])

    def _on_mouse_moved_bars(self, scene_pos: QPointF) -> None:
        picture = self.picture
        if picture is None or self._plot is None or picture.arrangement.values is None:
            return
        x = self._plot.getPlotItem().vb.mapSceneToView(scene_pos).x()
        position = int(np.floor(x))
        values = picture.arrangement.values
        if not 0 <= position < values.size:
            self._footer.setText(self._idle_text)
            return
        order = picture.arrangement.order
        channel = int(order[position]) if order is not None else position
        what = "|grad|" if picture.is_gradient else "value"
        self._footer.setText(f"channel {channel} · {what} {float(values[position]):.4g}")

"""Top-5 classes with probability bars; clicking one makes it the gradient target."""

from __future__ import annotations

import html
import math

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics, QImage, QMouseEvent, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from hookscope.core.engine.capture import Prediction
from hookscope.core.engine.target_words import Objective
from hookscope.core.pictures.compare import PredictionChange
from hookscope.ui.widgets.detection_overlay import DEFAULT_THRESHOLD
from hookscope.ui.widgets.segmentation_legend import SegmentationLegend
from hookscope.ui.widgets.wrapped_label import WrappedLabel

THUMBNAIL = 72


CLASS_HINT = "Click a class to target it."  # its gradients are taken (the tooltip says so)
BAR_WIDTH = 50  # px: a class's probability bar, or in its place the change an edit made


def change_text(delta: float) -> str:
    """A probability change in percentage points, signed: "+3.1%", "-0.04%", "±0"."""
    points = delta * 100
    if points == 0:
        return "±0"
    if abs(points) >= 0.05:
        return f"{points:+.1f}%"
    if abs(points) >= 0.0005:
        return f"{points:+.3f}%"
    return "+<0.001%" if points > 0 else "-<0.001%"


def rgb_pixmap(rgb: np.ndarray, side: int = THUMBNAIL) -> QPixmap:
    """An (H, W, 3) uint8 image as a pixmap no larger than ``side``."""
    data = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width = data.shape[:2]
    image = QImage(data.data, width, height, width * 3, QImage.Format.Format_RGB888).copy()
    return QPixmap.fromImage(image).scaled(
        side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
    )


class PredictionCell(QLabel):
    """One class of the side-by-side columns: its name elided to the cell's width, then its probability (grey),
    bold when both images have it; the whole name in the tooltip. A 230 px column holds two of them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(40)
        self._parts: tuple[str, str, bool] | None = None

    def set_parts(self, parts: tuple[str, str, bool] | None) -> None:
        self._parts = parts
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        if self._parts is None:
            self.setText("")
            return
        name, probability, shared = self._parts
        font = self.font()
        font.setBold(shared)
        metrics = QFontMetrics(font)
        room = max(0, self.contentsRect().width() - metrics.horizontalAdvance(" " + probability) - 2)
        shown = html.escape(metrics.elidedText(name, Qt.TextElideMode.ElideRight, room))
        text = f"{shown} <span style='color:#9aa0aa'>{probability}</span>"
        self.setText(f"<b>{text}</b>" if shared else text)


class SideBySidePredictions(QWidget):
    """The top-5 of image A and of image B next to each other; a class both have is marked in both columns."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Elided to the column (whole in the tooltip): the file names and class names of two columns side by side
        # reached 200 px past the predictions' column at 1024 px.
        self.heads = (QElidingLabel("A"), QElidingLabel("B"))
        self.cells: list[tuple[PredictionCell, PredictionCell]] = []
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 6, 0, 0)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(1)
        for column, head in enumerate(self.heads):
            head.setObjectName("panelTitle")
            head.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            grid.addWidget(head, 0, column)
        for row in range(5):
            pair = (PredictionCell(), PredictionCell())
            for column, label in enumerate(pair):
                grid.addWidget(label, row + 1, column)
            self.cells.append(pair)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)

    def show_both(self, name_a: str, top5_a: list[Prediction], name_b: str, top5_b: list[Prediction]) -> None:
        for head, text in zip(self.heads, (f"A: {name_a}", f"B: {name_b}"), strict=True):
            head.setText(text)
            head.setToolTip(text)
        shared = {p.index for p in top5_a} & {p.index for p in top5_b}
        for row, (cell_a, cell_b) in enumerate(self.cells):
            for cell, top5 in ((cell_a, top5_a), (cell_b, top5_b)):
                prediction = top5[row] if row < len(top5) else None
                if prediction is None:
                    cell.set_parts(None)
                    cell.setToolTip("")
                    continue
                cell.set_parts((prediction.label, f"{prediction.probability:.1%}", prediction.index in shared))
                cell.setToolTip(
                    f"class {prediction.index}: {prediction.label}"
                    + ("\nin the top 5 of both images" if prediction.index in shared else "")
                )

    @property
    def texts(self) -> list[tuple[str, str]]:
        return [(a.text(), b.text()) for a, b in self.cells]


class PredictionRow(QFrame):
    clicked = Signal(int)  # class index

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("predictionRow")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.index: int | None = None
        self.label = QElidingLabel("")
        self.label.setMinimumWidth(60)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setFixedWidth(BAR_WIDTH)
        self.bar.setFormat("")
        self.percent = QLabel("")
        self.percent.setMinimumWidth(48)
        self.percent.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.change = QLabel("")  # the change since the run without edits, "+3.1%"
        self.change.setObjectName("predictionChange")
        self.change.setFixedWidth(BAR_WIDTH)  # in the bar's place, no wider (see show_change)
        self.change.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.change.setVisible(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.bar)
        layout.addWidget(self.percent)
        layout.addWidget(self.change)

    def show_change(self, change: PredictionChange | None) -> None:
        """The change of this class's probability since the run without edits (green up, red down)."""
        self.change.setVisible(change is not None)
        # the change takes the bar's place: beside both, a 1366 px window left the names "Greater ...", "water s..."
        self.bar.setVisible(change is None)
        if change is None:
            self.change.setText("")
            return
        self.change.setText(change_text(change.delta))
        color = "#7bd88f" if change.delta > 0 else "#ff8a80" if change.delta < 0 else "#9aa0aa"
        self.change.setStyleSheet(f"color: {color}; font-size: 10px;")  # in the bar's 50 px: "+0.003%" fits
        self.change.setToolTip(f"{change.before:.2%} without the edits, {change.probability:.2%} with them")

    def show_prediction(self, prediction: Prediction | None, is_target: bool) -> None:
        self.index = prediction.index if prediction else None
        self.setVisible(prediction is not None)
        if prediction is None:
            return
        self.label.setText(prediction.label)
        self.label.setToolTip(f"class {prediction.index}: {prediction.label}\nClick: use as the gradient target")
        probability = prediction.probability
        if math.isfinite(probability):
            self.bar.setValue(int(round(probability * 1000)))
            self.percent.setText(f"{probability:.1%}")
        else:  # the model gave NaN or inf scores (an edit that scales by inf, say): say so, do not fail
            self.bar.setValue(0)
            self.percent.setText("NaN" if math.isnan(probability) else "inf")
        if self.property("target") != is_target:  # re-styled only when it changes: a live video asks every frame
            self.setProperty("target", is_target)
            self.style().unpolish(self)
            self.style().polish(self)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.index is not None:
            self.clicked.emit(self.index)
        super().mousePressEvent(event)


class DetectionControls(QWidget):
    """A detection model's score threshold (the boxes drawn on the input) and how many boxes pass it."""

    threshold_changed = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 100)  # hundredths of a score
        self.slider.setValue(round(DEFAULT_THRESHOLD * 100))
        self.slider.setToolTip("Boxes with a score at or above this are drawn on the input")
        self.value = QLabel("")
        self.value.setMinimumWidth(36)
        self.count = QLabel("")
        self.count.setObjectName("muted")
        self.count.setWordWrap(True)
        hint = QLabel("Click a box on the input to take gradients of its score.")
        hint.setObjectName("muted")
        hint.setWordWrap(True)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Score ≥"))
        row.addWidget(self.slider, 1)
        row.addWidget(self.value)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.count)
        layout.addWidget(hint)
        self.slider.valueChanged.connect(self._on_value)
        self._on_value(self.slider.value())

    @property
    def threshold(self) -> float:
        return self.slider.value() / 100

    def set_threshold(self, threshold: float) -> None:
        self.slider.setValue(round(threshold * 100))

    def show_count(self, shown: int, total: int) -> None:
        self.count.setText(f"{shown} of {total} detections drawn" if total else "The model found no object.")

    def _on_value(self, value: int) -> None:
        self.value.setText(f"{value / 100:.2f}")
        self.threshold_changed.emit(value / 100)


class SimilarityControls(QWidget):
    """An embedding model's targets: the cosine similarity to image B's embedding, or to a text's (CLIP-like
    models), and the score of the last run."""

    image_b_chosen = Signal()
    text_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.image_b_button = QPushButton("Similarity to image B")
        self.image_b_button.setToolTip("Take gradients of the cosine similarity of this image's embedding to image B's")
        self.image_b_button.clicked.connect(self.image_b_chosen)
        self.text_label = QLabel("Similarity to the text:")
        self.text_field = QLineEdit()
        self.text_field.setPlaceholderText("a photo of a cat")
        self.text_field.setToolTip(
            "Type a description and press Enter: the target is the cosine similarity of the "
            "image's embedding to the text's"
        )
        self.text_field.returnPressed.connect(self._on_text)
        self.score = WrappedLabel("")
        self.score.setObjectName("panelTitle")
        self.hint = WrappedLabel("")
        self.hint.setObjectName("muted")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.score)
        layout.addWidget(self.image_b_button)
        layout.addWidget(self.text_label)
        layout.addWidget(self.text_field)
        layout.addWidget(self.hint)

    def configure(self, has_image_b: bool, has_text: bool) -> None:
        self.image_b_button.setEnabled(has_image_b)
        self.text_label.setVisible(has_text)
        self.text_field.setVisible(has_text)
        self.hint.setText("" if has_image_b else "Open an image B (File > Open image B…) to compare embeddings.")
        self.hint.setVisible(not has_image_b)

    def show_score(self, text: str) -> None:
        self.score.setText(text)
        self.score.setVisible(bool(text))

    def _on_text(self) -> None:
        text = self.text_field.text().strip()
        if text:
            self.text_chosen.emit(text)


class PredictionsPanel(QWidget):
    """What the model predicts, and which score the gradients are taken of."""

    target_chosen = Signal(object)  # the Objective chosen (typed: no text to parse again), or a class index

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows = [PredictionRow() for _ in range(5)]
        # Wrapped, with the height its lines need (a plain wrapped label in a short dock painted over its neighbours;
        # elided, the target's class name was cut in a 1024 px window).
        self.target_label = WrappedLabel("Gradient target: top-1 class")
        self.target_label.setObjectName("muted")
        self.top1_button = QPushButton("Use top-1")
        self.top1_button.setToolTip("Take gradients of whichever class scores highest")
        self.top1_button.clicked.connect(lambda: self.target_chosen.emit(Objective("top1")))
        self.class_box = QSpinBox()
        self.class_box.setRange(0, 999)
        self.class_box.setToolTip("Class index to take gradients of")
        use_class = QPushButton("Use class")
        use_class.clicked.connect(self._use_class)
        # short and wrapped, not elided: a 1024x700 window cut its longer first words at the dock's bottom
        self.hint = WrappedLabel(CLASS_HINT)
        self.hint.setToolTip("Click a class above to take the gradients of its score")
        self.hint.setObjectName("muted")
        self.changes: list[PredictionChange] = []
        # short, so that it takes one line: a second one gave the dock a scroll bar that took the names' room
        self.changes_label = WrappedLabel("Change since the run without edits")
        self.changes_label.setToolTip("Change of each probability since the run without the interventions")
        self.changes_label.setObjectName("muted")
        self.changes_label.setVisible(False)
        self.side_by_side = SideBySidePredictions()  # image A and image B, when B is set
        self.side_by_side.setVisible(False)
        # What a segmentation, detection or embedding model shows instead of class rows (``show_task``).
        self.legend = SegmentationLegend()
        self.legend.class_chosen.connect(lambda c: self.target_chosen.emit(Objective("class", index=c)))
        self.legend.setVisible(False)
        self.detection = DetectionControls()
        self.detection.setVisible(False)
        self.similarity = SimilarityControls()
        self.similarity.text_chosen.connect(lambda text: self.target_chosen.emit(Objective("text", text=text)))
        self.similarity.setVisible(False)
        self.task = "classification"
        # Two rows: in one, the three needed about 240 px and the 230 px column scrolled sideways.
        buttons = QVBoxLayout()
        top1_row = QHBoxLayout()
        top1_row.addWidget(self.top1_button)
        top1_row.addStretch(1)
        class_row = QHBoxLayout()
        class_row.addWidget(QLabel("or class"))
        class_row.addWidget(self.class_box)
        class_row.addWidget(use_class)
        class_row.addStretch(1)
        buttons.addLayout(top1_row)
        buttons.addLayout(class_row)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        for row in self.rows:
            row.clicked.connect(self.target_chosen.emit)
            row.setVisible(False)
            layout.addWidget(row)
        layout.addWidget(self.legend)
        layout.addWidget(self.detection)
        layout.addWidget(self.similarity)
        layout.addWidget(self.changes_label)
        layout.addSpacing(4)
        layout.addWidget(self.target_label)
        self.class_buttons = QWidget()  # "Use top-1" and "or class N": they name a class of a classifier
        self.class_buttons.setLayout(buttons)
        buttons.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.class_buttons)
        layout.addWidget(self.hint)
        layout.addWidget(self.side_by_side)
        layout.addStretch(1)

    def show_predictions(
        self, top5: list[Prediction], target_index: int | None, target_text: str, classes: int | None
    ) -> None:
        for n, row in enumerate(self.rows):
            prediction = top5[n] if n < len(top5) else None
            row.show_prediction(prediction, prediction is not None and prediction.index == target_index)
        self.target_label.setText(f"Gradient target: {target_text}")
        self.target_label.setToolTip(self.target_label.text())
        if classes:
            self.class_box.setRange(0, classes - 1)
        self.hint.setText(CLASS_HINT if top5 else "This model's output is not class scores.")

    def clear_results(self, task: str, text: str) -> None:
        """Nothing of a run: no class, no mask's classes, no count or score, and ``text`` on the target line (what
        is awaited, or why nothing came). For a model of ``task`` just loaded, before its first run."""
        for row in self.rows:
            row.show_prediction(None, False)
        self.show_changes([])
        self.show_side_by_side(None)
        self.legend.clear()
        self.detection.count.setText("")
        self.similarity.show_score("")
        self.show_task(task)
        self.show_message(text)

    def show_message(self, text: str) -> None:
        """``text`` on the target line instead of a run's target (nothing of a run is on screen)."""
        self.target_label.setText(text)
        self.target_label.setToolTip(text)

    def _use_class(self) -> None:
        """The class typed in: its logit for a classifier, its pixels (class:C) for a segmentation model."""
        self.target_chosen.emit(Objective("class", index=int(self.class_box.value())))

    def show_task(self, task: str) -> None:
        """Show what a model of ``task`` ("classification", "segmentation", "detection", "embedding") offers."""
        self.task = task
        if task != "classification":  # an embedding's values are no class scores (the others have none)
            for row in self.rows:
                row.setVisible(False)
            self.side_by_side.setVisible(False)
        self.legend.setVisible(task == "segmentation")
        self.detection.setVisible(task == "detection")
        self.similarity.setVisible(task == "embedding")
        self.class_buttons.setVisible(task in ("classification", "segmentation"))
        self.top1_button.setText("Use top-1" if task == "classification" else "Use the default target")
        self.top1_button.setToolTip(
            "Take gradients of whichever class scores highest"
            if task == "classification"
            else "Back to the model's default target (top1)"
        )
        self.hint.setVisible(task == "classification")

    def show_changes(self, changes: list[PredictionChange]) -> None:
        """Each top-5 row's change since the run without edits (``prediction_changes``); empty: no edits."""
        self.changes = list(changes)
        by_index = {change.index: change for change in changes}
        for row in self.rows:
            row.show_change(by_index.get(row.index) if row.index is not None else None)
        self.changes_label.setVisible(bool(changes))

    def show_side_by_side(self, both: tuple[str, list[Prediction], str, list[Prediction]] | None) -> None:
        """The top-5 of image A and of image B next to each other (None: no image B)."""
        if both is None or not both[1]:
            self.side_by_side.setVisible(False)
            return
        self.side_by_side.show_both(*both)
        self.side_by_side.setVisible(True)

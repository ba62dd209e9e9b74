"""The targets a segmentation, detection or embedding model offers, and what its runs show for them.

A segmentation model's mask and legend, with a rectangle dragged on the input as a region target; a detector's
boxes, their score slider and count, a clicked box as the target; an embedding model's similarity to image B or to
a prompt. The targets are made here as ``Objective`` values: no text goes back and forth.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hookscope.core.common.errors import RunError
from hookscope.core.engine.target_words import Objective, region_objective
from hookscope.ui.state.requests import RunOutcome
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.detection_overlay import boxes_of
from hookscope.ui.widgets.input_panel import InputPanel
from hookscope.ui.widgets.predictions import PredictionsPanel
from hookscope.ui.widgets.segmentation_legend import class_colours, mask_data, mask_lut, most_common_class


class TaskTargets:
    """Binds the input's and the predictions' task controls to the workspace's target and runs.

    ``show_error(message, dialog)``: where a refused gesture is said (the window's status line)."""

    def __init__(
        self,
        space: Workspace,
        input_panel: InputPanel,
        predictions: PredictionsPanel,
        show_error: Callable[[str, bool], None],
    ):
        self.space = space
        self.input_panel = input_panel
        self.predictions = predictions
        self._show_error = show_error
        input_panel.region_dragged.connect(self._on_region_dragged)
        input_panel.box_chosen.connect(lambda number: space.set_target(Objective("box", index=number)))
        predictions.detection.threshold_changed.connect(self._on_threshold_changed)
        predictions.similarity.image_b_chosen.connect(self._on_similarity_to_image_b)
        space.run_applied.connect(self._on_run_applied)

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        """The mask and its legend, the boxes and their count, the similarity score; the target's class, region or
        box framed."""
        space, result = self.space, outcome.result
        loaded = space.loaded
        # The output says segmentation or detection; an embedding is a vector as class scores are: the model says.
        task = result.task if result.task != "classification" or loaded is None else loaded.task
        categories = loaded.categories if loaded else None
        objective = space.target
        self.predictions.show_task(task)
        segmentation = result.segmentation if task == "segmentation" else None
        classes = np.asarray(segmentation) if segmentation is not None else None
        if classes is not None:
            count = max(len(categories or ()), int(classes.max()) + 1 if classes.size else 1)
            self.input_panel.show_mask(mask_data(classes), mask_lut(count))
            # the run's class: the one named, or the one top1 chose
            self.predictions.legend.show_mask(classes, categories, class_colours(count), result.target_index)
            self.predictions.class_box.setRange(0, count - 1)
        else:
            self.input_panel.show_mask(None)
        self.input_panel.set_regions_enabled(classes is not None)
        self.input_panel.show_region(objective.region if classes is not None else None)
        boxes = boxes_of(result.detections) if task == "detection" else []
        self.input_panel.detections.show_boxes(boxes, objective.index if objective.kind == "box" else None)
        self.predictions.detection.show_count(len(self.input_panel.detections.shown), len(boxes))
        if task == "embedding":
            image_b = space.image_b
            self.predictions.similarity.configure(
                image_b is not None and bool(image_b.path), loaded is not None and loaded.text_embedder is not None
            )
            self.predictions.similarity.show_score(self._similarity_text(outcome))

    def _similarity_text(self, outcome: RunOutcome) -> str:
        """The cosine similarity the gradients are of, when the target is one: its value and what to."""
        value = outcome.result.objective_value
        if self.space.target.kind in ("similar", "text") and value is not None:
            return f"Cosine similarity: {value:.3f}"
        return ""

    def _on_threshold_changed(self, threshold: float) -> None:
        overlay = self.input_panel.detections
        overlay.set_threshold(threshold)
        self.predictions.detection.show_count(len(overlay.shown), len(overlay.boxes))

    def _on_region_dragged(self, region: tuple[int, int, int, int]) -> None:
        """A rectangle dragged on a segmentation model's input: the targeted class over it (the class most of its
        pixels are predicted as, when no class is targeted yet)."""
        space = self.space
        last = space.last
        classes = last.result.segmentation if last is not None else None
        objective = space.target
        chosen = objective.index if objective.kind in ("class", "region") else None
        if chosen is None and classes is not None:
            chosen = most_common_class(np.asarray(classes), region)
        if chosen is None:
            self._show_error("Drag the rectangle over the image: it holds no predicted pixel.", False)
            return
        try:
            space.set_target(region_objective(chosen, region))
        except RunError as error:  # a rectangle of no area
            self._show_error(str(error), False)

    def _on_similarity_to_image_b(self) -> None:
        image_b = self.space.image_b
        if image_b is None or not image_b.path:
            self._show_error("Open an image B first (File > Open image B…): its embedding is compared with A's.", False)
            return
        self.space.set_target(Objective("similar", image=image_b.path))

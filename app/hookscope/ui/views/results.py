"""A run's results beside the cards: the input as the model sees it, and what the model predicts."""

from __future__ import annotations

from hookscope.core.pictures.compare import prediction_changes
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import RunFailure, Workspace
from hookscope.ui.widgets.input_panel import InputPanel
from hookscope.ui.widgets.predictions import PredictionsPanel


class InputView:
    """The Input dock: the image list, and each run's input with its saliency."""

    def __init__(self, space: Workspace, panel: InputPanel):
        self.space = space
        self.panel = panel
        panel.image_selected.connect(space.select_image)
        panel.step_requested.connect(space.step_image)
        space.model_changed.connect(self._on_model_changed)
        space.run_applied.connect(self._on_run_applied)
        space.image_list_changed.connect(self._on_image_list_changed)

    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        # Nothing of the old model's run stays (its mask, boxes, region, saliency) until the new model's run comes;
        # the image itself is the user's and stays.
        self.panel.clear_results()

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        self.panel.show_input(outcome.input_display, outcome.saliency, outcome.image.name)

    def _on_image_list_changed(self) -> None:
        self.panel.set_list(list(self.space.image_list), self.space.image_index)


class PredictionsView:
    """The Predictions dock: the top classes, the gradient target in words, the changes the edits made, image B's."""

    def __init__(self, space: Workspace, panel: PredictionsPanel):
        self.space = space
        self.panel = panel
        panel.target_chosen.connect(space.set_target)
        space.model_changed.connect(self._on_model_changed)
        space.run_applied.connect(self._on_run_applied)
        space.failed.connect(self._on_failed)

    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        loaded = outcome.loaded
        self.panel.clear_results(loaded.task, f"Gradient target: waiting for {loaded.display_name}'s first run…")

    def _on_failed(self, failure: RunFailure) -> None:
        """A new model's first run failed: the views it left empty say why (the old model's results are gone)."""
        space = self.space
        if not failure.load and space.last is None and space.loaded is not None:
            self.panel.show_message(f"No results of {space.loaded.display_name}: {failure.message}")

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        space, result = self.space, outcome.result
        target_text = result.target
        categories = space.loaded.categories if space.loaded else None
        # a classifier's words give the index only (a segmentation model's name the class; a detector's index is a box's)
        if result.task == "classification" and result.target_index is not None and categories:
            target_text += f": {categories[result.target_index]}"
        classes = int(result.scores.shape[1]) if result.scores is not None else None
        self.panel.show_predictions(result.top5, result.target_index, target_text, classes)
        edits = space.registry.enabled_edits() if space.registry is not None else []
        self.panel.show_changes(prediction_changes(result) if edits else [])
        comparison = outcome.comparison
        self.panel.show_side_by_side(
            (outcome.image.name, result.top5, outcome.image_b.name, comparison.result.top5)
            if comparison is not None and outcome.image_b is not None
            else None
        )

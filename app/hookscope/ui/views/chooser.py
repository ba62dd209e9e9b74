"""The toolbar's model, weights and device boxes, bound to the workspace."""

from __future__ import annotations

from collections.abc import Callable

from hookscope.core.models.catalogue import catalogue
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.model_chooser import ModelChooser


class ChooserView:
    """What the boxes say follows what is in use; what is chosen in them goes to the workspace.

    ``show_error(message, dialog)``: where a name that is no model is said."""

    def __init__(self, space: Workspace, chooser: ModelChooser, show_error: Callable[[str, bool], None]):
        self.space = space
        self.chooser = chooser
        self._show_error = show_error
        chooser.model_chosen.connect(self._on_model_chosen)
        chooser.weights_chosen.connect(space.set_weights)
        chooser.device_chosen.connect(space.set_device)
        chooser.show_weights(space.weights)
        chooser.show_device(space.device)
        space.device_changed.connect(chooser.show_device)
        space.weights_changed.connect(self.sync)
        space.model_changed.connect(self.sync)

    def _on_model_chosen(self, name: str) -> None:
        loaded = self.space.loaded
        if name.startswith("hf:"):  # a Hugging Face Hub repo: fetched (with progress) and checked by the load
            if loaded is None or name != loaded.name:
                self.space.ask_hub_model(name)
        elif name not in catalogue(include_timm=True):
            self._show_error(f"Unknown model '{name}': choose one from the list.", False)
            self.sync()
        elif loaded is None or name != loaded.name:
            self.space.set_model(name)

    def sync(self, *_: object) -> None:
        """The boxes back to the model and weights in use."""
        loaded = self.space.loaded
        if loaded is not None:
            self.chooser.show_model(loaded.name)
        self.chooser.show_weights(self.space.weights, getattr(loaded, "weights_text", "") if loaded else "")

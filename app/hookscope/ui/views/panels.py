"""The cards: a panel per ticked (module, kind), drawn from each run and from the pictures made as they scroll in."""

from __future__ import annotations

from collections.abc import Callable

from hookscope.core.pictures.panels import PanelSettings
from hookscope.ui.state.requests import ImageSource, LoadOutcome, PictureOutcome, RunOutcome
from hookscope.ui.state.workspace import HookChange, Workspace
from hookscope.ui.widgets.panel_area import PanelArea


class PanelsView:
    """The panel area following the workspace: ticks add and remove panels, runs and scrolled-in pictures draw them.

    ``drawn_ahead(image)``: how far beyond the view, in viewport heights, a run of ``image`` draws its panels (the
    window's rule, shared with the run requests it makes)."""

    def __init__(self, space: Workspace, area: PanelArea, drawn_ahead: Callable[[ImageSource | None], float]):
        self.space = space
        self.area = area
        self._drawn_ahead = drawn_ahead
        area.close_requested.connect(lambda path, kind: space.tick(path, kind, False))
        area.settings_changed.connect(space.set_panel_settings)
        area.pictures_wanted.connect(space.prepare_pictures)
        space.model_changed.connect(self._on_model_changed)
        space.hooks_changed.connect(self._on_hooks_changed)
        space.run_applied.connect(self._on_run_applied)
        space.pictures_ready.connect(self._on_pictures_ready)
        space.panel_settings_changed.connect(self._on_panel_settings_changed)

    def _on_model_changed(self, _outcome: LoadOutcome) -> None:
        self.area.clear()

    def _on_hooks_changed(self, changes: list[HookChange]) -> None:
        self.area.ensure_pairs([(path, kind) for path, kind, ticked in changes if ticked], self.space.settings_for)
        for path, kind, ticked in changes:
            if not ticked:
                self.area.remove_pair(path, kind)

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        space = self.space
        self.area.show_results(
            outcome.pictures,
            space.ticked_pairs(),
            space.missing_reason,
            space.settings_for,
            views=outcome.comparison.views if outcome.comparison is not None else None,
            deferred=outcome.deferred,
            ahead=self._drawn_ahead(outcome.image),
        )

    def _on_pictures_ready(self, ready: PictureOutcome) -> None:
        self.area.show_pictures(ready.pictures, ready.views)

    def _on_panel_settings_changed(self, changes: list[tuple[str, str, PanelSettings]]) -> None:
        for path, kind, settings in changes:
            for panel in self.area.panels_of(path, kind):
                panel.apply_settings(settings)

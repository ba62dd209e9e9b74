"""The module tree as the workspace has it: the model's modules, what is ticked, which modules ran; its menu."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QMenu, QWidget

from hookscope.core.pictures.panels import KIND_LABELS
from hookscope.ui.host import ModuleMenuEntries
from hookscope.ui.state.requests import LoadOutcome, RunOutcome
from hookscope.ui.state.workspace import HookChange, Workspace
from hookscope.ui.widgets.module_tree import ModuleTreeModel
from hookscope.ui.widgets.module_tree_view import ModuleTreeView

# What "Tick … of every <type>" offers: the four columns every module has (Attn only attention modules have).
MENU_KINDS = ("forward", "pre", "tensor", "grad_input")


class ModulesView:
    """The Modules dock: the tree model and its view, following the workspace."""

    def __init__(self, space: Workspace, menu_entries: Callable[[], Iterable[ModuleMenuEntries]], parent: QWidget):
        self.space = space
        self._menu_entries = menu_entries  # what features add to a module's context menu (Host.add_module_menu)
        self._parent = parent
        self.model = ModuleTreeModel()  # the view's child: it outlives the tree that shows it (ModuleTreeView)
        self.model.tick_requested.connect(space.set_ticked)  # direct: the hook is on when setData returns
        self.view = ModuleTreeView(self.model)
        self.view.menu_requested.connect(self._menu)
        space.model_changed.connect(self._on_model_changed)
        space.hooks_changed.connect(self._on_hooks_changed)
        space.run_applied.connect(self._on_run_applied)

    def _on_model_changed(self, outcome: LoadOutcome) -> None:
        assert self.space.registry is not None  # made with the model
        self.model.set_model(list(self.space.nodes), self.space.registry, outcome.loaded.name)

    def _on_hooks_changed(self, changes: list[HookChange]) -> None:
        self.model.show_ticks(changes)
        added = [path for path, _, ticked in changes if ticked]
        if added and len(added) == len(changes) and self.space.last is None:
            self.view.expand_to(added)  # the first ticks of a model: where they are, before any run

    def _on_run_applied(self, outcome: RunOutcome) -> None:
        self.model.set_survey(outcome.result.survey)

    def _menu(self, path: str, position: QPoint) -> None:
        menu = QMenu(self._parent)
        model, space = self.model, self.space
        if path != "\0":
            node = model.nodes[model.order_of(path)]
            paths = model.paths_of_type(node.type_name)
            for kind in MENU_KINDS:
                pairs = [(p, kind) for p in paths]
                menu.addAction(f"Tick {KIND_LABELS[kind]} of every {node.type_name} ({len(paths)})").triggered.connect(
                    lambda *_, pairs=pairs: space.set_ticked(pairs, True)
                )
            every = [(p, k) for p in paths for k in MENU_KINDS]
            menu.addAction(f"Untick every {node.type_name}").triggered.connect(
                lambda *_, pairs=every: space.set_ticked(pairs, False)
            )
            for entries in self._menu_entries():
                menu.addSeparator()
                entries(menu, path)
            menu.addSeparator()
        menu.addAction("Untick all").triggered.connect(space.untick_all)
        menu.addAction("Expand all").triggered.connect(self.view.tree.expandAll)
        menu.addAction("Collapse all").triggered.connect(self.view.tree.collapseAll)
        menu.popup(position)

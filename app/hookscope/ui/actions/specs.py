"""Menus and shortcuts declared as data (as napari's ``_qapp_model`` declares its actions).

A feature says *what* it offers (``ActionSpec``: id, title, menu, group, order, shortcut, callback); the window's
``MenuBuilder`` puts every spec into its menu, groups separated, in order. Nothing looks for a menu or an action
by its label, and a test can find any action by its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMenuBar, QToolBar

# The menu bar's menus, left to right; a spec's ``menu`` is one of these, or "Menu/Submenu".
MENUS = ("File", "Hooks", "View", "Help")
MNEMONICS = {"File": "&File", "Hooks": "&Hooks", "View": "&View", "Help": "&Help"}


@dataclass(frozen=True)
class ActionSpec:
    """One menu entry. ``group`` orders blocks inside a menu (separators between them), ``order`` entries inside
    a group. ``populate`` makes the entry a submenu filled each time it opens (recent files). ``toolbar`` puts
    the action on the main toolbar too."""

    id: str
    title: str
    menu: str
    callback: Callable[[], object] | None = None
    group: int = 50
    order: int = 50
    shortcut: str | QKeySequence.StandardKey | None = None
    tooltip: str = ""
    populate: Callable[[QMenu], None] | None = None
    toolbar: bool = False
    checkable: bool = False
    checked: Callable[[], bool] | None = None
    enabled: Callable[[], bool] | None = None  # asked each time its menu opens (File's video entries: a video open)


class MenuBuilder:
    """Builds the menu bar from specs; specs can arrive at any time (features are built after the shell)."""

    def __init__(self, window: QMainWindow, toolbar: QToolBar | None = None) -> None:
        self._window = window
        self._toolbar = toolbar
        self._specs: dict[str, ActionSpec] = {}
        self.actions: dict[str, QAction] = {}
        self._menus: dict[str, QMenu] = {}
        bar: QMenuBar = window.menuBar()
        for name in MENUS:
            self._menus[name] = bar.addMenu(MNEMONICS[name])
            self._menus[name].aboutToShow.connect(self.refresh_enabled)

    def menu(self, path: str) -> QMenu:
        """The menu for ``path`` ("View" or "View/Colormap (all panels)"), made on first use."""
        if path not in self._menus:
            parent, _, title = path.rpartition("/")
            if not parent:
                self._menus[path] = self._window.menuBar().addMenu(title)
            else:
                self._menus[path] = QMenu(title, self._window)
        return self._menus[path]

    def add(self, specs: Iterable[ActionSpec]) -> None:
        for spec in specs:
            if spec.id in self._specs:
                raise ValueError(f"Two actions with the id '{spec.id}'.")
            self._specs[spec.id] = spec
            self.actions[spec.id] = self._make(spec)
        self._rebuild()

    def refresh_enabled(self) -> None:
        """Grey out the entries that cannot act now (their spec's ``enabled``), as a menu opens."""
        for spec_id, spec in self._specs.items():
            if spec.enabled is not None:
                self.actions[spec_id].setEnabled(spec.enabled())

    def add_existing(self, spec: ActionSpec, action: QAction) -> None:
        """Place an action made elsewhere (a dock's show/hide toggle) as ``spec`` says."""
        if spec.id in self._specs:
            raise ValueError(f"Two actions with the id '{spec.id}'.")
        action.setObjectName(spec.id)
        self._specs[spec.id] = spec
        self.actions[spec.id] = action
        self._rebuild()

    def remove(self, action_id: str) -> None:
        """Take an action out of its menu and toolbar (a popped-out panel's dock toggle, once the panel is back)."""
        if self._specs.pop(action_id, None) is None:
            return
        action = self.actions.pop(action_id)
        self._rebuild()
        for menu in self._menus.values():
            menu.removeAction(action)
        if self._toolbar is not None:
            self._toolbar.removeAction(action)

    def _make(self, spec: ActionSpec) -> QAction:
        action = QAction(spec.title, self._window)
        action.setObjectName(spec.id)
        if spec.shortcut is not None:
            action.setShortcut(QKeySequence(spec.shortcut))
        tip = spec.tooltip or spec.title.rstrip("…")
        if spec.shortcut is not None:
            tip += f" ({action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)})"
        action.setToolTip(tip)
        action.setStatusTip(spec.tooltip)
        if spec.checkable:
            action.setCheckable(True)
            if spec.checked is not None:
                action.setChecked(spec.checked())
        if spec.populate is not None:
            submenu = QMenu(spec.title, self._window)
            submenu.aboutToShow.connect(lambda m=submenu, s=spec: (m.clear(), s.populate(m)))
            action.setMenu(submenu)
        elif spec.callback is not None:
            callback = spec.callback
            if spec.checkable:
                action.toggled.connect(lambda on, c=callback: c(on))
            else:
                action.triggered.connect(lambda *_, c=callback: c())
        self._window.addAction(action)  # shortcuts work with the menu bar hidden too
        return action

    def _rebuild(self) -> None:
        by_menu: dict[str, list[ActionSpec]] = {}
        for spec in self._specs.values():
            by_menu.setdefault(spec.menu, []).append(spec)
        submenus = {path for path in by_menu if "/" in path}
        for path in list(by_menu) + sorted(submenus):
            menu = self.menu(path)
            for action in menu.actions():  # removed, not deleted (QMenu.clear would delete what it owns)
                menu.removeAction(action)
        for path, specs in by_menu.items():
            menu = self.menu(path)
            group = None
            for spec in sorted(specs, key=lambda s: (s.group, s.order, s.title)):
                if group is not None and spec.group != group:
                    menu.addSeparator()
                group = spec.group
                menu.addAction(self.actions[spec.id])
        # Submenus sit in their parent at the position of a placeholder spec with the same id as their path, or
        # at the end of the parent.
        for path in sorted(submenus):
            parent, _, _ = path.rpartition("/")
            placeholder = self.actions.get(path)
            menu = self.menu(path)
            if placeholder is not None:
                placeholder.setMenu(menu)
            else:
                self.menu(parent).addMenu(menu)
        if self._toolbar is not None:
            for action in self._toolbar.actions():
                if action.objectName() in self._specs:
                    self._toolbar.removeAction(action)
            for spec in sorted(self._specs.values(), key=lambda s: (s.group, s.order)):
                if spec.toolbar:
                    self._toolbar.addAction(self.actions[spec.id])

"""What changes and explains the hooks: the Interventions dock, the hook inspector, Grad-CAM, and image B.

``install_hook_tools`` adds them to a window: ``window.interventions``, ``window.inspector``, ``window.grad_cam``
(each in a dock) and ``window.compare`` (image B, with its slot under the input image), and their entries in the
File, Hooks and View menus. They follow the window through its signals: ``hooks_changed`` (any change of the hook
registry), ``run_applied`` (a run's results are on screen), ``run_failed`` and ``model_ready``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenu

from app.ui.features.grad_cam import GradCamView
from app.ui.features.image_b import CompareImages
from app.ui.features.inspector import HookInspector
from app.ui.features.interventions import InterventionsPanel

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow


def _menu(window: MainWindow, title: str) -> QMenu | None:
    """A menu of the menu bar by its title ("&File"), or None."""
    for action in window.menuBar().actions():
        if action.menu() is not None and action.text().replace("&", "") == title:
            return action.menu()
    return None


def _submenu(menu: QMenu | None, title: str) -> QMenu | None:
    if menu is None:
        return None
    for action in menu.actions():
        if action.menu() is not None and action.text() == title:
            return action.menu()
    return None


def show_dock(dock: QDockWidget) -> None:
    dock.setVisible(True)
    dock.raise_()


def install_hook_tools(window: MainWindow) -> None:
    """Create the interventions, the inspector, Grad-CAM and image B for ``window`` (after its menus exist)."""
    left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
    window.compare = CompareImages(window)
    window.input_panel.layout().addWidget(window.compare.slot)
    window.grad_cam = GradCamView(window)
    window.grad_cam_dock = window._dock("Grad-CAM", "gradcam", window.grad_cam, right)
    window.tabifyDockWidget(window.input_dock, window.grad_cam_dock)
    window.grad_cam_dock.setVisible(False)
    window.input_dock.raise_()
    # Under the module tree (its lower part is mostly empty): the edits, and the hooks they and the ticks hold.
    window.interventions = InterventionsPanel(window)
    window.interventions_dock = window._dock("Interventions", "interventions", window.interventions, left)
    window.splitDockWidget(window.tree_dock, window.interventions_dock, Qt.Orientation.Vertical)
    window.inspector = HookInspector(window)
    window.inspector_dock = window._dock("Hook inspector", "inspector", window.inspector, left)
    window.tabifyDockWidget(window.interventions_dock, window.inspector_dock)
    window.interventions_dock.raise_()
    window.resizeDocks([window.tree_dock, window.interventions_dock], [470, 420], Qt.Orientation.Vertical)
    window.resizeDocks([window.tree_dock, window.input_dock], [530, 330], Qt.Orientation.Horizontal)
    window.resizeDocks([window.input_dock, window.predictions_dock], [480, 400], Qt.Orientation.Vertical)
    window.panel_area.channel_menu_requested.connect(window.interventions.popup_tile_menu)

    file_menu = _menu(window, "File")
    if file_menu is not None:
        anchor = next((a for a in file_menu.actions() if a.text() == "Paste image"), None)
        actions = file_menu.actions()
        after = actions[actions.index(anchor) + 1] if anchor is not None and anchor is not actions[-1] else None
        window.open_image_b_action = QAction("Open image B…", window)
        window.open_image_b_action.setToolTip("A second image to compare with: every panel can show A, B or A − B")
        window.open_image_b_action.setShortcut(QKeySequence("Ctrl+B"))
        window.open_image_b_action.triggered.connect(window.compare.open_dialog)
        window.clear_image_b_action = QAction("Clear image B", window)
        window.clear_image_b_action.triggered.connect(window.compare.clear)
        file_menu.insertAction(after, window.open_image_b_action)
        file_menu.insertAction(after, window.clear_image_b_action)

    hooks_menu = _menu(window, "Hooks")
    if hooks_menu is not None:
        hooks_menu.addSeparator()
        add = hooks_menu.addAction("Add intervention…")
        add.triggered.connect(lambda: window.interventions.open_add_dialog())
        inspector = hooks_menu.addAction("Hook inspector")
        inspector.setToolTip("Every live hook, with the plain PyTorch that registers it")
        inspector.setShortcut(QKeySequence("Ctrl+I"))
        inspector.triggered.connect(lambda: show_dock(window.inspector_dock))

    view_menu = _menu(window, "View")
    if view_menu is not None:
        order = _submenu(view_menu, "Channel order (all panels)")
        if order is not None:
            order.addAction("by difference A − B (image B)").triggered.connect(lambda: window._set_all("sort", "diff"))
        views = QMenu("Image B: show (all panels)", view_menu)
        for key, label in {"A": "image A", "B": "image B", "diff": "the difference A − B"}.items():
            views.addAction(label).triggered.connect(lambda *_, v=key: window.compare.show_view_everywhere(v))
        view_menu.insertMenu(next((a for a in view_menu.actions() if a.isSeparator()), None), views)
        for dock in (window.interventions_dock, window.inspector_dock, window.grad_cam_dock):
            view_menu.addAction(dock.toggleViewAction())

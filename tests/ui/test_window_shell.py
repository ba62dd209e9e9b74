"""The shell's small promises: a title with one "Hookscope", menu items with words, boxes that say what is in use."""

from __future__ import annotations

import os

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.devices import unavailable_devices
from hookscope.core.models.catalogue import default_weights_file
from hookscope.ui.actions.builtin import image_folder
from hookscope.ui.host import Host


def all_actions(menu: QMenu) -> list[QAction]:
    found = []
    for action in menu.actions():
        if action.isSeparator():
            continue
        found.append(action)
        if action.menu() is not None:
            found += all_actions(action.menu())
    return found


def test_the_title_names_the_app_once_last(window) -> None:
    title = window.windowTitle()
    assert title.count("Hookscope") == 1 and title.endswith("Hookscope")
    assert "resnet18" in title and "chelsea.png" in title
    assert title.startswith("resnet18 (untrained: random weights, seed 0) — "), "random weights said (issue 44)"


def test_every_menu_item_has_words_and_its_shortcut(window) -> None:
    actions = [a for menu in window.menus._menus.values() for a in all_actions(menu)]
    assert len(actions) > 30
    for action in actions:
        text = action.text().replace("&", "")
        assert any(ch.isalpha() for ch in text), f"a menu item without words: {text!r}"
        if not action.shortcut().isEmpty():
            assert action.shortcut().toString() in action.toolTip() or action.menu() is not None
    ids = window.menus.actions
    assert ids["file.previous_image"].text() == "◀ Previous image"
    assert ids["file.previous_image"].shortcut().toString() == "PgUp"


def test_the_device_box_says_why_cuda_and_mps_are_not_offered(window) -> None:
    tip = window.chooser.device_box.toolTip()
    for reason in unavailable_devices().values():
        assert reason in tip


def test_the_weights_box_says_what_is_in_use(make_window, qtbot) -> None:
    window = make_window(weights="default")
    with qtbot.waitSignal(window.run_finished, timeout=120_000):
        pass
    text = window.chooser.weights_box.currentText()
    if default_weights_file("resnet18").is_file():
        assert text.startswith("Pretrained")
    else:
        assert text == "Random weights (seed 0)"  # the pretrained file is missing: say what runs


def test_the_open_dialog_never_starts_inside_the_installation() -> None:
    start = image_folder(remembers=False)
    assert os.path.isdir(start)
    assert not os.path.abspath(sample_image()).startswith(os.path.abspath(start) + os.sep + "hookscope")
    assert os.path.dirname(os.path.abspath(sample_image())) != os.path.abspath(start)


def test_the_window_and_the_tests_fake_host_are_checked_hosts(window, host) -> None:
    """``Host`` is a runtime-checkable protocol: the window and the fake host the feature tests use both have every
    member a feature may call, so neither drifts from it."""
    assert isinstance(window, Host)
    assert isinstance(host, Host)

    class Partial:  # a host missing what a popped-out panel needs
        show_dialogs = remembers = False

        def add_dock(self, spec, widget): ...

    assert not isinstance(Partial(), Host)


def test_a_popped_out_panel_is_in_the_view_menu_until_it_goes_back(window, qtbot) -> None:
    """Popped out through ``Host.add_dock``, a panel's dock is listed in View like every dock: closed, or hidden
    from there, it is not lost."""
    panel = window.panel_area.panels[("forward", "layer4.1.conv2")]
    dock = window.panel_area.pop_out(panel)
    assert dock is not None and dock.isFloating() and dock.widget() is panel
    view = {a.text(): a for a in all_actions(window.menus.menu("View"))}
    assert dock.windowTitle() in view and view[dock.windowTitle()].isChecked()
    assert window.dock(dock.objectName()) is dock
    view[dock.windowTitle()].trigger()  # View > the panel: off, so the panel goes back to its card
    assert window.panel_area.holds(panel) and panel.ident not in window.panel_area.docks
    assert dock.windowTitle() not in [a.text() for a in all_actions(window.menus.menu("View"))]
    again = window.panel_area.pop_out(panel)  # and out again: one entry, not two
    titles = [a.text() for a in all_actions(window.menus.menu("View"))]
    assert titles.count(again.windowTitle()) == 1
    again.close()
    assert window.panel_area.holds(panel)

"""The workspace is changed only through its methods, each with its signal (issue 45): what it holds is read-only
from outside, containers come out as tuples or read-only mappings, and targets are typed."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from conftest import RUN_TIMEOUT_MS
from PySide6.QtCore import Signal

from hookscope.core.engine.target_words import Objective
from hookscope.ui.state.workspace import Workspace

pytestmark = pytest.mark.usefixtures("qtbot")


def test_the_workspace_keeps_no_public_attribute_of_its_own(workspace) -> None:
    """Every piece of state is private; the public names are methods, signals and read-only properties."""
    signals = {name for name in dir(Workspace) if isinstance(getattr(Workspace, name), Signal)}
    assert [name for name in vars(workspace) if not name.startswith("_") and name not in signals] == []


def test_no_property_of_the_workspace_can_be_set_from_outside(workspace) -> None:
    properties = [name for name in dir(Workspace) if isinstance(getattr(Workspace, name), property)]
    assert {"target", "weights", "loaded", "registry", "settings", "session_parts", "last"} <= set(properties)
    for name in properties:
        with pytest.raises(AttributeError):
            setattr(workspace, name, getattr(workspace, name))


def test_its_containers_cannot_be_changed_behind_its_signals(workspace) -> None:
    assert isinstance(workspace.settings, MappingProxyType) and isinstance(workspace.session_parts, MappingProxyType)
    assert isinstance(workspace.channel_orders, MappingProxyType)
    for value in (workspace.external_hooks, workspace.nodes, workspace.image_list, workspace.applied_generations):
        assert isinstance(value, tuple)
    with pytest.raises(TypeError):
        workspace.session_parts["mine"] = (lambda path: None, lambda value, folder: [])  # type: ignore[index]


def test_a_feature_adds_its_session_part_through_a_method(workspace) -> None:
    def save(path: str) -> object:
        return {"saved": path}

    workspace.add_session_part("mine", save, lambda value, folder: [])
    assert workspace.session_parts["mine"][0] is save


def test_weights_for_the_next_load_are_set_with_their_signal_and_no_load(workspace, qtbot) -> None:
    loaded = workspace.loaded
    with qtbot.waitSignal(workspace.weights_changed) as changed:
        workspace.set_weights("none" if workspace.weights != "none" else "default", reload=False)
    assert changed.args == [workspace.weights] and not workspace.loading and workspace.loaded is loaded


def test_the_target_is_typed_and_text_is_refused(workspace, qtbot) -> None:
    """Words are parsed where they come in (the command line, a session); the workspace takes an Objective."""
    with pytest.raises(TypeError):
        workspace.set_target("class:3")
    with qtbot.waitSignal(workspace.target_changed) as changed:
        workspace.set_target(3)  # a class row, the class box: an index
    assert changed.args == [Objective("class", index=3)] and workspace.target == Objective("class", index=3)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        pass
    assert ran.args[0].result.target_index == 3

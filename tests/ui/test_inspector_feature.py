"""The hook inspector built from a workspace and a fake host: it lists and counts the live handles as every change
happens, copies each hook's plain PyTorch, and removes hooks through the workspace (ticks unticked, edits removed)
so that no handle is left on any module."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.hooks import FALLBACK, HookInfo
from hookscope.core.engine.interventions import Intervention
from hookscope.core.teaching.script_export import standalone_script
from hookscope.core.teaching.snippets import snippet_for
from hookscope.ui.features.inspector import (
    DOCK_ID,
    KIND,
    METHOD,
    MODULE,
    NOTE,
    REMOVE,
    ROLE,
    SHOW_ACTION,
    InspectorFeature,
)

RUN_TIMEOUT_MS = 120_000
PATH = "layer1.0.conv1"  # ticked for activations and gradients by the workspace fixture
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


@pytest.fixture
def inspector(workspace, host) -> InspectorFeature:
    return InspectorFeature(workspace, host)


def row_of(inspector: InspectorFeature, path: str, kind: str, edit: bool = False) -> int:
    for row, info in enumerate(inspector.infos):
        if (info.path, info.kind, info.edit_id is not None) == (path, kind, edit):
            return row
    raise AssertionError(f"no inspector row for {path} {kind}")


def info_at(inspector: InspectorFeature, row: int) -> HookInfo:
    return inspector.infos[row]


def test_it_contributes_a_dock_tabbed_with_the_interventions_and_an_action_that_shows_it(inspector, host) -> None:
    spec = host.actions[SHOW_ACTION]
    assert (spec.title, spec.menu, spec.shortcut) == ("Hook inspector", "Hooks", "Ctrl+I")
    dock = host.docks[DOCK_ID]
    assert dock.widget() is inspector.widget
    dock.setVisible(False)
    host.trigger(SHOW_ACTION)
    assert not dock.isHidden()


def test_it_counts_the_live_handles_and_copies_each_hooks_code(inspector, workspace, qtbot) -> None:
    registry = workspace.registry
    assert inspector.count_label.text() == f"{registry.handle_count()} live hooks" == "2 live hooks"
    assert inspector.table.rowCount() == len(registry.live_hooks()) == 2

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.add_edit(Intervention("zero", PATH, channels=(3,)))
        assert inspector.count_label.text() == "3 live hooks"  # at once: the inspector follows every change
        workspace.tick("layer2.0.bn1", "grad_input")  # followed by an in-place ReLU: the engine falls back
    assert inspector.count_label.text() == f"{registry.handle_count()} live hooks" == "4 live hooks"
    assert [info_at(inspector, row) for row in range(inspector.table.rowCount())] == registry.live_hooks()

    # The edit's row says it edits; its code is snippet_for's, and Copy puts exactly that on the clipboard.
    row = row_of(inspector, PATH, "forward", edit=True)
    assert inspector.table.item(row, ROLE).text() == "edits"
    inspector.table.selectRow(row)
    expected = snippet_for(registry, info_at(inspector, row))
    assert inspector.code.toPlainText() == expected and "output[:, [3]] = 0" in expected
    QApplication.clipboard().clear()
    qtbot.mouseClick(inspector.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == expected

    # The fallback row names the method and says why, in one sentence.
    row = row_of(inspector, "layer2.0.bn1", "grad_input")
    info = info_at(inspector, row)
    assert info.method == FALLBACK and inspector.table.item(row, METHOD).text() == FALLBACK
    assert inspector.table.item(row, NOTE).text() == info.note and "in-place" in info.note
    inspector.table.selectRow(row)
    assert inspector.note.isVisibleTo(inspector.widget) and inspector.note.text() == info.note
    # which tick registered it, and why that PyTorch hook (the Kind cell's tooltip says the same)
    assert inspector.why.text().startswith("The Grad in tick: register_full_backward_hook: grad_input")
    assert inspector.table.item(row, KIND).toolTip() == inspector.why.text()

    qtbot.mouseClick(inspector.copy_all_button, Qt.MouseButton.LeftButton)
    script = QApplication.clipboard().text()
    space = workspace  # the run on screen as a standalone script (tests/ui/test_script_copy.py runs one)
    assert script == standalone_script(
        space.loaded,
        registry,
        image=space.image.path,
        target=space.target,
        device=space.device,
        what="the hook inspector",
    )
    compile(script, "<hookscope script>", "exec")  # runnable Python, not just text


def test_remove_one_unticks_it_and_remove_all_leaves_no_hook(inspector, workspace, qtbot) -> None:
    conv = workspace.registry.module(PATH)
    before = len(conv._forward_hooks)
    row = row_of(inspector, PATH, "forward")
    assert inspector.table.item(row, MODULE).text() == PATH
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(inspector.table.cellWidget(row, REMOVE), Qt.MouseButton.LeftButton)
    assert len(conv._forward_hooks) == before - 1
    assert workspace.ticked_pairs() == {(PATH, "tensor")}  # an untick: the tree and the panels follow
    assert inspector.count_label.text() == "1 live hook"

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        edit_id = workspace.add_edit(Intervention("scale", "layer3", factor=0.5))
        workspace.tick("layer2.0.bn1", "pre")
    assert workspace.registry.handle_count() == 3
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(
            inspector.table.cellWidget(row_of(inspector, "layer3", "forward", edit=True), REMOVE),
            Qt.MouseButton.LeftButton,
        )
    assert workspace.registry.edits() == [] and edit_id is not None  # removed, not switched off
    assert not workspace.registry.module("layer3")._forward_hooks

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.add_edit(Intervention("zero", "layer4", channels=(1,)))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(inspector.remove_all_button, Qt.MouseButton.LeftButton)
    for name, module in workspace.loaded.module.named_modules():
        for attribute in HOOK_DICTS:
            assert not getattr(module, attribute), f"{name or '(model)'} still has {attribute}"
    assert workspace.registry.handle_count() == 0 and workspace.ticked_pairs() == set()
    assert workspace.registry.edits() == []
    assert inspector.count_label.text() == "0 live hooks" and inspector.table.rowCount() == 0
    assert not inspector.remove_all_button.isEnabled() and not inspector.copy_all_button.isEnabled()


def test_a_features_own_hook_is_listed_while_it_lives(workspace, host) -> None:
    from hookscope.core.engine.hooks import FORWARD, HookInfo
    from hookscope.ui.features.inspector import InspectorFeature

    inspector = InspectorFeature(workspace, host)
    before = inspector.count
    info = HookInfo(
        "layer2.0.conv1",
        "forward",
        FORWARD,
        label="Visualize channel 3",
        note="Feature visualization: removed when it ends.",
    )
    workspace.add_external_hook(info)
    assert inspector.count == before + 1
    assert any(row is info for row in inspector.infos)
    assert inspector.select(info)
    assert "Visualize channel 3" in inspector.code.toPlainText()
    workspace.remove_external_hook(info)
    assert inspector.count == before and all(row is not info for row in inspector.infos)

"""The hook inspector, offscreen: it lists and counts the live handles, copies each hook's plain PyTorch, and
removes hooks through the workspace, so the tree and the panels follow. (tests/ui/test_inspector_feature.py tests
the feature without a window.)"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.hooks import FALLBACK, HookInfo
from hookscope.core.engine.interventions import Intervention
from hookscope.core.teaching.script_export import standalone_script
from hookscope.core.teaching.snippets import snippet_for
from hookscope.ui.features.inspector import KIND, METHOD, MODULE, NOTE, REMOVE, ROLE, SHOW_ACTION, InspectorFeature
from hookscope.ui.main_window import MainWindow
from hookscope.ui.widgets.module_tree import ATTENTION, KIND_COLUMNS, ModuleTreeModel

RUN_TIMEOUT_MS = 120_000
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def inspector_of(window: MainWindow) -> InspectorFeature:
    return window.features["inspector"]


def tree_model(window: MainWindow) -> ModuleTreeModel:
    model = window.findChild(ModuleTreeModel)
    assert model is not None
    return model


def row_of(window: MainWindow, path: str, kind: str, edit: bool = False) -> int:
    for row, info in enumerate(inspector_of(window).infos):
        if (info.path, info.kind, info.edit_id is not None) == (path, kind, edit):
            return row
    raise AssertionError(f"no inspector row for {path} {kind}")


def info_at(window: MainWindow, row: int) -> HookInfo:
    return inspector_of(window).infos[row]


def test_the_inspector_counts_the_live_handles_and_copies_each_hooks_code(window: MainWindow, qtbot) -> None:
    inspector, registry = inspector_of(window), window.workspace.registry
    assert inspector.count_label.text() == f"{registry.handle_count()} live hooks" == "4 live hooks"
    assert inspector.table.rowCount() == len(registry.live_hooks()) == 4

    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        window.workspace.add_edit(Intervention("zero", "layer1.0.conv1", channels=(3,)))
        assert inspector.count_label.text() == "5 live hooks"  # at once: the inspector follows every change
        window.workspace.tick("layer2.0.bn1", "grad_input")  # followed by an in-place ReLU: the engine falls back
    assert inspector.count_label.text() == f"{registry.handle_count()} live hooks" == "6 live hooks"
    assert [info_at(window, row) for row in range(inspector.table.rowCount())] == registry.live_hooks()

    # The edit's row says it edits; its code is snippet_for's, and Copy puts exactly that on the clipboard.
    row = row_of(window, "layer1.0.conv1", "forward", edit=True)
    assert inspector.table.item(row, ROLE).text() == "edits"
    inspector.table.selectRow(row)
    expected = snippet_for(registry, info_at(window, row))
    assert inspector.code.toPlainText() == expected and "output[:, [3]] = 0" in expected
    QApplication.clipboard().clear()
    qtbot.mouseClick(inspector.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == expected

    # The fallback row names the method and says why, in one sentence.
    row = row_of(window, "layer2.0.bn1", "grad_input")
    info = info_at(window, row)
    assert info.method == FALLBACK and inspector.table.item(row, METHOD).text() == FALLBACK
    assert inspector.table.item(row, NOTE).text() == info.note and "in-place" in info.note
    inspector.table.selectRow(row)
    assert inspector.note.isVisibleTo(inspector.widget) and inspector.note.text() == info.note
    # which tick registered it, and why that PyTorch hook (the Kind cell's tooltip says the same)
    assert inspector.why.text().startswith("The Grad in tick: register_full_backward_hook: grad_input")
    assert inspector.table.item(row, KIND).toolTip() == inspector.why.text()
    assert inspector.code.toPlainText() == snippet_for(registry, info)

    qtbot.mouseClick(inspector.copy_all_button, Qt.MouseButton.LeftButton)
    script = QApplication.clipboard().text()
    space = window.workspace  # the run on screen as a standalone script (tests/ui/test_script_copy.py runs one)
    assert script == standalone_script(
        space.loaded,
        registry,
        image=space.image.path,
        target=space.target,
        device=space.device,
        what="the hook inspector",
    )
    compile(script, "<hookscope script>", "exec")  # runnable Python, not just text


def test_remove_one_unticks_it_and_remove_all_leaves_no_hook_and_no_tick(window: MainWindow, qtbot) -> None:
    inspector, model = inspector_of(window), tree_model(window)
    conv = window.workspace.loaded.module.get_submodule("layer4.1.conv2")
    before = len(conv._forward_hooks)
    row = row_of(window, "layer4.1.conv2", "forward")
    assert inspector.table.item(row, MODULE).text() == "layer4.1.conv2"
    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(inspector.table.cellWidget(row, REMOVE), Qt.MouseButton.LeftButton)
    assert len(conv._forward_hooks) == before - 1
    index = model.index_of("layer4.1.conv2", KIND_COLUMNS["forward"])
    assert model.data(index, Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Unchecked
    assert ("forward", "layer4.1.conv2") not in window.panel_area.panels
    assert inspector.count_label.text() == "3 live hooks"

    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        window.workspace.add_edit(Intervention("scale", "layer3", factor=0.5))
        window.workspace.tick("layer2.0.bn1", "pre")
    assert window.workspace.registry.handle_count() == 5

    with qtbot.waitSignal(window.workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(inspector.remove_all_button, Qt.MouseButton.LeftButton)
    for name, module in window.workspace.loaded.module.named_modules():
        for attribute in HOOK_DICTS:
            assert not getattr(module, attribute), f"{name or '(model)'} still has {attribute}"
    assert window.workspace.registry.handle_count() == 0 and window.workspace.ticked_pairs() == set()
    for node in model.nodes:
        for column in KIND_COLUMNS.values():
            unticked = None if column == ATTENTION else Qt.CheckState.Unchecked  # a ResNet has no Attn box at all
            assert model.data(model.index_of(node.path, column), Qt.ItemDataRole.CheckStateRole) == unticked
    assert not window.panel_area.panels
    assert window.features["interventions"].rows() == [] and window.workspace.registry.edits() == []
    assert inspector.count_label.text() == "0 live hooks" and inspector.table.rowCount() == 0


def test_ctrl_i_brings_the_inspector_to_the_front(window: MainWindow) -> None:
    action = window.menus.actions[SHOW_ACTION]
    assert action.shortcut().toString() == "Ctrl+I"
    dock = inspector_of(window).dock
    dock.setVisible(False)
    action.trigger()
    assert dock.isVisible()

"""The Lessons feature built from a workspace (ResNet-18, random weights) and a fake host: a lesson is set up on the
live model through the workspace (the hook inspector's registry lists it), runs in the background, shows its numbers
side by side and its code, and leaving it (another lesson, closing the dock) leaves no handle on any module."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtWidgets import QApplication

from hookscope.core.engine.hooks import TENSOR
from hookscope.core.engine.interventions import Intervention
from hookscope.core.teaching.lessons import LESSONS
from hookscope.ui.features.lessons import DOCK_ID, SHOW_ACTION, LessonsFeature

RUN_TIMEOUT_MS = 120_000
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def hooks_on(model) -> dict[str, tuple[int, ...]]:
    return {path: tuple(len(getattr(m, name)) for name in HOOK_DICTS) for path, m in model.named_modules()}


@pytest.fixture
def lessons(workspace, host, qtbot):
    feature = LessonsFeature(workspace, host)
    yield feature
    feature.leave()
    qtbot.waitUntil(lambda: not feature.running and not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)


def settle(feature: LessonsFeature, workspace, qtbot) -> None:
    """Until the lesson's run and the window's run after it are done."""
    qtbot.waitUntil(lambda: not feature.running and not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)


def test_help_menu_opens_the_dock_tabbed_with_the_predictions(lessons, host):
    spec = host.actions[SHOW_ACTION]
    assert (spec.title, spec.menu) == ("Learn the hooks", "Help")
    dock = host.docks[DOCK_ID]
    assert dock.widget() is lessons.widget
    host.trigger(SHOW_ACTION)
    assert not dock.isHidden()
    assert lessons.list.count() == len(LESSONS) and lessons.current is LESSONS[0]
    assert lessons.title.text() == LESSONS[0].title and lessons.text.text() == LESSONS[0].text


def test_a_lesson_registers_through_the_workspace_runs_and_leaves_no_handle(lessons, workspace, host, qtbot):
    model = workspace.loaded.module
    registry = workspace.registry
    before = hooks_on(model)
    host.trigger(SHOW_ACTION)
    lessons.select("pre-double")
    assert "register_forward_pre_hook" in lessons.code.toPlainText()  # the code, before it runs (from the survey)

    listed: list[list] = []
    workspace.external_hooks_changed.connect(lambda infos: listed.append([(i.path, i.kind, i.method) for i in infos]))
    assert lessons.set_up_and_run()
    # registered on the live model through the workspace: the hook inspector lists the edit and the tick
    edits = [edit for _, edit, _ in registry.edits()]
    assert edits == [Intervention("scale-input", "conv1", factor=2.0)]
    assert registry.has("conv1", "pre") and lessons.ticked == [("conv1", "pre")]
    assert any(info.path == "conv1" and info.reads_or_edits == "edits" for info in registry.live_hooks())
    assert "Scale conv1's input by 2" in lessons.status.text()
    qtbot.waitUntil(lambda: lessons.result is not None, timeout=RUN_TIMEOUT_MS)
    settle(lessons, workspace, qtbot)

    # the hooks the lesson's run registered by itself were listed while the run lived, and only then
    assert [("conv1", "pre", "register_forward_pre_hook"), ("conv1", "forward", "register_forward_hook")] in listed
    assert listed[-1] == []
    assert workspace.external_hooks == ()
    result = lessons.result
    assert result.ok and result.lesson == "pre-double", result.claim
    assert lessons.claim.text().startswith("✓ Reproduced:")
    header = [lessons.table.horizontalHeaderItem(c).text() for c in range(3)]
    assert header == ["", "input as given", "with the pre-hook"]
    first = [lessons.table.item(0, c).text() for c in range(3)]
    assert first[0] == "input: mean" and float(first[2]) == pytest.approx(2 * float(first[1]), rel=1e-3)
    assert lessons.code.toPlainText() == result.snippet and "register_forward_pre_hook" in result.snippet
    QApplication.clipboard().clear()
    assert lessons.copy_snippet() == result.snippet and QApplication.clipboard().text() == result.snippet
    # the window's own run went on with the lesson's edit: the Inputs panel of conv1 shows the image doubled
    shown = workspace.last.result
    record = next(r for r in shown.of_kind("pre") if r.path == "conv1")
    assert torch.equal(record.tensor, 2 * shown.input)

    lessons.select("tensor-scale")  # leaving the lesson
    assert registry.edits() == [] and not registry.has("conv1", "pre")
    assert lessons.handles_left() == 0
    settle(lessons, workspace, qtbot)
    assert hooks_on(model) == before


def test_closing_the_dock_leaves_the_lesson(lessons, workspace, host, qtbot):
    model = workspace.loaded.module
    before = hooks_on(model)
    host.parent.show()
    host.trigger(SHOW_ACTION)
    lessons.select("pitfalls")
    assert lessons.set_up_and_run()
    qtbot.waitUntil(lambda: lessons.result is not None, timeout=RUN_TIMEOUT_MS)
    settle(lessons, workspace, qtbot)
    assert lessons.result.ok, lessons.result.claim
    # Hookscope's fix is visible as the Grad tick on bn1: a tensor hook on its output, which the in-place ReLU
    # after it cannot break
    info = next(i for i in workspace.registry.handles() if (i.path, i.kind) == ("bn1", "tensor"))
    assert info.method == TENSOR
    assert [lessons.table.item(0, c).text() for c in range(3)][1] == "0"  # the overwritten capture: min 0.0

    dock = host.docks[DOCK_ID]
    dock.setFloating(True)  # hides and shows the dock again: not a close, the lesson stays
    dock.setFloating(False)
    assert lessons.ticked == [("bn1", "forward"), ("bn1", "tensor")]
    dock.close()
    assert lessons.ticked == [] and not workspace.registry.has("bn1", "tensor")
    settle(lessons, workspace, qtbot)
    assert hooks_on(model) == before


def test_a_tiny_lesson_leaves_the_window_alone_and_shows_3_2(lessons, workspace, host, qtbot):
    model = workspace.loaded.module
    before = hooks_on(model)
    host.trigger(SHOW_ACTION)
    lessons.select("tensor-scale")
    assert lessons.set_up_and_run()
    assert workspace.registry.edits() == [] and lessons.ticked == []
    qtbot.waitUntil(lambda: lessons.result is not None, timeout=RUN_TIMEOUT_MS)
    assert [lessons.table.item(0, c).text() for c in range(3)] == ["y = 2 x at x = 1: dy/dx", "2", "3.2"]
    assert hooks_on(model) == before


def test_the_deprecated_lesson_runs_on_the_live_model_and_removes_both_hooks(lessons, workspace, host, qtbot):
    model = workspace.loaded.module
    before = hooks_on(model)
    flags = {path: m._is_full_backward_hook for path, m in model.named_modules()}
    host.trigger(SHOW_ACTION)
    lessons.select("backward-deprecated")
    assert lessons.set_up_and_run()
    qtbot.waitUntil(lambda: lessons.result is not None, timeout=RUN_TIMEOUT_MS)
    settle(lessons, workspace, qtbot)
    result = lessons.result
    assert result.ok and result.paths["block"] == "layer1.0", result.claim
    header = [lessons.table.horizontalHeaderItem(c).text().replace("\u200b", "") for c in range(3)]
    assert header == ["", "register_backward_hook (deprecated)", "register_full_backward_hook"]
    lessons.leave()
    assert hooks_on(model) == before
    assert {path: m._is_full_backward_hook for path, m in model.named_modules()} == flags


def test_switching_models_leaves_the_lesson_so_its_edit_is_not_carried_over(lessons, workspace, host, qtbot):
    host.trigger(SHOW_ACTION)
    lessons.select("forward-mixup")
    assert lessons.set_up_and_run()
    edit = workspace.registry.edits()[0][1]
    assert edit.kind == "mix" and edit.other_image.endswith("coffee.png")  # no image B in the window: the sample
    qtbot.waitUntil(lambda: lessons.result is not None, timeout=RUN_TIMEOUT_MS)
    assert lessons.result.ok and "coffee.png" in lessons.table.item(1, 0).text(), lessons.result.claim
    settle(lessons, workspace, qtbot)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.set_model("resnet18")
    assert workspace.registry.edits() == [] and lessons.edit_ids == []
    assert "forward" not in {kind for path, kind in workspace.ticked_pairs() if path == edit.path}


def test_hiding_the_dock_from_the_view_menu_leaves_the_lesson(lessons, workspace, host, qtbot):
    host.parent.show()
    host.trigger(SHOW_ACTION)
    lessons.select("tensor-mean")
    assert lessons.set_up_and_run()
    assert [edit.spec for _, edit, _ in workspace.registry.edits()] == ["scale-grad:fc:50"]
    toggle = host.docks[DOCK_ID].toggleViewAction()
    assert toggle.isChecked()
    toggle.trigger()  # what View > Learn the hooks does to a shown dock
    assert workspace.registry.edits() == [] and not workspace.registry.has("fc", "tensor")
    settle(lessons, workspace, qtbot)
    assert lessons.result is None  # the numbers of a lesson that was left are dropped

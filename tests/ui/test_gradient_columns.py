"""The tree's gradient columns on a real ResNet-18 workspace (random weights, the sample image).

Grad ticks a tensor hook on the module's output (put there by a forward hook); Grad in ticks a full backward hook
that records grad_input, the gradient of the target with respect to the module's input. Each record is checked
against ``torch.autograd.grad`` of the same target on the same model and input. A scale-grad edit on a module whose
Grad column is ticked shows in its gradient (× 1.6), where a full backward hook's grad_output (``--hooks backward``)
is read before the edit acts.
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

from hookscope.core.engine.hooks import FULL_BACKWARD, TENSOR
from hookscope.core.engine.interventions import parse_edit
from hookscope.ui.state.workspace import Workspace
from hookscope.ui.widgets.module_tree import GRAD_INPUTS, GRADIENTS, HEADER_TIPS, HEADERS, ModuleTreeModel

RUN_TIMEOUT_MS = 120_000
CHECKED = Qt.CheckState.Checked


@pytest.fixture
def tree(workspace: Workspace) -> ModuleTreeModel:
    """The module tree wired to the workspace as the window wires it."""
    model = ModuleTreeModel()
    model.tick_requested.connect(workspace.set_ticked)  # direct: the hook is on when setData returns
    workspace.hooks_changed.connect(model.show_ticks)
    model.set_model(workspace.nodes, workspace.registry, workspace.loaded.name)
    return model


def click(tree: ModuleTreeModel, path: str, column: int, ticked: bool = True) -> None:
    state = Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked
    assert tree.setData(tree.index_of(path, column), state, Qt.ItemDataRole.CheckStateRole)


def record(workspace: Workspace, kind: str, path: str) -> torch.Tensor:
    return next(r.tensor for r in workspace.last.result.records if (r.kind, r.key) == (kind, path))


def assert_near(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to float32 rounding: sums taken in another order differ by a few ulps of the largest value."""
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
    assert float(expected.abs().max()) > 0  # a real gradient, not zeros compared with zeros


def autograd_of(workspace: Workspace, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(d target / d input, d target / d output) of the module at ``path``, by torch.autograd.grad on the workspace's
    model with the last run's input and target (its hooks record nothing outside a run)."""
    result = workspace.last.result
    model = workspace.loaded.module
    seen: dict[str, torch.Tensor] = {}

    def keep(module, args, output):
        seen["input"], seen["output"] = args[0], output
        return output.clone()  # what follows gets a copy: an in-place op after the module (a ReLU) leaves this one

    handle = model.get_submodule(path).register_forward_hook(keep)
    try:
        with torch.enable_grad():
            output = model(result.input.clone().requires_grad_(True))
            grad_in, grad_out = torch.autograd.grad(output[0, result.target_index], [seen["input"], seen["output"]])
    finally:
        handle.remove()
    return grad_in, grad_out


def test_the_grad_in_column_ticks_a_full_backward_hook_that_records_grad_input(workspace, tree, qtbot) -> None:
    path = "layer2.0.conv1"
    module = workspace.registry.module(path)
    assert not module._backward_hooks
    assert HEADERS[GRAD_INPUTS] == "Grad in"
    assert "register_full_backward_hook" in HEADER_TIPS[GRAD_INPUTS] and "only" in HEADER_TIPS[GRAD_INPUTS]
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        click(tree, path, GRAD_INPUTS)
        assert module._backward_hooks  # on the live module when the click returns, before any run
    assert tree.data(tree.index_of(path, GRAD_INPUTS), Qt.ItemDataRole.CheckStateRole) == CHECKED
    assert workspace.ticked_pairs() >= {(path, "grad_input")}
    info = next(h for h in workspace.registry.handles() if (h.path, h.kind) == (path, "grad_input"))
    assert info.method == FULL_BACKWARD
    tip = tree.data(tree.index_of(path, GRAD_INPUTS), Qt.ItemDataRole.ToolTipRole)
    assert f"hook: {FULL_BACKWARD}" in tip

    got = record(workspace, "grad_input", path)
    grad_in, _ = autograd_of(workspace, path)
    assert got.shape == (1, 64, 56, 56)  # the module's input, not its output (1, 128, 28, 28)
    assert_near(got, grad_in)
    assert (path, "grad_input") in {(p.path, p.kind) for p in workspace.last.pictures}

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        click(tree, path, GRAD_INPUTS, False)
        assert not module._backward_hooks  # the untick removes it at once
    assert not workspace.registry.has(path, "grad_input")


def test_the_grad_column_ticks_a_tensor_hook_on_the_output(workspace, tree, qtbot) -> None:
    path = "layer2.0.bn1"  # an in-place ReLU follows: a full backward hook would raise here; a tensor hook does not
    module = workspace.registry.module(path)
    forward = len(module._forward_hooks)
    assert TENSOR in HEADER_TIPS[GRADIENTS] and "in-place" in HEADER_TIPS[GRADIENTS]
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        click(tree, path, GRADIENTS)
        assert len(module._forward_hooks) == forward + 1 and not module._backward_hooks
    info = next(h for h in workspace.registry.handles() if (h.path, h.kind) == (path, "tensor"))
    assert info.method == TENSOR and not info.note
    _, grad_out = autograd_of(workspace, path)
    assert_near(record(workspace, "tensor", path), grad_out)


def test_a_scale_grad_edit_shows_in_the_grad_column_of_the_same_module(workspace, tree, qtbot) -> None:
    """scale-grad:PATH:1.6 on a module whose Grad column is ticked: the captured gradient is 1.6 × the unedited one.
    (A full backward hook's grad_output, --hooks backward, is read at the module's boundary, before the edit acts:
    it stays the unedited gradient. The two used to be shown for the same column and disagreed.) grad_input, behind
    the edit, is 1.6 × too, and a scale-grad-input edit on the module scales it again."""
    path = "layer3.0.conv1"
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        click(tree, path, GRADIENTS)
        click(tree, path, GRAD_INPUTS)
        workspace.set_ticked([(path, "backward")], True)  # the command line's kind, for the comparison
    unedited = {kind: record(workspace, kind, path) for kind in ("tensor", "backward", "grad_input")}
    torch.testing.assert_close(unedited["tensor"], unedited["backward"], rtol=0, atol=0)  # the same gradient

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        assert workspace.add_edit(parse_edit(f"scale-grad:{path}:1.6")) is not None
    torch.testing.assert_close(record(workspace, "tensor", path), unedited["tensor"] * 1.6, rtol=1e-6, atol=0)
    torch.testing.assert_close(record(workspace, "backward", path), unedited["backward"], rtol=0, atol=0)
    assert_near(record(workspace, "grad_input", path), unedited["grad_input"] * 1.6)

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        assert workspace.add_edit(parse_edit(f"scale-grad-input:{path}:1.5")) is not None
    assert_near(record(workspace, "grad_input", path), unedited["grad_input"] * 1.6 * 1.5)
    torch.testing.assert_close(record(workspace, "tensor", path), unedited["tensor"] * 1.6, rtol=1e-6, atol=0)


def test_a_grad_in_tick_whose_input_gets_no_gradient_says_why(workspace, qtbot) -> None:
    """ResNet's fc gets its input from the whole network: a gradient arrives. The workspace's missing reason names the
    module's input for a grad_input tick, its output for a Grad tick."""
    assert "module's input" in workspace.missing_reason("fc", "grad_input")
    assert "module's output" in workspace.missing_reason("fc", "tensor")

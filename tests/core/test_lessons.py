"""The lessons on a real ResNet-18 (random weights): every claim checked against plain PyTorch computed here, every
handle gone after each lesson, each lesson's code runnable on its own, and ``hookscope lessons --run-all`` on
resnet18 and on a model from a file."""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
import sys
import textwrap
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from hookscope.cli import main
from hookscope.core.engine.hooks import TENSOR
from hookscope.core.engine.tree import survey
from hookscope.core.teaching import lessons as lessons_module
from hookscope.core.teaching.lessons import LESSONS, lesson
from hookscope.core.teaching.lessons import base as lesson_base
from hookscope.core.teaching.lessons import tensor as tensor_lessons
from hookscope.core.teaching.lessons.forward import MIX_WEIGHT
from hookscope.core.teaching.lessons.networks import catalogue_code
from hookscope.core.teaching.lessons.plan import plan

ROOT = Path(__file__).resolve().parents[2]
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    """Small, so that the many runs here stay quick."""
    return torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(3))


def hooks_on(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every module's hook counts: forward, forward-pre, backward, backward-pre."""
    return {path: tuple(len(getattr(m, name)) for name in HOOK_DICTS) for path, m in model.named_modules()}


def state_of(model: nn.Module) -> dict[str, tuple]:
    """What a lesson must leave as it found it besides the hooks: backward-hook kinds and in-place flags."""
    return {path: (m._is_full_backward_hook, getattr(m, "inplace", None)) for path, m in model.named_modules()}


def score(output: torch.Tensor) -> torch.Tensor:
    return output[0, output[0].argmax()]


def image_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    xin = x.clone().requires_grad_(True)
    score(model(xin)).backward()
    return xin.grad


def keep_output(store: list):
    return lambda module, inputs, output: store.append(output.detach().clone())


# ---- each claim against plain PyTorch ------------------------------------------------------------------------
def test_tensor_hook_turns_2_into_3_2():
    result = lesson("tensor-scale").run(None, None)
    assert result.ok and result.handles_left == 0, result.claim
    # by hand: y = 2 x, a tensor hook on y returns grad * 1.6
    linear = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        linear.weight.fill_(2.0)
    x = torch.tensor([[1.0]], requires_grad=True)
    y = linear(x)
    y.register_hook(lambda grad: grad * 1.6)
    y.sum().backward()
    assert result.tensors["before"].item() == 2.0
    assert torch.equal(result.tensors["after"], x.grad) and x.grad.item() == pytest.approx(3.2)
    assert result.rows[0].left == "2" and result.rows[0].right == "3.2"
    assert result.summary == "x.grad 2 -> 3.2 (x1.6)"


def test_tensor_hook_makes_the_mean_gradient_50_times_larger(resnet18, x):
    result = lesson("tensor-mean").run(resnet18, x)
    assert result.ok, result.claim
    assert result.paths == {"head": "fc"}
    plain = image_grad(resnet18, x)

    def scale(module, inputs, output):  # returns None: a forward hook that returned the handle would replace output
        output.register_hook(lambda grad: grad * 50)

    handle = resnet18.fc.register_forward_hook(scale)
    scaled = image_grad(resnet18, x)
    handle.remove()
    torch.testing.assert_close(result.tensors["image_grad_before"], plain)
    torch.testing.assert_close(result.tensors["image_grad_after"], scaled)
    assert (scaled.abs().mean() / plain.abs().mean()).item() == pytest.approx(50, rel=1e-4)
    assert result.rows[-1].right == "×50"


def test_pre_hook_doubles_the_input(resnet18, x):
    result = lesson("pre-double").run(resnet18, x)
    assert result.ok, result.claim
    assert result.paths == {"first": "conv1"}  # the image goes into conv1
    outputs: list[torch.Tensor] = []
    handles = [
        resnet18.conv1.register_forward_pre_hook(lambda module, inputs: (inputs[0] * 2,)),
        resnet18.conv1.register_forward_hook(keep_output(outputs)),
    ]
    with torch.no_grad():
        resnet18(x)
    for handle in handles:
        handle.remove()
    assert torch.equal(result.tensors["input_before"], x)
    assert torch.equal(result.tensors["input_after"], 2 * x)
    torch.testing.assert_close(result.tensors["output_after"], outputs[0])


def test_forward_hook_returning_a_value_mixes_0_7_a_and_0_3_b(resnet18, x):
    result = lesson("forward-mixup").run(resnet18, x)
    assert result.ok, result.claim
    path = result.paths["layer"]
    module = resnet18.get_submodule(path)
    x_b = torch.flip(x, dims=[-1])  # image B by default: A mirrored
    alone: list[torch.Tensor] = []
    handle = module.register_forward_hook(keep_output(alone))
    with torch.no_grad():
        resnet18(x)
        resnet18(x_b)
    handle.remove()
    a, b = alone
    seen: list[torch.Tensor] = []
    handles = [
        module.register_forward_hook(lambda m, i, output: MIX_WEIGHT * output + (1 - MIX_WEIGHT) * b),
        module.register_forward_hook(keep_output(seen)),
    ]
    with torch.no_grad():
        resnet18(x)
    for handle in handles:
        handle.remove()
    torch.testing.assert_close(result.tensors["a"], a)
    torch.testing.assert_close(result.tensors["b"], b)
    torch.testing.assert_close(result.tensors["mixed"], 0.7 * a + 0.3 * b)
    torch.testing.assert_close(result.tensors["mixed"], seen[0])


def test_full_backward_hook_edits_grad_input_and_leaves_grad_output(resnet18, x):
    result = lesson("backward-grad-input").run(resnet18, x)
    assert result.ok, result.claim
    module = resnet18.get_submodule(result.paths["layer"])
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def read(module, grad_input, grad_output):
        seen.append((grad_input[0].clone(), grad_output[0].clone()))

    handle = module.register_full_backward_hook(read)
    image_grad(resnet18, x)
    edit = module.register_full_backward_hook(lambda m, gi, go: tuple(g * 1.6 for g in gi), prepend=True)
    image_grad(resnet18, x)
    handle.remove()
    edit.remove()
    (in0, out0), (in1, out1) = seen
    torch.testing.assert_close(result.tensors["grad_input_before"], in0)
    torch.testing.assert_close(result.tensors["grad_input_after"], in1)
    torch.testing.assert_close(in1, 1.6 * in0)
    torch.testing.assert_close(result.tensors["grad_output_before"], result.tensors["grad_output_after"])
    torch.testing.assert_close(result.tensors["grad_output_after"], out1)


def test_the_full_backward_hook_lesson_holds_when_two_passes_round_differently(resnet18):
    """Two backward passes on two CPU threads can differ in the last bits (here about 1 pass in 3 at 32x32): the
    lesson's claim holds every time, and its row says exactly when the two grad_outputs are bitwise equal."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        results = [lesson("backward-grad-input").run(resnet18, x) for _ in range(6)]
    finally:
        torch.set_num_threads(threads)
    for result in results:
        assert result.ok, result.claim
        before, after = result.tensors["grad_output_before"], result.tensors["grad_output_after"]
        row = next(row.right for row in result.rows if row.label == "grad_output unchanged")
        assert (row == "yes, exactly") == torch.equal(before, after), row
        assert row.startswith("yes"), row


def test_deprecated_backward_hook_reports_the_last_operation(resnet18, x):
    result = lesson("backward-deprecated").run(resnet18, x)
    assert result.ok, result.claim
    assert result.paths == {"block": "layer1.0", "last_op": "layer1.0.relu"}
    assert any("non-full backward hook" in w for w in result.warnings)
    model = copy.deepcopy(resnet18)  # the old hook's kind would stay on the module: a copy of its own
    block = model.layer1[0]
    got: dict[str, torch.Tensor] = {}

    def keep_boundary(module, inputs, output):
        got["input"] = inputs[0].detach().clone()
        got["output"] = output.detach().clone()
        output.register_hook(lambda grad: got.__setitem__("grad_output", grad.clone()))

    with pytest.warns(FutureWarning, match="non-full backward hook"):
        handles = [
            block.register_forward_hook(keep_boundary),
            block.register_backward_hook(lambda m, gi, go: got.__setitem__("old", gi[0].clone())),
        ]
        image_grad(model, x)
    for handle in handles:
        handle.remove()
    # by hand: the ReLU's own backward (its input's gradient), and the whole block's input gradient
    relu_input_grad = got["grad_output"] * (got["output"] > 0)
    x_block = got["input"].clone().requires_grad_(True)
    block_input_grad = torch.autograd.grad(block(x_block), x_block, got["grad_output"])[0]
    torch.testing.assert_close(got["old"], relu_input_grad)
    torch.testing.assert_close(result.tensors["old"], relu_input_grad)
    torch.testing.assert_close(result.tensors["full"], block_input_grad)
    assert (result.tensors["old"] - result.tensors["full"]).abs().max() > 1e-3 * block_input_grad.abs().max()


def test_pitfalls_overwritten_capture_raising_hook_and_the_fix(resnet18, x):
    result = lesson("pitfalls").run(resnet18, x)
    assert result.ok, result.claim
    assert result.paths == {"victim": "bn1", "culprit": "relu"}
    kept: dict[str, torch.Tensor] = {}

    def keep(module, inputs, output):
        kept["no clone"] = output.detach()
        kept["clone"] = output.detach().clone()

    handle = resnet18.bn1.register_forward_hook(keep)
    with torch.no_grad():
        resnet18(x)
    handle.remove()
    assert kept["no clone"].min().item() == 0.0 and kept["clone"].min().item() < 0
    assert torch.equal(result.tensors["no_clone"], kept["no clone"])
    assert torch.equal(result.tensors["clone"], kept["clone"])
    assert result.rows[0].left == "0"
    assert "raises" in result.rows[2].left and "BackwardHookFunction" in result.rows[2].left

    raising = copy.deepcopy(resnet18)
    handle = raising.bn1.register_full_backward_hook(lambda *_: None)
    with pytest.raises(RuntimeError, match="BackwardHookFunction"):
        image_grad(raising, x)
    handle.remove()

    # the fix against the network with every ReLU not in place, differentiated by retain_grad
    plain = copy.deepcopy(resnet18)
    for module in plain.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    kept_out: list[torch.Tensor] = []

    def retain(module, inputs, output):
        output.retain_grad()
        kept_out.append(output)

    handle = plain.bn1.register_forward_hook(retain)
    score(plain(x.clone().requires_grad_(True))).backward()
    handle.remove()
    assert result.rows[2].right.startswith(f"{TENSOR}:")  # the Grad tick: a tensor hook on the output
    torch.testing.assert_close(result.tensors["grad"], kept_out[0].grad)


def test_forward_hook_exports_input_and_output(resnet18, x):
    result = lesson("forward-export").run(resnet18, x)
    assert result.ok, result.claim
    module = resnet18.get_submodule(result.paths["layer"])
    seen: dict[str, torch.Tensor] = {}
    handle = module.register_forward_hook(
        lambda m, inputs, output: seen.update(input=inputs[0].detach().clone(), output=output.detach().clone())
    )
    with torch.no_grad():
        resnet18(x)
    handle.remove()
    assert torch.equal(result.tensors["input"], seen["input"])
    assert torch.equal(result.tensors["output"], seen["output"])
    assert result.tensors["output"].device.type == "cpu"


def test_handle_remove_counts(resnet18, x):
    result = lesson("handle-remove").run(resnet18, x)
    assert result.ok, result.claim
    assert [(r.left, r.right) for r in result.rows] == [("1", "0"), ("1", "1")]


# ---- no handle left ------------------------------------------------------------------------------------------
def test_every_lesson_leaves_no_handle_and_the_model_as_it_was(resnet18, x):
    before_hooks, before_state = hooks_on(resnet18), state_of(resnet18)
    picks = plan(resnet18, survey(resnet18, x))
    for item in LESSONS:
        result = item.run(resnet18, x, picks=picks)
        assert result.ok, f"{item.id}: {result.claim}"
        assert result.handles_left == 0 and not result.note, item.id
        assert hooks_on(resnet18) == before_hooks, f"{item.id} left a handle"
        assert state_of(resnet18) == before_state, f"{item.id} changed a module's flags"


def test_a_lesson_that_raises_still_removes_its_hooks(resnet18, x, monkeypatch):
    before_hooks, before_state = hooks_on(resnet18), state_of(resnet18)

    def broken(*args, **kwargs):
        raise RuntimeError("the device fell over")

    monkeypatch.setattr(lesson_base, "run_image", broken)
    result = lesson("backward-grad-input").run(resnet18, x)  # its reading hook and edit are on when the run breaks
    assert not result.ok and result.error == "RuntimeError: the device fell over"
    assert result.summary == "error: RuntimeError: the device fell over"
    assert hooks_on(resnet18) == before_hooks and state_of(resnet18) == before_state


def test_a_model_without_what_a_lesson_needs_gets_the_built_in_network(x):
    torch.manual_seed(0)
    plain = nn.Sequential(OrderedDict(conv=nn.Conv2d(3, 4, 3), pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten(),
                                      fc=nn.Linear(4, 5))).eval()  # fmt: skip
    result = lesson("pitfalls").run(plain, x)  # no in-place op anywhere
    assert result.ok and result.note.startswith("Shown on a small built-in network: this model has no module")
    assert result.paths == {"victim": "bn", "culprit": "relu"}
    assert hooks_on(plain) == {path: (0, 0, 0, 0) for path, _ in plain.named_modules()}

    with torch.no_grad():
        plain.fc.weight.zero_()  # an untrained head of zeros: no gradient reaches anything behind it
    result = lesson("tensor-mean").run(plain, x)
    assert result.ok and "zero everywhere" in result.note and result.paths == {"head": "fc"}


# ---- the code of each lesson runs on its own -----------------------------------------------------------------
def test_each_lessons_code_runs_on_its_own(resnet18, x):
    picks = plan(resnet18, survey(resnet18, x))
    expected = {
        "forward-export": "gives the exported output: True",
        "forward-mixup": "max difference 0.0",
        "pre-double": "twice: True",
        "backward-grad-input": "grad_output unchanged: True",
        "backward-deprecated": "PyTorch warns: Using a non-full backward hook",
        "tensor-scale": "with it: 3.2",
        "tensor-mean": "ratio: ",
        "handle-remove": "forward hooks after handle.remove(): 0",
        "pitfalls": "min without clone: 0.0",
    }
    for item in LESSONS:
        code = item.snippet(resnet18, x, picks=picks, model_code=catalogue_code("resnet18"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"<lesson {item.id}>", "exec"), {"__name__": "__main__"})  # noqa: S102
        assert expected[item.id] in printed.getvalue(), f"{item.id}:\n{printed.getvalue()}"


# ---- the command line ----------------------------------------------------------------------------------------
def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hookscope", "lessons", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_lessons_lists_them():
    done = hookscope()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [item.id for item in LESSONS]


def test_run_all_on_resnet18():
    done = hookscope("--run-all", "--model", "resnet18")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(LESSONS) and all(line.endswith("  ok") for line in lines), done.stdout
    assert "tensor-scale         x.grad 2 -> 3.2 (x1.6)  ok" in lines
    assert any(line.startswith("tensor-mean") and "(x50)" in line for line in lines)
    assert "all 9 lessons reproduced their claims on resnet18 at 112x112" in done.stderr


MODEL_PY = textwrap.dedent(
    """
    import torch
    from torch import nn


    class SmallNet(nn.Module):
        image_size = 48

        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
            )
            self.head = nn.Linear(8, 10)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))


    def build():
        torch.manual_seed(0)
        return SmallNet()
    """
)


def test_run_all_on_a_model_from_a_file(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    done = hookscope("--run-all", "--model-file", f"{path}:build", "--trust")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(LESSONS) and all(line.endswith("  ok") for line in lines), done.stdout
    assert not any("[built-in network]" in line for line in lines), done.stdout  # every lesson ran on the file's model
    assert any(line.startswith("pitfalls") and "features.1" in line for line in lines)
    assert any(line.startswith("backward-deprecated") and "features:" in line for line in lines)


def test_run_all_without_trust_or_with_a_bad_size_is_one_line(tmp_path, capsys):
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    assert main(["lessons", "--run-all", "--model-file", f"{path}:build"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and "--trust" in captured.err
    assert main(["lessons", "--run-all", "--size", "-3"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "hookscope: error: --size must be a number of pixels (or 0 for the model's own), not -3."
    ]


def test_run_all_exits_1_when_a_lesson_fails(monkeypatch, capsys):
    original = tensor_lessons._tensor_scale

    def wrong(setting, hooks):
        outcome = original(setting, hooks)
        outcome.ok = False
        return outcome

    patched = tuple(replace(item, compute=wrong) if item.id == "tensor-scale" else item for item in LESSONS)
    monkeypatch.setattr(lessons_module, "LESSONS", patched)  # the command reads the list when it runs
    assert main(["lessons", "--run-all", "--size", "64"]) == 1
    captured = capsys.readouterr()
    assert "tensor-scale         x.grad 2 -> 3.2 (x1.6)  failed" in captured.out
    assert "1 of 9 lessons failed on resnet18 at 64x64: tensor-scale" in captured.err


def test_the_code_of_a_lesson_on_a_model_file_builds_that_model(tmp_path):
    from hookscope.core.models.source import ModelSource, open_model
    from hookscope.core.teaching.lessons.networks import model_code_for

    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    loaded = open_model(ModelSource(file=f"{path}:build", trust=True))
    x = torch.randn(1, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    result = lesson("tensor-mean").run(loaded.module, x, model_code=model_code_for(loaded))
    assert result.ok and result.paths == {"head": "head"}, result.claim
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(result.snippet, "<lesson on model.py>", "exec"), {"__name__": "__main__"})  # noqa: S102
    ratio = float(printed.getvalue().split("ratio:")[1].split()[0])
    assert ratio == pytest.approx(50, rel=1e-5)


def test_the_window_setups_tick_the_trees_columns(resnet18, x):
    """What a lesson sets up in the window is ticks of the tree's columns (In, Act, Grad = a tensor hook, Grad in =
    grad_input): the full backward hook lesson shows grad_output unchanged in Grad and grad_input × 1.6 in Grad in."""
    picks = plan(resnet18, survey(resnet18, x))
    for item in LESSONS:
        for _, kind in item.setup(picks).ticks:
            assert kind in ("pre", "forward", "tensor", "grad_input"), (item.id, kind)
    grad = lesson("backward-grad-input").setup(picks)
    assert grad.ticks == ((picks.grad_layer, "tensor"), (picks.grad_layer, "grad_input"))
    assert [e.spec for e in grad.edits] == [f"scale-grad-input:{picks.grad_layer}:1.6"]
    assert lesson("pitfalls").setup(picks).ticks == ((picks.victim, "forward"), (picks.victim, "tensor"))

"""Missing gradients explained (issue 13, item 6): an output part with a forward record and no gradient record is
listed with the reason, in the run's result and in the export manifest ("no_gradient": {key: reason}).

The model is real PyTorch: ``nn.MultiheadAttention`` returns the attention weights averaged over heads, a tensor
that nothing downstream uses; a side branch whose output is dropped; a module that returns integers (argmax); a
module that computes under ``torch.no_grad``. Each is checked against what autograd itself says on a copy.
"""

from __future__ import annotations

import copy
import json
import textwrap

import pytest
import torch

from hookscope.cli import main
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.files import open_model_file

MODEL_PY = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Pick(nn.Module):
        def forward(self, tokens):
            return tokens.argmax(-1)  # integers


    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, tokens):
            with torch.no_grad():
                return self.lin(tokens)


    class Attend(nn.Module):
        image_size = 32

        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, 8, 8, stride=8)
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
            self.side = nn.Linear(8, 3)
            self.pick = Pick()
            self.frozen = Frozen()
            self.head = nn.Linear(8, 10)

        def forward(self, x):
            tokens = self.embed(x).flatten(2).transpose(1, 2)  # (1, 16, 8)
            out, weights = self.attention(tokens, tokens, tokens, need_weights=True)  # weights: (1, 16, 16), unused
            self.side(tokens)  # computed and dropped
            self.pick(tokens)
            shift = self.frozen(tokens).mean()
            return self.head(out.mean(1)) + shift


    def build():
        return Attend()
    """
)

REACH = "the target ({target}) does not depend on it"
INTEGERS = "it holds integers"
UNTRACKED = "autograd does not track it"


@pytest.fixture
def model_py(tmp_path):
    path = tmp_path / "attend.py"
    path.write_text(MODEL_PY)
    return path


def _autograd_reaches(model: torch.nn.Module, x: torch.Tensor, path: str, leaf: int | None, index: int) -> bool:
    """Whether autograd gives the output (part) of ``path`` a gradient of logit ``index``, on a copy."""
    model = copy.deepcopy(model)
    kept = []
    handle = model.get_submodule(path).register_forward_hook(lambda m, a, out: kept.append(out))
    logits = model(x.clone().requires_grad_(True))
    handle.remove()
    tensor = kept[0] if leaf is None else kept[0][leaf]
    if not tensor.requires_grad:
        return False
    (grad,) = torch.autograd.grad(logits[0, index], tensor, allow_unused=True)
    return grad is not None


def test_parts_without_a_gradient_are_listed_with_the_reason(model_py):
    loaded = open_model_file(f"{model_py}:build", trust=True, seed=0)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    paths = ["attention", "side", "pick", "frozen", "head"]
    with HookRegistry(loaded.module) as registry:
        for path in paths:
            for kind in ("forward", "tensor", "backward"):
                registry.add(path, kind)
        result = capture_run(loaded.module, registry, x)
    index = result.target_index
    reasons = {(m.kind, m.key): m.reason for m in result.no_gradient}
    expected = {"attention/1": REACH, "side": REACH, "pick": INTEGERS, "frozen": UNTRACKED}
    assert set(reasons) == {(kind, key) for kind in ("tensor", "backward") for key in expected}
    for (_kind, key), reason in reasons.items():
        assert expected[key].format(target=result.target) in reason, (key, reason)
    forward = {r.key for r in result.records if r.kind == "forward"}
    gradients = {(r.kind, r.key) for r in result.records if r.kind in ("tensor", "backward")}
    for kind, key in reasons:
        assert key in forward and (kind, key) not in gradients, "a forward record and no gradient record"
    assert {
        ("tensor", "attention/0"),
        ("backward", "attention/0"),
        ("tensor", "head"),
        ("backward", "head"),
    } <= gradients
    # what autograd says on a copy: exactly the listed parts get no gradient
    for path, leaf, key in [("attention", 0, "attention/0"), ("attention", 1, "attention/1"), ("side", None, "side"),
                            ("pick", None, "pick"), ("frozen", None, "frozen"), ("head", None, "head")]:  # fmt: skip
        assert _autograd_reaches(loaded.module, x, path, leaf, index) == (key not in expected), key


def test_the_manifest_says_why(model_py, tmp_path, capsys):
    from PIL import Image

    image = tmp_path / "in.png"
    Image.new("RGB", (40, 40), (200, 30, 90)).save(image)
    argv = ["export", "--model-file", f"{model_py}:build", "--trust", "--image", str(image), "--no-png",
            "--layers", "attention,side,pick,frozen,head", "--hooks", "act,grad", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    missing = manifest["no_gradient"]
    assert sorted(missing) == ["attention/1", "frozen", "pick", "side"]
    assert REACH.format(target=manifest["target"]["description"]) in missing["attention/1"]
    assert INTEGERS in missing["pick"] and UNTRACKED in missing["frozen"]
    import numpy as np

    assert set(np.load(tmp_path / "o" / "activations.npz")) >= set(missing)
    assert not set(np.load(tmp_path / "o" / "gradients.npz")) & set(missing)
    # only the exported hook kinds count: without gradient hooks nothing is missing
    argv[argv.index("act,grad")] = "act"
    argv[-1] = str(tmp_path / "p")
    assert main(argv) == 0
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["no_gradient"] == {}


def test_an_ordinary_network_has_nothing_missing(resnet18):
    """Every module of ResNet-18 hooked both ways: every output part gets its gradient, nothing is listed."""
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with HookRegistry(resnet18) as registry:
        for path in registry.paths:
            registry.add(path, "tensor")
            registry.add(path, "backward")
        result = capture_run(resnet18, registry, x)
    assert result.no_gradient == []


INPUT_REACH = "the target ({target}) does not depend on what the module returns"
RETURNS_INTEGERS = "what the module returns is integers"
RETURNS_UNTRACKED = "what the module returns is not tracked by autograd"


def test_inputs_without_a_gradient_are_listed_with_the_reason(model_py):
    """The Grad in column (grad_input): a call whose inputs get no gradient is listed once, with why; where the
    inputs do get one, the record is d target / d input as autograd computes it."""
    loaded = open_model_file(f"{model_py}:build", trust=True, seed=0)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with HookRegistry(loaded.module) as registry:
        for path in ["embed", "attention", "side", "pick", "frozen", "head"]:
            registry.add(path, "grad_input")
        result = capture_run(loaded.module, registry, x)
    reasons = {m.key: m.reason for m in result.no_gradient if m.kind == "grad_input"}
    assert sorted(reasons) == ["frozen", "pick", "side"]
    assert INPUT_REACH.format(target=result.target) in reasons["side"]
    assert RETURNS_INTEGERS in reasons["pick"] and RETURNS_UNTRACKED in reasons["frozen"]
    got = {r.key for r in result.records if r.kind == "grad_input"}
    assert {"embed", "attention/0", "head"} <= got and not got & set(reasons)

    # the image's own gradient is what embed (the first module) got as its grad_input
    embed = next(r for r in result.records if (r.kind, r.key) == ("grad_input", "embed"))
    torch.testing.assert_close(embed.tensor, result.input_grad)


def test_an_input_that_does_not_depend_on_the_image_is_said_so():
    """nn.Embedding fed integer positions: its input has no gradient at all."""
    from torch import nn

    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 4, stride=4)
            self.table = nn.Embedding(16, 4)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            tokens = self.conv(x).flatten(2).transpose(1, 2)  # (1, 16, 4)
            return self.head((tokens + self.table(torch.arange(16))).mean(1))

    torch.manual_seed(0)
    model = Positions().eval()
    with HookRegistry(model) as registry:
        registry.add("table", "grad_input")
        result = capture_run(model, registry, torch.randn(1, 3, 16, 16))
    assert [(m.kind, m.key) for m in result.no_gradient] == [("grad_input", "table")]
    assert "its inputs do not depend on the image (integers" in result.no_gradient[0].reason

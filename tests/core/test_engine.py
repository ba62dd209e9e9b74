"""The hook engine on real torchvision models: every pitfall in DESIGN.md's table, checked against references."""

import copy
import dataclasses
from collections import namedtuple

import pytest
import torch
import torchvision
from torch import nn

from hookscope.core.common.errors import HookscopeError, RunError
from hookscope.core.engine.blame import ModelRaised
from hookscope.core.engine.capture import RunCancelled, capture_run
from hookscope.core.engine.hooks import FALLBACK, FORWARD, FULL_BACKWARD, PRE, TENSOR, HookRegistry
from hookscope.core.engine.tree import module_tree


def records_by_key(result, kind):
    return {r.key: r.tensor for r in result.of_kind(kind)}


def reference_outputs_and_grads(model, x, paths):
    """Outputs and output gradients from plain autograd on a copy of the model without in-place ReLUs.

    Each call of each module keeps its own output tensor; torch.autograd.grad then gives the gradient of the
    top-1 logit with respect to each of them, independently of any Hookscope code.
    """
    model = copy.deepcopy(model)
    for module in model.modules():
        if hasattr(module, "inplace"):
            module.inplace = False
    outputs: dict[str, list[torch.Tensor]] = {p: [] for p in paths}
    values: dict[str, list[torch.Tensor]] = {p: [] for p in paths}

    def keep(path, out):
        outputs[path].append(out)
        values[path].append(out.detach().clone())  # "out += identity" still runs in place later

    modules = dict(model.named_modules())
    for path in paths:
        modules[path].register_forward_hook(lambda m, a, out, path=path: keep(path, out))
    xin = x.clone().requires_grad_(True)
    logits = model(xin)
    flat = [o for p in paths for o in outputs[p]]
    grads = torch.autograd.grad(logits[0, logits[0].argmax()], flat + [xin])
    it = iter(grads)
    ref_grads = {p: [next(it) for _ in outputs[p]] for p in paths}
    return values, ref_grads, next(it)


def test_forward_capture_survives_inplace_relu_and_residual_add(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    for path in ("bn1", "layer1.0.bn2", "conv1"):
        registry.add(path, "forward")
    result = capture_run(resnet18, registry, image_tensor)
    captured = records_by_key(result, "forward")
    reference, _, _ = reference_outputs_and_grads(resnet18, image_tensor, ["bn1", "layer1.0.bn2", "conv1"])
    assert captured["bn1"].min() < 0, "the in-place ReLU after bn1 must not have zeroed the captured negatives"
    torch.testing.assert_close(captured["bn1"], reference["bn1"][0])
    # layer1.0.bn2 is followed by "out += identity": the capture must be the value before the add.
    torch.testing.assert_close(captured["layer1.0.bn2"], reference["layer1.0.bn2"][0])
    torch.testing.assert_close(captured["conv1"], reference["conv1"][0])
    assert all(r.tensor.device.type == "cpu" for r in result.records)


def test_gradients_match_autograd_reference_with_fallback_where_needed(resnet18, image_tensor):
    paths = ["conv1", "bn1", "relu", "layer1.0.bn2", "layer1.0.relu", "layer2", "layer4.1.conv2", "fc"]
    registry = HookRegistry(resnet18)
    for path in paths:
        registry.add(path, "backward")
    result = capture_run(resnet18, registry, image_tensor)
    methods = {h.path: h.method for h in registry.handles()}
    assert methods["conv1"] == FULL_BACKWARD
    assert methods["layer4.1.conv2"] == FULL_BACKWARD
    assert methods["fc"] == FULL_BACKWARD
    for path in ("bn1", "relu", "layer1.0.bn2", "layer1.0.relu"):
        assert methods[path] == FALLBACK, path
    notes = {h.path: h.note for h in registry.handles()}
    assert "in-place" in notes["bn1"] and "in place" in notes["relu"]

    _, ref_grads, ref_input_grad = reference_outputs_and_grads(resnet18, image_tensor, paths)
    got = records_by_key(result, "backward")
    for path in paths:
        for call, ref in enumerate(ref_grads[path]):
            key = path if call == 0 else f"{path}#{call}"
            torch.testing.assert_close(got[key], ref, msg=f"gradient of {key}")
    torch.testing.assert_close(result.input_grad, ref_input_grad)


def test_tensor_hooks_and_pre_hooks(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("layer3.0.conv1", "tensor")
    registry.add("layer3.0.conv1", "backward")
    registry.add("relu", "pre")
    registry.add("bn1", "forward")
    assert {h.method for h in registry.handles()} == {TENSOR, FULL_BACKWARD, PRE, FORWARD}
    result = capture_run(resnet18, registry, image_tensor)
    tensor_grad = records_by_key(result, "tensor")["layer3.0.conv1"]
    torch.testing.assert_close(tensor_grad, records_by_key(result, "backward")["layer3.0.conv1"])
    relu_input = records_by_key(result, "pre")["relu"]
    assert relu_input.min() < 0, "the pre-hook must see the input before ReLU(inplace=True) overwrote it"
    torch.testing.assert_close(relu_input, records_by_key(result, "forward")["bn1"])


def test_module_called_twice_keeps_one_record_per_call(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("layer1.0.relu", "forward")
    result = capture_run(resnet18, registry, image_tensor)
    keys = [r.key for r in result.of_kind("forward")]
    assert keys == ["layer1.0.relu", "layer1.0.relu#1"]
    first, second = (r.tensor for r in result.of_kind("forward"))
    assert not torch.equal(first, second)
    assert result.survey.run_of("layer1.0.relu").calls == 2


def test_gradient_target_class_and_errors(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("fc", "backward")
    result = capture_run(resnet18, registry, image_tensor, target=7)
    grad = records_by_key(result, "backward")["fc"][0]
    assert result.target_index == 7
    assert grad[7] == 1 and grad.abs().sum() == 1, "d logit_7 / d logits is one-hot at 7"
    with pytest.raises(RunError, match="Class 5000 does not exist"):
        capture_run(resnet18, registry, image_tensor, target=5000)
    with pytest.raises(RunCancelled):
        capture_run(resnet18, registry, image_tensor, cancelled=lambda: True)


def test_unknown_path_and_kind_are_clear_errors(resnet18):
    registry = HookRegistry(resnet18)
    with pytest.raises(HookscopeError, match="no module 'layer9'"):
        registry.add("layer9", "forward")
    with pytest.raises(HookscopeError, match="Unknown hook kind"):
        registry.add("conv1", "sideways")


def test_no_handle_left_after_untick_switch_and_failed_run(resnet18, image_tensor, hook_counts):
    before = hook_counts(resnet18)
    registry = HookRegistry(resnet18)
    for kind in ("forward", "pre", "backward", "tensor"):
        registry.add("layer1.0.conv1", kind)
        registry.add("bn1", kind)
    module = resnet18.layer1[0].conv1
    assert len(module._forward_hooks) == 2  # forward capture + the forward hook that installs the tensor hook
    assert len(module._forward_pre_hooks) == 1
    assert len(module._backward_hooks) == 1
    # untick
    for kind in ("forward", "pre", "backward", "tensor"):
        registry.remove("layer1.0.conv1", kind)
    assert (len(module._forward_hooks), len(module._forward_pre_hooks), len(module._backward_hooks)) == (0, 0, 0)

    # once a run has surveyed the model, bn1's gradient hook has moved to the fallback (a forward hook)
    capture_run(resnet18, registry, image_tensor)
    assert [h.method for h in registry.handles() if h.kind == "backward"] == [FALLBACK]
    # a run that raises inside the model (a one-channel image into a three-channel conv) leaves only the ticks
    with_ticks = hook_counts(resnet18)
    with pytest.raises(ModelRaised, match="forward pass: RuntimeError"):  # the model's failure, not a bug of ours
        capture_run(resnet18, registry, torch.randn(1, 1, 64, 64))
    assert hook_counts(resnet18) == with_ticks
    # a run that raises after the forward pass (bad target) likewise
    with pytest.raises(RunError):
        capture_run(resnet18, registry, image_tensor, target=-1)
    assert hook_counts(resnet18) == with_ticks

    # switching the model clears the registry; the context-manager form clears even when the body raises
    registry.clear()
    assert hook_counts(resnet18) == before
    with pytest.raises(ValueError), HookRegistry(resnet18) as scoped:
        scoped.add("conv1", "backward")
        scoped.add("fc", "forward")
        raise ValueError("boom")
    assert hook_counts(resnet18) == before


def test_repeated_runs_are_identical_and_captures_are_not_shared(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("layer2.1.bn2", "forward")
    registry.add("layer2.1.bn2", "backward")
    first = capture_run(resnet18, registry, image_tensor)
    second = capture_run(resnet18, registry, image_tensor)
    for a, b in zip(first.records, second.records):
        assert a.key == b.key
        torch.testing.assert_close(a.tensor, b.tensor)
    assert first.records[0].tensor.data_ptr() != second.records[0].tensor.data_ptr()


class _Structured(nn.Module):
    """A model whose submodules return a tuple, a dict, a namedtuple and a dataclass."""

    Pair = namedtuple("Pair", ["left", "right"])

    @dataclasses.dataclass
    class Out:
        features: torch.Tensor
        extra: tuple

    class Tup(nn.Module):
        def forward(self, x):
            return x * 2, None, x + 1

    class Dict(nn.Module):
        def forward(self, x):
            return {"a": x - 1, "b": [x * 3, "text"]}

    class Named(nn.Module):
        def forward(self, x):
            return _Structured.Pair(x.sin(), x.cos())

    class Data(nn.Module):
        def forward(self, x):
            return _Structured.Out(features=x.tanh(), extra=(x.exp(),))

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.tup, self.dict, self.named, self.data = self.Tup(), self.Dict(), self.Named(), self.Data()

    def forward(self, x):
        x = self.conv(x)
        a, _, b = self.tup(x)
        d = self.dict(a + b)
        n = self.named(d["a"] + d["b"][0])
        o = self.data(n.left + n.right)
        return (o.features + o.extra[0]).mean(dim=(2, 3))


def test_structured_outputs_keep_one_record_per_leaf():
    model = _Structured().eval()
    registry = HookRegistry(model)
    for path in ("tup", "dict", "named", "data"):
        registry.add(path, "forward")
        registry.add(path, "backward")
    result = capture_run(model, registry, torch.randn(1, 3, 8, 8))
    forward = {r.key for r in result.of_kind("forward")}
    assert forward == {
        "tup/0",
        "tup/2",
        "dict/a",
        "dict/b.0",
        "named/left",
        "named/right",
        "data/features",
        "data/extra.0",
    }
    backward = {r.key for r in result.of_kind("backward")}
    assert {"tup/0", "tup/2", "dict/a", "named/left", "data/features"} <= backward
    methods = {h.path: h.method for h in registry.handles() if h.kind == "backward"}
    assert methods["tup"] == FULL_BACKWARD  # a flat tuple: the full backward hook sees each element
    assert methods["dict"] == FALLBACK


def test_vit_attention_tuple_output_and_modules_that_never_run():
    torch.manual_seed(0)
    model = torchvision.models.vit_b_32(weights=None).eval()
    registry = HookRegistry(model)
    attention = "encoder.layers.encoder_layer_0.self_attention"
    registry.add(attention, "forward")
    registry.add(attention, "backward")
    registry.add("encoder.layers.encoder_layer_3", "forward")
    result = capture_run(model, registry, torch.randn(1, 3, 224, 224))
    forward = records_by_key(result, "forward")
    assert forward[f"{attention}/0"].shape == (1, 50, 768)
    assert records_by_key(result, "backward")[f"{attention}/0"].shape == (1, 50, 768)
    assert forward["encoder.layers.encoder_layer_3"].shape == (1, 50, 768)
    # out_proj is used functionally by MultiheadAttention: it never runs as a module
    assert not result.survey.run_of(f"{attention}.out_proj").ran
    assert result.survey.run_of(attention).ran


@pytest.mark.parametrize(
    ("name", "never_runs"),
    [("googlenet", "aux1"), ("shufflenet_v2_x0_5", "stage2.1.branch1")],
)
def test_skipped_modules_are_marked_not_run(name, never_runs):
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    registry = HookRegistry(model)
    registry.add(never_runs, "forward")
    result = capture_run(model, registry, torch.randn(1, 3, 224, 224))
    assert not result.survey.run_of(never_runs).ran
    assert result.of_kind("forward") == []
    assert result.survey.run_of("conv1").ran


def test_module_tree_lists_every_module_with_parameters(resnet18):
    nodes = module_tree(resnet18)
    assert nodes[0].path == "" and nodes[0].type_name == "ResNet"
    assert nodes[0].params == sum(p.numel() for p in resnet18.parameters())
    by_path = {n.path: n for n in nodes}
    assert by_path["layer1.0.conv1"].type_name == "Conv2d"
    assert by_path["layer1.0.conv1"].params == 64 * 64 * 3 * 3
    assert by_path["layer1"].children == ("layer1.0", "layer1.1")
    assert len(nodes) == len(list(resnet18.named_modules()))


class _TableBias(nn.Module):
    """Like Swin V2's continuous position bias: an MLP over a fixed table, whose output never sees the image."""

    def __init__(self, inplace: bool = True):
        super().__init__()
        self.register_buffer("table", torch.linspace(-1, 1, 50).reshape(1, 5, 5, 2))
        self.mlp = nn.Sequential(nn.Linear(2, 8), nn.ReLU(inplace=inplace), nn.Linear(8, 3))
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        bias = self.mlp(self.table).permute(0, 3, 1, 2)  # (1, 3, 5, 5)
        return (self.conv(x) + bias).mean(dim=(2, 3))


def test_gradients_of_outputs_that_do_not_depend_on_the_image():
    torch.manual_seed(0)
    model = _TableBias().eval()
    x = torch.randn(1, 3, 5, 5)
    registry = HookRegistry(model)
    for path in ("mlp", "mlp.0", "mlp.2"):
        registry.add(path, "backward")
    result = capture_run(model, registry, x)
    got = records_by_key(result, "backward")
    notes = {h.path: h.note for h in registry.handles()}
    assert "do not depend on the image" in notes["mlp"]

    reference = _TableBias(inplace=False).eval()
    reference.load_state_dict(model.state_dict())
    outputs = {}
    for path in ("mlp", "mlp.0", "mlp.2"):
        reference.get_submodule(path).register_forward_hook(lambda m, a, out, path=path: outputs.setdefault(path, out))
    logits = reference(x.clone().requires_grad_(True))
    grads = torch.autograd.grad(logits[0, logits[0].argmax()], [outputs[p] for p in ("mlp", "mlp.0", "mlp.2")])
    for path, expected in zip(("mlp", "mlp.0", "mlp.2"), grads):
        torch.testing.assert_close(got[path], expected, msg=path)

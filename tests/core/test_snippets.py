"""The hook inspector's code: the plain-PyTorch snippets, run in a fresh namespace, reproduce Hookscope's records."""

import copy

import pytest
import torch
from torch.utils.hooks import RemovableHandle

from hookscope.core.common.vocabulary import KINDS
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import FALLBACK, HookRegistry
from hookscope.core.engine.interventions import parse_edit
from hookscope.core.teaching.snippets import (
    KIND_HOOKS,
    captured_key,
    edit_snippet,
    hook_snippet,
    kind_hook,
    mix_reference_snippet,
    module_expression,
    snippet_for,
)

READS = [
    ("bn1", "forward"),  # an in-place ReLU follows: the snippet must copy
    ("layer1.0.relu", "forward"),  # runs twice per forward pass
    ("relu", "pre"),
    ("conv1", "backward"),  # a full backward hook works here
    ("bn1", "backward"),  # the fallback: a tensor hook
    ("layer1.0.relu", "backward"),  # the fallback, twice per forward pass
    ("layer2.0.conv1", "backward"),
    ("layer4.1.conv2", "tensor"),
    ("layer4.1.conv2", "forward"),
    ("layer2", "forward"),
    ("layer3.0.conv1", "forward"),
    ("layer3.0.bn1", "backward"),
    ("fc", "pre"),
    ("fc", "forward"),
    ("fc", "backward"),
    ("conv1", "grad_input"),  # a full backward hook's grad_input: the gradient at the image
    ("bn1", "grad_input"),  # the fallback: a tensor hook on the input
    ("layer1.0.relu", "grad_input"),  # in place on its input: the fallback, twice per forward pass
    ("layer2.0.conv1", "grad_input"),  # after the scale-grad-input edit there: sees grad_input × 1.6
    ("layer3.0.conv1", "tensor"),  # after the scale-grad edit there: sees the gradient × 1.6
    ("fc", "grad_input"),
]
EDITS = [
    "keep:layer1.0.conv1:7,9",
    "mix:layer2:0.7:B",
    "scale:layer2.0.conv1:0.5:1,2",
    "scale-grad-input:layer2.0.conv1:1.6",
    "scale-grad:layer3.0.conv1:1.6",
    "zero:layer4.1.conv2:3,5",
    "scale:layer4.1.bn1:1.5",
    "scale-input:fc:2",
]


def run_like_hookscope(model, x):
    """Forward, the top-1 logit, backward to the input: what capture_run does, written out."""
    xin = x.clone().requires_grad_(True)
    logits = model(xin)
    torch.autograd.backward(logits[0, logits[0].argmax()], inputs=[xin])
    return logits.detach()


@pytest.fixture(scope="module")
def small_input():
    return torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def other_input():
    return torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(4))


def registry_script(registry: HookRegistry) -> str:
    """Every live hook of ``registry`` as one script, joined from the inspector's snippets (here, not in the app: only
    this check runs the snippets of a whole registry together).

    Mix references come first (Hookscope computes them without edits), then the edits in the order their hooks
    were registered (each with ``prepend=True``, so the last one registered runs first, as in Hookscope), then
    the reading hooks.
    """
    survey = registry.survey
    infos = registry.live_hooks()
    edits = [(info, registry.edit(info.edit_id)) for info in infos if info.edit_id is not None]
    reads = [info for info in infos if info.edit_id is None]
    parts = [
        '"""Hooks registered in Hookscope, as plain PyTorch.',
        "",
        "Before running this, set `model` to the same network (in eval mode)"
        + (
            " and `others` to the other images a mix blends in, preprocessed like the input."
            if any(e.kind == "mix" for _, e in edits)
            else "."
        ),
        '"""',
        "",
        "import torch",
        "",
        'captured = {}  # what the reading hooks keep, by "KIND:PATH"',
        "",
    ]
    for info, edit in edits:
        if edit.kind == "mix":
            parts += [mix_reference_snippet(edit, info.edit_id or 0)]
    for info, edit in edits:
        calls = survey.run_of(info.path).calls if survey is not None else 1
        parts += ["", edit_snippet(edit, info.edit_id or 0, calls=max(calls, 1), with_reference=False)]
    for info in reads:
        run = survey.run_of(info.path) if survey is not None else None
        parts += ["", hook_snippet(info, run=run)]
    parts += [
        "",
        "# Run it as Hookscope does: forward, the top-1 logit, backward to the input x (1, C, H, W):",
        "#   x = x.clone().requires_grad_(True)",
        "#   logits = model(x)",
        "#   torch.autograd.backward(logits[0, logits[0].argmax()], inputs=[x])",
        "",
    ]
    return "\n".join(parts)


def test_the_whole_script_reproduces_every_record(resnet18, small_input, other_input):
    fresh = copy.deepcopy(resnet18)  # before any hook: the script gets a model without Hookscope's hooks
    registry = HookRegistry(resnet18)
    for path, kind in READS:
        registry.add(path, kind)
    for spec in EDITS:
        registry.add_edit(parse_edit(spec))
    # one edit switched off and on again: its hook is now the newest, so it runs first on its module
    first = registry.edits()[0][0]
    registry.set_edit_enabled(first, False)
    registry.set_edit_enabled(first, True)
    result = capture_run(resnet18, registry, small_input, others={"B": other_input})
    assert {h.method for h in registry.handles() if h.path == "bn1" and h.kind == "backward"} == {FALLBACK}

    script = registry_script(registry)
    assert script.count("# remove with h_") == len(registry.live_hooks())
    namespace = {"model": fresh, "others": {"B": other_input}}
    exec(compile(script, "<hookscope script>", "exec"), namespace)
    logits = run_like_hookscope(fresh, small_input)
    captured = namespace["captured"]

    assert torch.equal(logits, result.scores)
    assert len(result.records) > len(READS)
    for record in result.records:
        value = captured[captured_key(record.path, record.kind)]
        if result.survey.run_of(record.path).calls > 1:
            value = value[record.call]
        torch.testing.assert_close(value, record.tensor, rtol=0, atol=0, msg=f"{record.kind} {record.key}")


def test_each_snippet_alone_reproduces_its_capture(resnet18, small_input, hook_counts):
    fresh = copy.deepcopy(resnet18)
    registry = HookRegistry(resnet18)
    for path, kind in [
        ("bn1", "backward"),
        ("layer1.0.relu", "forward"),
        ("fc", "backward"),
        ("relu", "pre"),
        ("layer1.0.conv2", "grad_input"),
        ("layer1.0.relu", "grad_input"),
        ("fc", "tensor"),
    ]:
        registry.add(path, kind)
    result = capture_run(resnet18, registry, small_input)
    for info in registry.handles():
        namespace = {"model": fresh, "torch": torch, "captured": {}}
        exec(snippet_for(registry, info), namespace)
        run_like_hookscope(fresh, small_input)
        for name, value in namespace.items():  # as the snippet's last line says: remove with h_....remove()
            if name.startswith("h_") and isinstance(value, RemovableHandle):
                value.remove()
        assert hook_counts(fresh) == {p: (0, 0, 0, 0) for p, _ in fresh.named_modules()}
        value = namespace["captured"][captured_key(info.path, info.kind)]
        for record in result.records:
            if (record.path, record.kind) == (info.path, info.kind):
                got = value[record.call] if isinstance(value, list) else value
                assert torch.equal(got, record.tensor), record.key


def test_snippets_read_like_the_pytorch_api(resnet18, small_input):
    registry = HookRegistry(resnet18)
    registry.add("layer1", "forward")
    registry.add("bn1", "backward")
    zero = registry.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
    grad_input = registry.add_edit(parse_edit("scale-grad-input:layer4.1.conv2:1.6"))
    capture_run(resnet18, registry, small_input)
    by_path = {(h.path, h.kind): h for h in registry.live_hooks() if h.edit_id is None}

    forward = snippet_for(registry, by_path[("layer1", "forward")])
    assert "h_save_output_layer1 = model.layer1.register_forward_hook(save_output_layer1)" in forward
    assert 'captured["forward:layer1"] = output.detach().clone()' in forward
    fallback = snippet_for(registry, by_path[("bn1", "backward")])
    assert (
        "# An in-place operation after this module changes its output, so a full backward hook would raise" in fallback
    )
    assert "output.register_hook(save)" in fallback
    edit = hook_snippet(registry.edits()[0][2], registry.edit(zero))
    assert (
        'model.get_submodule("layer4.1.conv2").register_forward_hook(edit1_zero_layer4_1_conv2, prepend=True)' in edit
    )
    assert "output[:, [3, 5]] = 0" in edit and "return output" in edit
    assert "register_full_backward_hook" in hook_snippet(registry.edits()[1][2], registry.edit(grad_input))
    with pytest.raises(ValueError, match="needs its Intervention"):
        hook_snippet(registry.edits()[0][2])
    for info in registry.live_hooks():
        compile(snippet_for(registry, info), "<snippet>", "exec")


def test_module_expression():
    assert module_expression("layer1") == "model.layer1"
    assert module_expression("layer4.1.conv2") == 'model.get_submodule("layer4.1.conv2")'
    assert module_expression("") == "model"
    assert module_expression("train") == 'model.get_submodule("train")'  # a Module method, not the child


def test_the_gradient_snippets_say_which_hook_and_why(resnet18, small_input):
    registry = HookRegistry(resnet18)
    for path, kind in [("layer4.1.conv2", "tensor"), ("layer4.1.conv2", "grad_input"), ("bn1", "grad_input")]:
        registry.add(path, kind)
    capture_run(resnet18, registry, small_input)
    by_pair = {(h.path, h.kind): h for h in registry.handles()}

    grad = snippet_for(registry, by_pair[("layer4.1.conv2", "tensor")])
    assert "output.register_hook(save)" in grad and "exact where an in-place op follows" in grad
    grad_in = snippet_for(registry, by_pair[("layer4.1.conv2", "grad_input")])
    assert ".register_full_backward_hook(save_grad_input_layer4_1_conv2)" in grad_in
    assert "only a full backward hook gives it" in grad_in
    assert 'captured["grad_input:layer4.1.conv2"] = grad_input[0].detach().clone()' in grad_in
    fallback = snippet_for(registry, by_pair[("bn1", "grad_input")])  # an in-place ReLU follows bn1
    assert by_pair[("bn1", "grad_input")].method == FALLBACK
    assert "model.bn1.register_forward_pre_hook(save_input_grad_bn1)" in fallback
    assert "inputs[0].register_hook(save)" in fallback and "as a whole" in fallback

    # every kind the engine knows says which hook it registers and why, in one place
    assert set(KIND_HOOKS) == set(KINDS)
    assert kind_hook("tensor").startswith("Tensor.register_hook") and "in-place" in kind_hook("tensor")
    assert kind_hook("grad_input").startswith("register_full_backward_hook") and "only" in kind_hook("grad_input")

"""Interventions on a real ResNet-18: edits through hooks change what flows, and leave no trace once removed."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hookscope.cli import main
from hookscope.core.common.errors import HookscopeError, RunError
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import FALLBACK, FORWARD, FULL_BACKWARD, PRE, TENSOR, HookRegistry
from hookscope.core.engine.interventions import EDIT_KINDS, Intervention, parse_edit
from hookscope.core.pictures.compare import prediction_changes

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "chelsea.png"
CONV = "layer4.1.conv2"


def records(result, kind):
    return {r.key: r.tensor for r in result.of_kind(kind)}


@pytest.fixture(scope="module")
def image_tensor():
    """Smaller than a photograph, so that the many runs here stay quick (layer4 gives 4x4 maps)."""
    return torch.randn(1, 3, 112, 112, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def other_tensor():
    return torch.randn(1, 3, 112, 112, generator=torch.Generator().manual_seed(2))


# ---- the spec language -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("zero:layer4.1.conv2:3,5", Intervention("zero", CONV, channels=(3, 5))),
        ("keep:layer4.1.conv2:7", Intervention("keep", CONV, channels=(7,))),
        ("scale:layer1:0.5", Intervention("scale", "layer1", factor=0.5)),
        ("scale:layer1:2:1,4", Intervention("scale", "layer1", channels=(1, 4), factor=2.0)),
        ("scale-input:fc:2", Intervention("scale-input", "fc", factor=2.0)),
        ("scale-grad:layer4.1.conv2:1.6", Intervention("scale-grad", CONV, factor=1.6)),
        ("scale-grad-input:layer4.1.conv2:1.6", Intervention("scale-grad-input", CONV, factor=1.6)),
        ("mix:layer3:0.7:cat.png", Intervention("mix", "layer3", factor=0.7, other_image="cat.png")),
        (
            r"mix:layer3:0.25:C:\images\cat.png",
            Intervention("mix", "layer3", factor=0.25, other_image=r"C:\images\cat.png"),
        ),
    ],
)
def test_every_kind_parses_and_round_trips(spec, expected):
    edit = parse_edit(spec)
    assert edit == expected
    assert edit.spec == spec
    assert parse_edit(edit.spec) == edit
    assert edit.path in edit.describe()


def test_all_kinds_are_covered_by_the_round_trip_cases():
    assert set(EDIT_KINDS) == {"zero", "keep", "scale", "scale-input", "scale-grad", "scale-grad-input", "mix"}
    assert parse_edit("zero:layer1:5,3,5").channels == (3, 5)  # sorted, once each
    assert "Switch off channels 3, 5 of layer4.1.conv2" in parse_edit("zero:layer4.1.conv2:3,5").describe()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zero:layer1", "Edit 'zero:layer1' needs channels: zero:PATH:3,5"),
        ("zero:layer1:a", "Edit 'zero:layer1:a' has a bad channel 'a'"),
        ("zero:layer1:-1", "bad channel '-1'"),
        ("keep:layer1:", "needs channels: keep:PATH:7"),
        ("scale:layer1", "Edit 'scale:layer1' needs a factor"),
        ("scale:layer1:x", "has a bad number 'x'"),
        ("scale:layer1:nan", "has a bad number 'nan'"),
        ("scale-grad:layer1:1:2:3", "has too many parts"),
        ("mix:layer1:0.5", "needs a weight and an image: mix:PATH:0.7:OTHER_IMAGE"),
        ("mix:layer1:7:b.png", "the mix weight must be between 0 and 1"),
        ("zap:layer1:3", "Unknown edit kind 'zap'"),
        ("layer1", "is not KIND:PATH"),
        ("zero::3", "needs a module path"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(HookscopeError) as caught:
        parse_edit(spec)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# ---- channel edits -----------------------------------------------------------------------------------------
def test_switching_off_channels_zeroes_them_and_changes_the_logits(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "forward")
    registry.add("layer4.1.bn2", "forward")
    plain = capture_run(resnet18, registry, image_tensor)
    registry.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
    edited = capture_run(resnet18, registry, image_tensor)

    before, after = records(plain, "forward")[CONV], records(edited, "forward")[CONV]
    assert before[0, [3, 5]].abs().sum() > 0
    assert torch.equal(after[0, [3, 5]], torch.zeros_like(after[0, [3, 5]])), "switched-off channels are exactly 0"
    others = [c for c in range(512) if c not in (3, 5)]
    assert torch.equal(after[0, others], before[0, others])
    assert not torch.equal(edited.scores, plain.scores)
    # downstream sees the edit: bn2 of a zero channel is its bias-like constant, the same everywhere
    bn2 = records(edited, "forward")["layer4.1.bn2"][0, 3]
    assert torch.all(bn2 == bn2.flatten()[0])


def test_keep_only_one_channel(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "forward")
    plain = records(capture_run(resnet18, registry, image_tensor), "forward")[CONV]
    registry.add_edit(parse_edit("keep:layer4.1.conv2:7"))
    kept = records(capture_run(resnet18, registry, image_tensor), "forward")[CONV]
    assert torch.equal(kept[0, 7], plain[0, 7])
    assert kept[0, :7].abs().sum() == 0 and kept[0, 8:].abs().sum() == 0


def test_scale_some_channels_and_the_whole_output(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("layer1.0.conv1", "forward")
    plain = records(capture_run(resnet18, registry, image_tensor), "forward")["layer1.0.conv1"]
    some = registry.add_edit(parse_edit("scale:layer1.0.conv1:3:2,4"))
    scaled = records(capture_run(resnet18, registry, image_tensor), "forward")["layer1.0.conv1"]
    assert torch.equal(scaled[0, [2, 4]], plain[0, [2, 4]] * 3.0)
    assert torch.equal(scaled[0, 5:], plain[0, 5:])
    registry.remove_edit(some)
    registry.add_edit(parse_edit("scale:layer1.0.conv1:0.5"))
    half = records(capture_run(resnet18, registry, image_tensor), "forward")["layer1.0.conv1"]
    assert torch.equal(half, plain * 0.5)


def test_channel_out_of_range_is_a_clear_error_and_leaves_only_the_ticks(resnet18, image_tensor, hook_counts):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "forward")
    registry.add_edit(parse_edit("zero:layer4.1.conv2:3,600"))  # no run yet: the registry cannot know
    with_hooks = hook_counts(resnet18)
    with pytest.raises(RunError, match=r"^layer4.1.conv2 has 512 channels; channel 600 does not exist.$"):
        capture_run(resnet18, registry, image_tensor)
    assert hook_counts(resnet18) == with_hooks
    registry.clear()
    capture_run(resnet18, registry, image_tensor)  # now the registry has surveyed the model
    with pytest.raises(RunError, match="channels 600, 700 do not exist"):
        registry.add_edit(parse_edit("zero:layer4.1.conv2:600,700"))
    with pytest.raises(HookscopeError, match="no module 'layer9'"):
        registry.add_edit(parse_edit("zero:layer9:1"))
    assert registry.edits() == []


# ---- removing, disabling, the inspector's view -------------------------------------------------------------
def test_removing_an_edit_restores_the_original_bit_for_bit(resnet18, image_tensor, hook_counts):
    registry = HookRegistry(resnet18)
    for kind in ("forward", "backward", "tensor"):
        registry.add(CONV, kind)
    registry.add("layer3", "forward")
    before = capture_run(resnet18, registry, image_tensor)
    ticks_only = hook_counts(resnet18)
    edit_id = registry.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
    capture_run(resnet18, registry, image_tensor)
    registry.remove_edit(edit_id)
    assert hook_counts(resnet18) == ticks_only
    after = capture_run(resnet18, registry, image_tensor)
    assert torch.equal(after.scores, before.scores)
    assert [(r.kind, r.key) for r in after.records] == [(r.kind, r.key) for r in before.records]
    for a, b in zip(after.records, before.records):
        assert torch.equal(a.tensor, b.tensor), a.key


def test_removing_one_of_two_edits_leaves_the_other_and_the_captures(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "forward")
    module = resnet18.get_submodule(CONV)
    capture_keys = list(module._forward_hooks)
    zero = registry.add_edit(parse_edit("zero:layer4.1.conv2:3"))
    grad = registry.add_edit(parse_edit("scale-grad:layer4.1.conv2:1.6"))
    keys = list(module._forward_hooks)
    assert len(keys) == 3 and keys[-1:] == capture_keys, "edits are prepended: they run before the capture"
    zero_key = next(
        k
        for k in keys
        if k not in capture_keys and module._forward_hooks[k].__qualname__.startswith("forward_edit_hook")
    )
    registry.remove_edit(zero)
    assert list(module._forward_hooks) == [k for k in keys if k != zero_key]
    assert [e[0] for e in registry.edits()] == [grad]
    result = capture_run(resnet18, registry, image_tensor)
    assert records(result, "forward")[CONV][0, 3].abs().sum() > 0, "the zero edit is gone"


def test_disabled_edit_has_no_handle_and_no_effect(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "forward")
    plain = capture_run(resnet18, registry, image_tensor)
    module = resnet18.get_submodule(CONV)
    edit_id = registry.add_edit(parse_edit("zero:layer4.1.conv2:3"))
    assert len(module._forward_hooks) == 2 and registry.handle_count() == 2
    registry.set_edit_enabled(edit_id, False)
    assert len(module._forward_hooks) == 1 and registry.handle_count() == 1
    assert [i.reads_or_edits for i in registry.live_hooks()] == ["reads"]
    (listed,) = registry.edits()
    assert listed[0] == edit_id and listed[1].enabled is False
    assert torch.equal(capture_run(resnet18, registry, image_tensor).scores, plain.scores)
    registry.set_edit_enabled(edit_id, True)
    assert len(module._forward_hooks) == 2
    assert records(capture_run(resnet18, registry, image_tensor), "forward")[CONV][0, 3].abs().sum() == 0


def test_live_hooks_list_reads_and_edits_and_clear_removes_all(resnet18, image_tensor, hook_counts):
    bare = hook_counts(resnet18)
    registry = HookRegistry(resnet18)
    registry.add("fc", "forward")
    registry.add("bn1", "backward")
    registry.add_edit(parse_edit("scale-input:fc:2"))
    registry.add_edit(parse_edit("scale-grad:layer3:1.6"))
    registry.add_edit(parse_edit("scale-grad-input:layer4.1.conv2:1.6"))
    registry.add_edit(parse_edit("keep:layer1.0.conv1:7"))
    hooks = registry.live_hooks()
    assert [(h.path, h.method, h.reads_or_edits) for h in hooks] == [
        ("fc", PRE, "edits"),
        ("layer3", TENSOR, "edits"),
        (CONV, FULL_BACKWARD, "edits"),
        ("layer1.0.conv1", FORWARD, "edits"),
        ("fc", FORWARD, "reads"),
        ("bn1", FULL_BACKWARD, "reads"),  # no run yet: the survey has not moved it to the fallback
    ]
    assert hooks[0].label == "Scale fc's input by 2 (forward pre-hook)"
    assert registry.handle_count() == 6
    registry.remove_hook(hooks[1])
    assert registry.handle_count() == 5
    registry.clear()
    assert registry.edits() == [] and registry.live_hooks() == []
    assert hook_counts(resnet18) == bare


# ---- inputs and gradients ----------------------------------------------------------------------------------
def test_scale_input_through_a_pre_hook(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add("fc", "pre")
    registry.add("fc", "forward")
    plain = capture_run(resnet18, registry, image_tensor)
    registry.add_edit(parse_edit("scale-input:fc:2"))
    scaled = capture_run(resnet18, registry, image_tensor)
    x = records(plain, "pre")["fc"]
    assert torch.equal(records(scaled, "pre")["fc"], x * 2), "the capture pre-hook sees the edited input"
    w, b = resnet18.fc.weight.detach(), resnet18.fc.bias.detach()
    torch.testing.assert_close(
        records(scaled, "forward")["fc"], torch.nn.functional.linear(2 * x, w, b), rtol=0, atol=0
    )
    assert not torch.allclose(records(scaled, "forward")["fc"], 2 * records(plain, "forward")["fc"])  # the bias


def _relative_close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))


def test_scale_grad_multiplies_the_gradient_by_exactly_the_factor(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "tensor")
    registry.add("layer4.1.conv1", "backward")
    registry.add("layer4.1.bn2", "backward")
    plain = capture_run(resnet18, registry, image_tensor)
    registry.add_edit(parse_edit("scale-grad:layer4.1.conv2:1.6"))
    scaled = capture_run(resnet18, registry, image_tensor)
    assert torch.equal(scaled.scores, plain.scores), "a gradient edit leaves the forward pass alone"
    # at the edited tensor: exactly the factor
    assert torch.equal(records(scaled, "tensor")[CONV], records(plain, "tensor")[CONV] * 1.6)
    # downstream in the backward pass (conv1 feeds conv2 through bn1 and relu, with no other path): 1.6 times
    _relative_close(records(scaled, "backward")["layer4.1.conv1"], records(plain, "backward")["layer4.1.conv1"] * 1.6)
    # upstream of the edit nothing changes
    assert torch.equal(records(scaled, "backward")["layer4.1.bn2"], records(plain, "backward")["layer4.1.bn2"])


def test_scale_grad_input_through_a_full_backward_hook(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    registry.add(CONV, "backward")
    registry.add("layer4.1.conv1", "backward")
    plain = capture_run(resnet18, registry, image_tensor)
    registry.add_edit(parse_edit("scale-grad-input:layer4.1.conv2:1.6"))
    scaled = capture_run(resnet18, registry, image_tensor)
    assert torch.equal(records(scaled, "backward")[CONV], records(plain, "backward")[CONV]), "grad_output is untouched"
    _relative_close(records(scaled, "backward")["layer4.1.conv1"], records(plain, "backward")["layer4.1.conv1"] * 1.6)
    assert not torch.equal(scaled.input_grad, plain.input_grad)


def test_scale_grad_input_where_a_full_backward_hook_cannot_work(resnet18, image_tensor, hook_counts):
    registry = HookRegistry(resnet18)
    registry.add_edit(parse_edit("scale-grad-input:bn1:1.6"))  # before any run the registry cannot tell
    with pytest.raises(RunError) as caught:
        capture_run(resnet18, registry, image_tensor)
    message = str(caught.value)
    assert "bn1" in message and "in-place" in message and "scale-grad:bn1:1.6" in message and "\n" not in message
    registry.clear()
    assert hook_counts(resnet18) == {p: (0, 0, 0, 0) for p, _ in resnet18.named_modules()}
    capture_run(resnet18, registry, image_tensor)
    with pytest.raises(RunError, match="use scale-grad:bn1:1.6"):
        registry.add_edit(parse_edit("scale-grad-input:bn1:1.6"))
    with pytest.raises(RunError, match="changes its input in place"):
        registry.add_edit(parse_edit("scale-grad-input:relu:2"))


def test_edits_that_change_the_network_are_surveyed_again(resnet18, image_tensor):
    """Scaling relu's input gives relu a new tensor to overwrite, so bn1's output stays intact: a full backward
    hook works on bn1 while the edit is on, and the fallback is back (with no error) once it is removed."""
    registry = HookRegistry(resnet18)
    registry.add("bn1", "backward")
    capture_run(resnet18, registry, image_tensor)
    assert [h.method for h in registry.handles()] == [FALLBACK]
    edit_id = registry.add_edit(parse_edit("scale-input:relu:2"))
    capture_run(resnet18, registry, image_tensor)
    assert [h.method for h in registry.handles()] == [FULL_BACKWARD]
    registry.remove_edit(edit_id)
    capture_run(resnet18, registry, image_tensor)
    (info,) = registry.handles()
    assert info.method == FALLBACK and "raised during the run" not in info.note


# ---- mixing with a second image ----------------------------------------------------------------------------
def test_mix_blends_with_the_other_images_output(resnet18, image_tensor, other_tensor, hook_counts):
    registry = HookRegistry(resnet18)
    registry.add("layer3", "forward")
    registry.add("bn1", "forward")
    a = records(capture_run(resnet18, registry, image_tensor), "forward")
    b = records(capture_run(resnet18, registry, other_tensor), "forward")
    ticks_only = hook_counts(resnet18)
    others = {"B": other_tensor}

    one = registry.add_edit(parse_edit("mix:layer3:1:B"))
    assert torch.equal(
        records(capture_run(resnet18, registry, image_tensor, others=others), "forward")["layer3"], a["layer3"]
    )
    registry.remove_edit(one)
    zero = registry.add_edit(parse_edit("mix:layer3:0:B"))
    mixed = capture_run(resnet18, registry, image_tensor, others=others)
    assert torch.equal(records(mixed, "forward")["layer3"], b["layer3"])
    assert torch.equal(records(mixed, "forward")["bn1"], a["bn1"]), "upstream of the mix is image A"
    registry.remove_edit(zero)
    # bn1 is followed by an in-place ReLU: the other image's output must be kept as a copy
    registry.add_edit(parse_edit("mix:bn1:0.7:B"))
    mixed = records(capture_run(resnet18, registry, image_tensor, others=others), "forward")["bn1"]
    torch.testing.assert_close(mixed, 0.7 * a["bn1"] + 0.3 * b["bn1"])
    assert mixed.min() < 0
    assert hook_counts(resnet18) == {**ticks_only, "bn1": (2, 0, 0, 0)}, "the reference pass's hooks are gone"

    with pytest.raises(RunError, match="needs the image 'B', which was not given"):
        capture_run(resnet18, registry, image_tensor)
    with pytest.raises(RunError, match="mix needs images of the same size"):
        capture_run(resnet18, registry, image_tensor, others={"B": torch.randn(1, 3, 64, 64)})


# ---- the effect on the predictions -------------------------------------------------------------------------
def test_baseline_scores_give_the_change_of_each_prediction(resnet18, image_tensor):
    registry = HookRegistry(resnet18)
    plain = capture_run(resnet18, registry, image_tensor, baseline=True)
    assert plain.baseline_scores is None, "no edits, nothing to compare"
    registry.add_edit(parse_edit("zero:layer4.1.conv2:" + ",".join(str(c) for c in range(0, 512, 2))))
    edited = capture_run(resnet18, registry, image_tensor, baseline=True)
    assert torch.equal(edited.baseline_scores, plain.scores)
    changes = prediction_changes(edited)
    assert [c.index for c in changes] == [p.index for p in edited.top5]
    old = torch.softmax(plain.scores[0], dim=0)
    for change, prediction in zip(changes, edited.top5):
        assert change.probability == prediction.probability
        assert change.before == pytest.approx(float(old[change.index]))
        assert change.delta == pytest.approx(prediction.probability - float(old[change.index]))
    assert any(abs(c.delta) > 1e-6 for c in changes)


# ---- the command line --------------------------------------------------------------------------------------
def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hookscope", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_cli_edit_zeroes_channels_in_the_export(tmp_path):
    out = tmp_path / "out"
    done = hookscope(
        "export",
        "--image",
        str(SAMPLE),
        "--layers",
        "layer4.1.conv2",
        "--hooks",
        "forward",
        "--no-png",
        "--edit",
        "zero:layer4.1.conv2:3,5",
        "--edit",
        "mix:layer4.1.conv2:1:" + str(SAMPLE),
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    activations = np.load(out / "activations.npz")[CONV]
    assert activations.shape == (1, 512, 7, 7)
    assert not activations[0, [3, 5]].any() and activations[0, 4].any()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["edits"] == ["zero:layer4.1.conv2:3,5", "mix:layer4.1.conv2:1:" + str(SAMPLE)]
    assert len(manifest["prediction_changes"]) == 5


def test_cli_bad_edit_is_exit_2_with_one_line(tmp_path, capsys):
    code = main(["export", "--image", str(SAMPLE), "--edit", "zero:layer4.1.conv2", "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == "hookscope: error: Edit 'zero:layer4.1.conv2' needs channels: zero:PATH:3,5\n"
    assert not any(tmp_path.iterdir()), "nothing was written"


def test_other_images_are_read_once_for_the_enabled_mix_edits(resnet18_loaded, tmp_path):
    from dataclasses import replace

    from PIL import Image

    from hookscope.core.common.errors import ImageError
    from hookscope.core.common.resources import sample_image
    from hookscope.core.engine.interventions import other_images
    from hookscope.core.models.images import read_image

    preprocess = resnet18_loaded.preprocess
    path = str(sample_image())
    edits = [
        parse_edit(f"mix:layer1:0.5:{path}"),
        parse_edit(f"mix:layer2:0.25:{path}"),  # the same image: read once
        parse_edit("zero:layer3:1"),
        replace(parse_edit(f"mix:layer4:0.5:{tmp_path / 'off.png'}"), enabled=False),  # off: not read at all
    ]
    others = other_images(edits, preprocess)
    assert list(others) == [path]
    assert torch.equal(others[path], preprocess.to_tensor(read_image(path)))
    Image.new("RGB", (8, 8)).save(tmp_path / "small.png")
    assert other_images([parse_edit(f"mix:fc:0.5:{tmp_path / 'small.png'}")], preprocess)[
        str(tmp_path / "small.png")
    ].shape == (1, 3, 224, 224)
    with pytest.raises(ImageError, match="missing.png"):
        other_images([parse_edit(f"mix:layer1:0.5:{tmp_path / 'missing.png'}")], preprocess)
    with pytest.raises(HookscopeError, match="needs the model's preprocessing"):
        other_images(edits[:1], None)

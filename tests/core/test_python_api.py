"""``import hookscope``: ``hookscope.capture`` on models the caller holds, the one way every front end runs an image,
and the model given back as it was lent."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch import nn

import hookscope
from hookscope.core.common.resources import sample_image
from hookscope.core.common.vocabulary import HOOK_WORDS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(sample_image())


def _hook_ids(model: nn.Module) -> dict[str, tuple]:
    """Every hook dict of every module, by id: what a capture must leave as it found it."""
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return {path: tuple(tuple(getattr(m, n).keys()) for n in names) for path, m in model.named_modules()}


def _resnet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return torchvision.models.resnet18(weights=None).eval()


class TinyNet(nn.Module):
    """A model of the caller's own, defined here: no file, no trust question."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.5)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.pool(self.relu(self.bn(self.conv(x)))).flatten(1)))


def test_capture_holds_what_each_hook_word_saw_and_leaves_no_hook() -> None:
    model = _resnet()
    before = _hook_ids(model)
    cap = hookscope.capture(
        model,
        SAMPLE,
        hooks={"layer1": ["act", "grad"], "fc": ["in"], "layer2.0.conv1": "grad_in"},
        preprocess=torchvision.models.ResNet18_Weights.DEFAULT,
    )
    assert _hook_ids(model) == before  # nothing stays on the model
    assert set(cap.activations) == {"layer1"} and set(cap.gradients) == {"layer1"}
    assert cap.activations["layer1"].shape == (1, 64, 56, 56)
    assert cap.gradients["layer1"].shape == (1, 64, 56, 56) and cap.gradients["layer1"].abs().sum() > 0
    assert cap.inputs["fc"].shape == (1, 512)
    assert cap.grad_inputs["layer2.0.conv1"].shape == (1, 64, 56, 56)
    # The records are what a plain forward pass computes: layer1's output, fc's input.
    with torch.no_grad():
        x = cap.input
        stem = model.maxpool(model.relu(model.bn1(model.conv1(x))))
        assert torch.equal(model.layer1(stem), cap.activations["layer1"])
    assert (
        len(cap.predictions) == 5
        and cap.predictions[0].label in torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"]
    )
    assert cap.objective == f"top-1 logit (class {cap.predictions[0].index})"
    with torch.no_grad():
        logits = model(cap.input)
    assert cap.objective_value == pytest.approx(float(logits[0, cap.predictions[0].index]), rel=1e-5)
    assert cap.input_gradient is not None and cap.input_gradient.shape == cap.input.shape


def test_a_tensor_is_fed_exactly_as_given_and_the_model_comes_back_as_it_was_lent() -> None:
    torch.manual_seed(1)
    model = TinyNet().train()  # training mode: batch norm would update its statistics, dropout would drop
    model.drop.eval()  # a mix of modes, kept per module
    seen: list[torch.Tensor] = []
    handle = model.conv.register_forward_hook(lambda m, i, o: seen.append(o))  # the caller's own hook
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    hooks_before = _hook_ids(model)
    x = torch.rand(3, 16, 16)
    cap = hookscope.capture(model, x, hooks={"conv": ["act", "grad"], "fc": ["in", "act"]})
    assert torch.equal(cap.input, x.unsqueeze(0))  # no preprocessing of a tensor
    assert not x.requires_grad and x.grad is None
    assert [m.training for m in model.modules()] == modes
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())  # batch norm's statistics too
    assert _hook_ids(model) == hooks_before  # the caller's hook is still there, Hookscope's are gone
    assert torch.equal(seen[-1], cap.activations["conv"])  # and it ran during the capture
    # The capture ran in eval mode: the same as the caller's own eval pass.
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x.unsqueeze(0)), cap.activations["fc"])
    handle.remove()
    assert cap.predictions and cap.predictions[0].label == f"class {cap.predictions[0].index}"  # no names given


def test_the_model_comes_back_on_its_device_after_a_run_on_another() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a second device (CUDA): the CPU is the only one here")
    model = TinyNet().eval()
    hookscope.capture(model, torch.rand(3, 8, 8), hooks=["conv"], device="cuda")
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_the_lent_model_is_given_back_when_the_run_fails() -> None:
    model = TinyNet().train()
    hooks_before = _hook_ids(model)
    with pytest.raises(hookscope.HookscopeError) as raised:
        hookscope.capture(model, torch.rand(1, 5, 5), hooks={"conv": ["act", "grad"]})  # 1 channel, the model takes 3
    assert "The model raised" in str(raised.value) or "forward" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert model.training and _hook_ids(model) == hooks_before


@pytest.mark.parametrize(
    ("hooks", "words"),
    [
        ({"nope": ["act"]}, "The model has no module named 'nope'."),
        ({"conv": ["activations"]}, f"Hook words are {', '.join(HOOK_WORDS)}; got 'activations' for 'conv'."),
        ({"conv": []}, f"Hook words are {', '.join(HOOK_WORDS)}; got none for 'conv'."),
    ],
)
def test_bad_hooks_raise_one_line_and_leave_no_hook(hooks, words) -> None:
    model = TinyNet()
    before = _hook_ids(model)
    with pytest.raises(hookscope.HookscopeError, match="^" + words.replace("(", r"\(").replace(")", r"\)") + "$"):
        hookscope.capture(model, torch.rand(3, 8, 8), hooks=hooks)
    assert _hook_ids(model) == before


def test_bad_images_raise_one_line() -> None:
    model = TinyNet()
    for image, words in (
        (torch.rand(2, 3, 8, 8), "A tensor image is (C, H, W) or (1, C, H, W)"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), "A tensor image holds floating-point values"),
        (42, "An image is a file path, a PIL image or a tensor"),
        ("/no/such/picture.png", "picture.png"),
    ):
        with pytest.raises(hookscope.HookscopeError, match=words.replace("(", r"\(").replace(")", r"\)")):
            hookscope.capture(model, image, hooks=["conv"])
    with pytest.raises(hookscope.HookscopeError, match="torch.nn.Module; got str"):
        hookscope.capture("resnet18", torch.rand(3, 8, 8))


def test_the_unknown_module_is_the_same_line_the_command_line_prints(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--model", "resnet18", "--weights", "none", "--image", SAMPLE,
         "--layers", "nope", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 2
    with pytest.raises(hookscope.HookscopeError) as raised:
        hookscope.capture(_resnet(), SAMPLE, hooks={"nope": ["act"]})
    assert done.stderr.strip() == f"hookscope: error: {raised.value}"


def test_save_writes_what_export_writes_bit_for_bit(tmp_path) -> None:
    """The same model (resnet18, random weights of seed 0), image, hooks and target: ``hookscope export`` and
    ``Capture.save`` write the same files, the same arrays and the same records in the manifest."""
    out = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--model", "resnet18", "--weights", "none", "--seed", "0",
         "--image", SAMPLE, "--layers", "layer1,layer4", "--hooks", "act,grad", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cap = hookscope.capture(
        _resnet(0), SAMPLE, hooks={"layer1": ["act", "grad"], "layer4": ["act", "grad"]},
        preprocess=torchvision.models.ResNet18_Weights.DEFAULT,
    )  # fmt: skip
    saved = cap.save(tmp_path / "api")
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in out.iterdir())
    for archive in ("activations.npz", "gradients.npz"):
        with np.load(out / archive) as a, np.load(saved / archive) as b:
            assert sorted(a.files) == sorted(b.files) == ["layer1", "layer4"]
            for key in a.files:
                assert np.array_equal(a[key], b[key]), (archive, key)
    cli, api = (json.loads((folder / "manifest.json").read_text()) for folder in (out, saved))
    for key in ("target", "prediction_top5", "modules", "hook_kinds", "archives", "preprocessing", "input_shape"):
        assert api[key] == cli[key], key
    assert api["model"]["source"] == "object" and api["model"]["name"] == "ResNet"


def test_one_way_to_run_an_image(tmp_path) -> None:
    """Nothing but the engine's run (engine/run.py) calls capture_run: the window, export, live, batches, lessons, benchmarks
    and hookscope.capture all run an image through run_image."""
    callers = [
        path.relative_to(ROOT / "app").as_posix()
        for path in (ROOT / "app" / "hookscope").rglob("*.py")
        if "capture_run(" in path.read_text().replace("``capture_run(", "")
    ]
    assert sorted(callers) == ["hookscope/core/engine/capture.py", "hookscope/core/engine/run.py"]


def test_export_video_with_a_similarity_target(tmp_path) -> None:
    """``export --video --target similar:IMG`` gets the reference embedding the other paths compute (it failed
    before: the video path skipped it)."""
    from tests.video_files import write_video

    video = write_video(tmp_path / "clip.avi", frames=3)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--model", "resnet18", "--weights", "none", "--video",
         str(video), "--frames", "0:2", "--layers", "layer4", "--hooks", "act,grad", "--target", f"similar:{SAMPLE}",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "frame-000000" / "manifest.json").read_text())
    assert manifest["target"]["description"] == f"cosine similarity to {SAMPLE}"
    with np.load(out / "frame-000001" / "gradients.npz") as arrays:
        assert np.abs(arrays["layer4"]).sum() > 0


def test_live_and_capture_give_the_same_records(tmp_path) -> None:
    """A frame through ``hookscope live``'s loop and the same frame through ``hookscope.capture``: bit-identical."""
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.live.runner import frame_input, live_run
    from hookscope.core.live.video import open_video
    from hookscope.core.models.catalogue import load_model
    from tests.video_files import write_video

    loaded = load_model("resnet18", "none", seed=0)
    video = write_video(tmp_path / "clip.avi", frames=2, size=(96, 64))
    seen = []

    def register(registry: HookRegistry) -> None:
        registry.add("layer2", "forward")
        registry.add("layer2", "tensor")

    live_run(loaded, open_video(video), register, frames=1, paced=False, bare_runs=1,
             on_result=lambda frame, result: seen.append((frame_input(loaded, frame), result)))  # fmt: skip
    x, result = seen[0]
    cap = hookscope.capture(loaded.module, x, hooks={"layer2": ["act", "grad"]}, categories=loaded.categories)
    assert torch.equal(cap.activations["layer2"], next(r.tensor for r in result.records if r.kind == "forward"))
    assert torch.equal(cap.gradients["layer2"], next(r.tensor for r in result.records if r.kind == "tensor"))
    assert [p.index for p in cap.predictions] == [p.index for p in result.top5]


def test_a_capture_and_its_records_show_as_mosaics_in_jupyter() -> None:
    cap = hookscope.capture(TinyNet(), torch.rand(3, 12, 12), hooks={"conv": ["act", "grad"]})
    record = cap.record("conv", "grad")
    picture = record.picture()
    assert picture.dtype == np.uint8 and picture.shape[2] == 3
    shown = np.asarray(Image.open(io.BytesIO(record._repr_png_())))
    factor = shown.shape[1] // picture.shape[1]
    assert factor > 1 and np.array_equal(shown[::factor, ::factor], picture)  # enlarged by whole pixels, unchanged
    html = cap._repr_html_()
    assert html.count("<img") == 2 and "conv: Gradients (1, 4, 12, 12)" in html
    assert cap._repr_png_() == cap.records[0]._repr_png_()
    with pytest.raises(hookscope.HookscopeError, match="no 'in' record of 'conv'"):
        cap.record("conv", "in")


def test_installing_adds_one_import_name_and_leaves_a_users_app_alone(tmp_path) -> None:
    """A project with its own ``app`` package: from inside it, hookscope imports, the command runs, and ``import
    app`` finds the project's own."""
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("WHO = 'the user'\n")
    code = (
        "import app, hookscope, torch\n"
        "cap = hookscope.capture(torch.nn.Conv2d(3, 2, 3), torch.rand(3, 8, 8), hooks={'': ['act']})\n"
        "print(app.WHO, app.__file__, sorted(cap.activations))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["the", "user", str(project / "app" / "__init__.py"), "['(model)']"]
    command = Path(sys.executable).with_name("hookscope")
    helped = subprocess.run([str(command), "--help"], cwd=project, capture_output=True, text=True, env=env, timeout=600)
    assert helped.returncode == 0 and "usage: hookscope" in helped.stdout
    # The installed distribution names one top-level package.
    from importlib.metadata import distribution

    top = distribution("hookscope").read_text("top_level.txt")
    assert top is not None and top.split() == ["hookscope"]


def test_a_second_capture_runs_the_model_once_and_a_changed_model_is_surveyed_anew() -> None:
    """The first capture of a model surveys it (one more forward pass); later ones reuse the survey while the
    model's modules are the same, and survey again when one was replaced."""
    model = TinyNet().eval()
    calls: list[int] = []
    model.fc.register_forward_hook(lambda m, i, o: calls.append(1))
    x = torch.rand(3, 8, 8)
    first = hookscope.capture(model, x, hooks=["conv"])
    assert len(calls) == 2  # the survey and the run
    second = hookscope.capture(model, x, hooks=["conv"])
    assert len(calls) == 3 and torch.equal(first.activations["conv"], second.activations["conv"])
    model.relu = nn.ReLU()  # not in place any more: the survey must say so
    hookscope.capture(model, x, hooks=["bn"])
    assert len(calls) == 5
    hookscope.capture(model, torch.rand(3, 10, 10), hooks=["bn"])  # another input shape: surveyed again
    assert len(calls) == 7

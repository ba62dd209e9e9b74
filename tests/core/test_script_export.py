"""``hookscope export ... --script OUT.py`` writes a script that really runs (issue 13, item 7).

The generated file is run in a fresh Python process (``sys.executable``), with nothing of Hookscope imported, and
what it saves with ``--save`` is compared with the export's own ``.npy``/``.npz`` files: the same keys, every
value within 1e-6. ResNet-18 with random weights (seed 3), every hook kind on modules where the full backward hook
works and where it falls back to a tensor hook, a module that runs twice, and edits of every kind; then a model
file (``model.py:build`` with a weights file) whose output is a dict with ``logits``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.cli import main
from hookscope.core.common.vocabulary import TERMS

ARCHIVES = tuple(terms.files for terms in TERMS)  # the export's archives, named by the vocabulary
RUNNER = (
    "import runpy, sys\n"
    "script, *args = sys.argv[1:]\n"
    "sys.argv = [script, *args]\n"
    "runpy.run_path(script, run_name='__main__')\n"
    "hookscope = sorted(m for m in sys.modules if m == 'hookscope' or m.startswith('hookscope.'))\n"
    "sys.exit(f'the script imported Hookscope: {hookscope}' if hookscope else 0)\n"
)


def _picture(path: Path, seed: int, size: tuple[int, int]) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def _exported(folder: Path) -> dict[str, np.ndarray]:
    arrays = {"input": np.load(folder / "input.npy")}
    if (folder / "input_grad.npy").exists():
        arrays["input_grad"] = np.load(folder / "input_grad.npy")
    for stem in ARCHIVES:
        if (folder / f"{stem}.npz").exists():
            with np.load(folder / f"{stem}.npz") as archive:
                arrays.update({f"{stem}/{key}": archive[key] for key in archive.files})
    return arrays


def _run_script(script: Path, saved: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(script), "--save", str(saved), *extra],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _compare(saved: Path, expected: dict[str, np.ndarray]) -> float:
    with np.load(saved) as archive:
        got = {key: archive[key] for key in archive.files}
    assert sorted(got) == sorted(expected)
    worst = 0.0
    for key, value in expected.items():
        assert got[key].shape == value.shape, key
        worst = max(worst, float(np.abs(got[key].astype(np.float64) - value.astype(np.float64)).max()))
    return worst


def test_the_script_of_an_export_reproduces_it_in_a_fresh_process(tmp_path, capsys):
    image = _picture(tmp_path / "photo.png", 1, (160, 120))
    other = _picture(tmp_path / "other.png", 2, (120, 160))
    out, script = tmp_path / "out", tmp_path / "redo.py"
    layers = "conv1,bn1,layer1.0.relu,layer2.0,layer3.0.conv1,layer4.1.conv2,fc"
    edits = [
        "zero:layer1.0.conv1:3,5",
        "keep:layer3.1.conv2:1,2,3",
        "scale:layer2.1.bn2:0.5:0,1",
        "scale:avgpool:1.25",
        "scale-input:fc:2",
        "scale-grad:layer3.0.conv1:1.6",
        "scale-grad-input:layer4.1.conv2:1.5",
        f"mix:layer2:0.7:{other}",
    ]
    argv = [
        "export",
        "--model",
        "resnet18",
        "--weights",
        "none",
        "--seed",
        "3",
        "--image",
        str(image),
        "--layers",
        layers,
        "--hooks",
        "act,in,grad_out,grad",
        "--no-png",
        "--out",
        str(out),
        "--script",
        str(script),
    ]
    for spec in edits:
        argv += ["--edit", spec]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"script that redoes the run of {image} in plain PyTorch: {script}" in err

    text = script.read_text()
    assert "torch.manual_seed(SEED)" in text and "SEED = 3" in text and repr(str(image)) in text
    assert "register_full_backward_hook(save_grad_output('conv1'" in text  # where the full backward hook works
    assert "register_forward_hook(save_output_grad('bn1', 'backward'" in text  # where it falls back
    assert text.count("prepend=True)") == len(edits)
    assert "import hookscope" not in text and "from app" not in text
    compile(text, str(script), "exec")

    done = _run_script(script, tmp_path / "captures.npz", tmp_path)
    expected = _exported(out)
    assert len(expected) == 7 * 4 + 4 + 2  # 7 modules x 4 kinds, layer1.0.relu's second call, input, input_grad
    assert {"activations/layer1.0.relu#1", "output_gradients/bn1", "inputs/fc", "gradients/layer2.0"} <= set(expected)
    assert _compare(tmp_path / "captures.npz", expected) <= 1e-6

    # One line per capture: key, shape, sum; the target line first.
    manifest = json.loads((out / "manifest.json").read_text())
    lines = done.stdout.splitlines()
    assert lines[0].startswith(manifest["target"]["description"])
    captures = [line for line in lines if "  sum=" in line]
    assert len(captures) == len(expected) - 2
    key, shape, total = captures[0].split("  ")
    assert shape == str(tuple(expected[key].shape))
    assert float(total.removeprefix("sum=")) == pytest.approx(float(expected[key].astype(np.float64).sum()), rel=1e-6)


MODEL_FILE = '''
import torch
from torch import nn


class Tiny(nn.Module):
    """A dict output with logits, as transformers' models give."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 6, 3, stride=2), nn.ReLU(inplace=True), nn.Conv2d(6, 8, 3))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        features = self.features(x)
        return {"logits": self.head(self.pool(features).flatten(1)), "features": features}


def build():
    return Tiny()
'''


def test_a_model_file_with_a_weights_file_and_a_class_target(tmp_path, capsys):
    (tmp_path / "models").mkdir()
    source = tmp_path / "models" / "tiny.py"
    source.write_text(MODEL_FILE)
    sys.path.insert(0, str(source.parent))
    try:
        import tiny  # noqa: PLC0415  (the file the test wrote)

        torch.manual_seed(11)
        torch.save(tiny.build().state_dict(), tmp_path / "tiny.pt")  # weights that differ from the seed's
    finally:
        sys.path.remove(str(source.parent))
        sys.modules.pop("tiny", None)
    image = _picture(tmp_path / "photo.png", 3, (90, 70))
    out, script = tmp_path / "out", tmp_path / "redo.py"
    assert (
        main(
            [
                "export",
                "--model-file",
                f"{source}:build",
                "--trust",
                "--weights",
                str(tmp_path / "tiny.pt"),
                "--image",
                str(image),
                "--layers",
                "features.0,features.1,features.2,head",
                "--target",
                "3",
                "--hooks",
                "act,in,grad_out,grad",
                "--edit",
                "scale:features.2:0.5",
                "--no-png",
                "--out",
                str(out),
                "--script",
                str(script),
            ]
        )
        == 0
    )
    capsys.readouterr()
    text = script.read_text()
    assert f"MODEL_FILE = {str(source)!r}" in text and f"load_weights(model, {str(tmp_path / 'tiny.pt')!r})" in text
    assert "TARGET = 3" in text
    done = _run_script(script, tmp_path / "captures.npz", tmp_path)
    assert done.stdout.splitlines()[0].startswith("logit of class 3")
    assert _compare(tmp_path / "captures.npz", _exported(out)) <= 1e-6


def test_script_errors_are_one_line(tmp_path, capsys):
    image = _picture(tmp_path / "photo.png", 1, (40, 40))
    assert main(["export", "--image", str(image), "--script", str(tmp_path / "nowhere" / "x.py")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"hookscope: error: Cannot write the script to '{tmp_path / 'nowhere' / 'x.py'}': the folder "
        f"'{tmp_path / 'nowhere'}' does not exist."
    )
    assert main(["export", "--images", str(tmp_path), "--script", str(tmp_path / "x.py")]) == 2
    assert capsys.readouterr().err.strip() == (
        "hookscope: error: --script goes with --image or --session (a script redoes one image's run)."
    )
    assert not (tmp_path / "x.py").exists()


def test_a_session_with_its_own_preprocessing(tmp_path, capsys):
    """A session's own preprocessing (resize, crop, mean and std the user set in the window) reaches the script."""
    from dataclasses import replace

    from hookscope.core.models.catalogue import load_model
    from hookscope.core.outputs.session import save_session, session_from

    loaded = load_model("resnet18", "none", seed=4)
    loaded.preprocess = replace(
        loaded.preprocess, resize=150, crop=128, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), interpolation="bicubic"
    )
    image = _picture(tmp_path / "photo.png", 5, (200, 130))
    hooks = [("conv1", "forward"), ("layer1.0.relu", "backward"), ("layer3", "pre"), ("layer4.0.conv2", "tensor")]
    save_session(session_from(loaded, hooks, [image], target=9, edits=["scale:layer2:0.5"]), tmp_path / "s.json")
    out, script = tmp_path / "out", tmp_path / "redo.py"
    assert (
        main(["export", "--session", str(tmp_path / "s.json"), "--no-png", "--out", str(out), "--script", str(script)])
        == 0
    )
    capsys.readouterr()
    text = script.read_text()
    assert "RESIZE = 150" in text and "CROP = 128" in text and "MEAN = [0.5, 0.4, 0.3]" in text
    assert "INTERPOLATION = 'bicubic'" in text and "SEED = 4" in text and "TARGET = 9" in text
    _run_script(script, tmp_path / "captures.npz", tmp_path)
    expected = _exported(out)
    assert expected["input"].shape == (1, 3, 128, 128)
    assert _compare(tmp_path / "captures.npz", expected) <= 1e-6


def test_the_grad_columns_in_a_script_tensor_hooks_and_grad_input(tmp_path):
    """The window's Grad column (a tensor hook on the output) and Grad in column (grad_input: a full backward hook, or
    tensor hooks on the inputs where it cannot work), with the gradient edits on the same modules, redone by the
    script exactly: the same records under the export's keys."""
    from hookscope.core.engine.capture import capture_run
    from hookscope.core.engine.hooks import FALLBACK, FULL_BACKWARD, HookRegistry
    from hookscope.core.engine.interventions import parse_edit
    from hookscope.core.models.catalogue import load_model
    from hookscope.core.models.images import read_image
    from hookscope.core.outputs.export import ARCHIVES as EXPORT_ARCHIVES
    from hookscope.core.teaching.script_export import standalone_script

    loaded = load_model("resnet18", "none", seed=3)
    image = _picture(tmp_path / "photo.png", 1, (160, 120))
    registry = HookRegistry(loaded.module)
    for path, kind in [
        ("conv1", "grad_input"),
        ("bn1", "grad_input"),
        ("layer1.0.relu", "grad_input"),
        ("layer2.0.conv1", "grad_input"),
        ("layer3.0.conv1", "tensor"),
        ("bn1", "tensor"),
        ("fc", "grad_input"),
    ]:
        registry.add(path, kind)
    for spec in ("scale-grad-input:layer2.0.conv1:1.5", "scale-grad:layer3.0.conv1:1.6"):
        registry.add_edit(parse_edit(spec))
    result = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(image)))
    methods = {(h.path, h.kind): h.method for h in registry.handles()}
    assert methods[("conv1", "grad_input")] == methods[("fc", "grad_input")] == FULL_BACKWARD
    assert methods[("bn1", "grad_input")] == methods[("layer1.0.relu", "grad_input")] == FALLBACK

    script = tmp_path / "redo.py"
    script.write_text(standalone_script(loaded, registry, image=image, what="a test"))
    text = script.read_text()
    assert "register_full_backward_hook(save_grad_input('conv1', calls=1))" in text
    assert "register_forward_pre_hook(save_input_grad('bn1'))" in text  # an in-place ReLU follows bn1
    assert "register_forward_hook(save_output_grad('layer3.0.conv1', 'tensor'))" in text
    _run_script(script, tmp_path / "captures.npz", tmp_path)
    archives = {kind: name.removesuffix(".npz") for kind, name in EXPORT_ARCHIVES.items()}
    expected = {f"{archives[r.kind]}/{r.key}": r.tensor.numpy() for r in result.records}
    expected["input"] = result.input.numpy()
    expected["input_grad"] = result.input_grad.numpy()
    assert f"{archives['grad_input']}/layer1.0.relu#1" in expected  # the fallback, second call
    conv1 = next(r for r in result.records if (r.path, r.kind) == ("conv1", "grad_input"))
    torch.testing.assert_close(conv1.tensor, result.input_grad)  # conv1's input is the image
    assert _compare(tmp_path / "captures.npz", expected) <= 1e-6


@pytest.mark.parametrize(
    ("model", "layers", "target"),
    [
        ("lraspp_mobilenet_v3_large", "backbone.4", "class:3@40,60,300,400"),
        ("lraspp_mobilenet_v3_large", "backbone.4", "top1"),
        ("resnet18", "layer4", "similar:OTHER"),
    ],
)
def test_the_script_computes_the_same_objective_for_other_targets(tmp_path, model, layers, target):
    """A segmentation region, a segmentation model's top class over its pixels, an embedding similarity: the
    generated script differentiates what Hookscope did (the input gradient and every capture agree)."""
    image = _picture(tmp_path / "photo.png", 4, (200, 150))
    target = target.replace("OTHER", str(_picture(tmp_path / "other.png", 5, (150, 200))))
    out, script = tmp_path / "out", tmp_path / "redo.py"
    assert (
        main(
            [
                "export",
                "--model",
                model,
                "--weights",
                "none",
                "--image",
                str(image),
                "--layers",
                layers,
                "--hooks",
                "act,grad",
                "--target",
                target,
                "--no-png",
                "--out",
                str(out),
                "--script",
                str(script),
            ]
        )
        == 0
    )
    assert "weights_backbone=None" in script.read_text() or model == "resnet18"  # nothing downloads
    _run_script(script, tmp_path / "captures.npz", tmp_path)
    expected = _exported(out)
    assert "input_grad" in expected and np.abs(expected["input_grad"]).sum() > 0
    assert _compare(tmp_path / "captures.npz", expected) <= 1e-4


def test_a_box_target_in_a_script_is_the_detections_score(tmp_path):
    """A detector (random weights keep few boxes above its 0.05 threshold, so its script is checked to be written
    and to compile; the box objective itself is checked against autograd in test_objectives.py)."""
    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.models.catalogue import load_model
    from hookscope.core.teaching.script_export import standalone_script

    loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn", "none")
    registry = HookRegistry(loaded.module)
    registry.add("backbone.body.4", "forward")
    text = standalone_script(loaded, registry, image=None, target="box:2", device="cpu")
    assert "TARGET = ('box', 2)" in text and "weights_backbone=None" in text
    compile(text, "redo.py", "exec")

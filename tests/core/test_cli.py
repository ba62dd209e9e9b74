"""The headless command line, run as a user would: a real process, real files, real exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "chelsea.png"


def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hookscope", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_export_writes_manifest_arrays_and_pngs(tmp_path):
    out = tmp_path / "out"
    done = hookscope(
        "export",
        "--model",
        "resnet18",
        "--weights",
        "none",
        "--image",
        str(SAMPLE),
        "--layers",
        "conv1,bn1,layer1.0.relu,layer1",
        "--hooks",
        "act,in,grad_out,grad",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["name"] == "resnet18" and manifest["model"]["weights"] == "none"
    assert manifest["preprocessing"]["crop"] == 224
    assert len(manifest["prediction_top5"]) == 5
    assert manifest["timings_ms"]["forward_ms"] > 0 and manifest["timings_ms"]["backward_ms"] > 0
    assert manifest["modules"]["layer1.0.relu"]["calls"] == 2
    assert manifest["modules"]["fc"]["records"] == []
    bn1_methods = {r["kind"]: r["method"] for r in manifest["modules"]["bn1"]["records"]}
    assert bn1_methods["grad_out"] == "Tensor.register_hook (fallback)"

    activations = np.load(out / "activations.npz")
    assert set(activations.files) == {"conv1", "bn1", "layer1.0.relu", "layer1.0.relu#1", "layer1"}
    assert activations["bn1"].shape == (1, 64, 112, 112) and activations["bn1"].min() < 0
    assert set(np.load(out / "output_gradients.npz").files) == set(activations.files)
    assert set(np.load(out / "gradients.npz").files) == set(activations.files)
    assert "layer1.0.relu#1" in np.load(out / "inputs.npz").files

    # input.npy is exactly what the model was fed: the sample image through the model's preprocessing
    expected = load_model("resnet18").preprocess.to_tensor(read_image(SAMPLE)).numpy()
    np.testing.assert_array_equal(np.load(out / "input.npy"), expected)

    png = Image.open(out / "png" / "activations" / "conv1.png")
    assert png.mode == "RGB" and png.size == (8 * 112 + 7, 8 * 112 + 7)  # 64 channels: 8x8 tiles, 1-pixel gaps
    assert (out / "png" / "activations" / "layer1.0.relu#1.png").is_file()


def test_export_several_images_gets_one_folder_each(tmp_path):
    coffee = ROOT / "resources" / "coffee.png"
    done = hookscope(
        "export",
        "--image",
        str(SAMPLE),
        "--image",
        str(coffee),
        "--layers",
        "layer4",
        "--no-png",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    for name in ("chelsea", "coffee"):
        assert (tmp_path / name / "manifest.json").is_file()
        assert not (tmp_path / name / "png").exists()
    a, b = (np.load(tmp_path / n / "activations.npz")["layer4"] for n in ("chelsea", "coffee"))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", "missing.png"], "Cannot read 'missing.png': the file does not exist."),
        (["--image", str(SAMPLE), "--model", "resnet1800"], "Unknown model 'resnet1800'"),
        (["--image", str(SAMPLE), "--layers", "layer9"], "no module named 'layer9'"),
        (["--image", str(SAMPLE), "--device", "cuda:5"], "Device 'cuda:5' is not available"),
        (["--image", str(SAMPLE), "--weights", "nothing.pth"], "Weights file 'nothing.pth' does not exist."),
        (["--image", str(SAMPLE), "--layers", "fc", "--target", "1000"], "Class 1000 does not exist"),
    ],
)
def test_errors_are_one_readable_line(args, message, tmp_path):
    done = hookscope("export", "--weights", "none", *args, "--out", str(tmp_path))  # a later --weights wins
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    # the progress lines (plain lines: stderr is not a terminal here) apart, the error is one line
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith(f"export {SAMPLE}: ")]
    assert len(lines) == 1 and lines[0].startswith("hookscope: error: ") and message in lines[0]


def test_bench_prints_medians_and_ratio():
    done = hookscope("bench", "--model", "resnet18", "--layers", "conv1,layer1,fc", "--size", "64", "--repeat", "2")
    assert done.returncode == 0, done.stderr
    assert "medians bare" in done.stdout and "floor (plain PyTorch hooks)" in done.stdout
    assert "Hookscope/bare" in done.stdout and "floor/bare" in done.stdout and "Hookscope/floor" in done.stdout


def test_core_imports_no_qt():
    code = (
        "import sys, pkgutil, importlib, hookscope.core\n"
        "for m in pkgutil.iter_modules(hookscope.core.__path__): importlib.import_module('hookscope.core.' + m.name)\n"
        "import hookscope.cli\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph', 'superqt', 'qtpy')]\n"
        "print(bad); raise SystemExit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

"""The CUDA path: the same run on the GPU records what the CPU run records (every hook kind, edits, Grad-CAM), the
hooks come off, and the command line's long commands run there. Skipped where torch sees no CUDA device (the CI
machine); run on a machine with one: ``pytest tests/core/test_cuda.py``."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.common.vocabulary import KINDS
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.interventions import parse_edit
from hookscope.core.engine.run import run_image
from hookscope.core.pictures.cam import run_grad_cam

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MODULES = ("conv1", "layer1.0.conv1", "layer2.1", "layer4")


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8)).save(path)
    return path


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    # cuDNN and the CPU kernels sum in different orders: float32 agreement, not bit identity.
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    scale = max(float(b.abs().max()), 1e-12)
    return a.shape == b.shape and float((a - b).abs().max()) <= 1e-3 * scale


def _run(loaded, photo, device, edits=()):
    module = copy.deepcopy(loaded.module)
    if device != "cpu":
        module = module.to(device)
    one = copy.copy(loaded)
    one.module = module
    with HookRegistry(module) as registry:
        for path in MODULES:
            for kind in KINDS:
                if kind != "attention":  # a ResNet has no attention module
                    registry.add(path, kind)
        for spec in edits:
            registry.add_edit(parse_edit(spec))
        result = run_image(one, registry, photo, device=device)
        cam = run_grad_cam(result, "layer4")
    hooks_left = sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in module.modules()
    )
    return result, cam, hooks_left


@pytest.mark.parametrize("edits", [(), ("zero:layer1.0.conv1:3",)])
def test_a_cuda_run_records_what_the_cpu_run_records(resnet18_loaded, photo, edits):
    cpu, cam_cpu, _ = _run(resnet18_loaded, photo, "cpu", edits)
    gpu, cam_gpu, hooks_left = _run(resnet18_loaded, photo, "cuda", edits)
    assert hooks_left == 0
    assert _close(gpu.scores, cpu.scores)
    assert [(r.path, r.kind, r.call) for r in gpu.records] == [(r.path, r.kind, r.call) for r in cpu.records]
    for g, c in zip(gpu.records, cpu.records):
        assert _close(g.tensor, c.tensor), (c.path, c.kind)
    assert np.corrcoef(cam_gpu.ravel(), cam_cpu.ravel())[0, 1] > 0.999


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hookscope", *args], capture_output=True, text=True, timeout=timeout)


def test_the_command_line_runs_on_cuda(tmp_path, photo):
    folder = tmp_path / "images"
    folder.mkdir()
    for k in range(6):
        pixels = np.random.default_rng(k).integers(0, 256, (70, 80, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{k}.png")
    out = tmp_path / "out"
    done = _cli(
        "export",
        "--image",
        str(photo),
        "--layers",
        "layer1,layer4",
        "--device",
        "cuda",
        "--out",
        str(out / "export"),
        "--weights",
        "none",
    )
    assert done.returncode == 0, done.stderr
    done = _cli(
        "scan",
        "--images",
        str(folder),
        "--layers",
        "layer2",
        "--device",
        "cuda",
        "--out",
        str(out / "scan"),
        "--weights",
        "none",
        "--no-boxes",
    )
    assert done.returncode == 0, done.stderr
    assert (out / "scan" / "scan.json").exists()


def test_live_plays_a_video_through_the_hooks_on_cuda(tmp_path):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent.parent))
    from video_files import write_video  # skips without OpenCV

    video = write_video(tmp_path / "clip.avi", frames=30, size=(96, 80))
    done = _cli(
        "live",
        "--video",
        str(video),
        "--layers",
        "layer1,layer2,layer3,layer4",
        "--frames",
        "30",
        "--device",
        "cuda",
        "--weights",
        "none",
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "on cuda" in said and "processed/model" in said, said

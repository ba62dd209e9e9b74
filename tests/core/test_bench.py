"""The benchmark's floor does the same work as Hookscope's hooks: it keeps as many tensors as a run records."""

import pytest
import torch
from torchvision.models import mobilenet_v3_small, resnet18

from hookscope.core.bench.hooks import benchmark
from hookscope.core.common.vocabulary import KINDS
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.floor import bare_run, floor_hooks
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.tree import survey

EVERY_MODULE = tuple(kind for kind in KINDS if kind != "attention")  # attn goes on attention modules only


@pytest.mark.parametrize("build", [resnet18, mobilenet_v3_small])
@pytest.mark.parametrize("kinds", [(kind,) for kind in EVERY_MODULE] + [EVERY_MODULE])
def test_the_floor_keeps_what_a_run_records(build, kinds):
    model = build(weights=None).eval()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    known = survey(model, x.clone().requires_grad_(True))
    paths = [path for path, _ in model.named_modules()]
    kept: list[torch.Tensor] = []
    handles = floor_hooks(model, paths, kinds, known, kept)
    try:
        bare_run(model, x)
    finally:
        for handle in handles:
            handle.remove()
    assert all(not module._forward_hooks and not module._backward_hooks for module in model.modules())
    with HookRegistry(model) as registry:
        for path in paths:
            for kind in kinds:
                registry.add(path, kind)
        records = capture_run(model, registry, x).records
    assert len(kept) == len(records) > 0
    assert sorted(t.numel() for t in kept) == sorted(r.data.numel() for r in records)


def test_benchmark_times_bare_floor_and_hookscope_in_every_round():
    model = resnet18(weights=None).eval()
    paths = ["layer1", "layer2.0.conv1", "fc"]
    result = benchmark(model, paths, ("forward", "tensor"), size=64, repeat=3, warmup=1)
    assert result.hooks == 6
    assert len(result.bare_ms) == len(result.floor_ms) == len(result.hooked_ms) == 3
    assert min(result.bare_ms + result.floor_ms + result.hooked_ms) > 0
    assert result.ratio > 0 and result.floor_ratio > 0 and result.above_floor > 0
    assert all(not module._forward_hooks and not module._backward_hooks for module in model.modules())


def test_bench_capture_prints_the_ratio_of_hookscope_capture_to_its_floor():
    """``hookscope bench --capture``: hookscope.capture with act and grad on every module against the plain PyTorch
    a script writes for the same records, both registering and removing their hooks in each call."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "bench", "--capture", "--model", "resnet18", "--size", "32", "--repeat", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("resnet18 32x32 on cpu, every module (67) with act and grad: hookscope.capture ")
    assert "(medians of 2 interleaved rounds); capture / floor = " in line
    assert float(line.rsplit("= ", 1)[1]) > 0

"""A run's tensors are freed when its result is dropped, without waiting for Python's cycle collector: the copy
cache and the tensor hooks once formed a cycle (recorder -> copied output -> its hook -> recorder) that kept a whole
run alive, 250 MB a run on ResNet-50."""

import gc
import weakref

import torch
from torchvision.models import resnet18

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry


def test_dropping_a_result_frees_its_records_without_the_cycle_collector():
    model = resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    registry = HookRegistry(model)
    for path, _ in model.named_modules():
        for kind in ("forward", "tensor", "grad_input"):
            registry.add(path, kind)
    capture_run(model, registry, x)  # the survey, and hooks adapted to it
    gc.collect()
    gc.disable()
    try:
        result = capture_run(model, registry, x)
        kinds = {r.kind for r in result.records}
        assert {"forward", "tensor", "grad_input"} <= kinds
        copied = [r for r in result.records if r.kind == "forward" and r.path == "layer1.0.bn1"]  # before relu_
        refs = [weakref.ref(r.data) for r in result.records]
        assert copied
        del result, copied
        alive = sum(ref() is not None for ref in refs)
        assert alive == 0, f"{alive} of {len(refs)} record tensors outlived their result"
    finally:
        gc.enable()

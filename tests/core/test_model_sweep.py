"""Every torchvision classification model, every module hooked for activations and gradients.

The full sweep of all models is slow (about 10 minutes on two cores): run it with ``pytest -m slow``.
The default run covers a representative subset, one of each family of architectures that stresses the engine
differently (in-place activations, skipped modules, empty branches, attention tuples, channels-last blocks).
"""

import warnings

import pytest
import torch

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import catalogue, catalogue_task, load_model

REPRESENTATIVE = [
    "mobilenet_v3_small",  # Hardswish(inplace=True), squeeze-excitation
    "shufflenet_v2_x0_5",  # empty branch1 that never runs, channel shuffle
    "googlenet",  # aux classifiers skipped in eval
    "squeezenet1_0",  # ReLU(inplace=True) after every conv
    "regnet_x_400mf",  # residual blocks with in-place ReLU
    "vit_b_32",  # attention returns a tuple; out_proj used functionally
    "swin_t",  # channels-last blocks, attention with functional qkv
]


def sweep(name: str, size: int | None = None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # googlenet/inception init warnings
        loaded = load_model(name, "none")
    model = loaded.module
    crop = size or loaded.preprocess.crop
    x = torch.randn(1, loaded.preprocess.channels, crop, crop, generator=torch.Generator().manual_seed(0))
    with HookRegistry(model) as registry:
        for path in registry.paths:
            registry.add(path, "forward")
            registry.add(path, "backward")
        result = capture_run(model, registry, x)
        forward = {(r.path, r.call, r.leaf) for r in result.of_kind("forward")}
        backward = {(r.path, r.call, r.leaf) for r in result.of_kind("backward")}
        missing_forward, missing_backward = [], []
        for path in registry.paths:
            run = result.survey.run_of(path)
            for call in range(run.calls):
                for leaf in run.output_leaves:
                    if (path, call, leaf) not in forward:
                        missing_forward.append(f"{path}#{call}/{leaf}")
            if run.ran and not any(p == path for p, _, _ in backward):
                missing_backward.append(path)
        assert not missing_forward, f"{name}: no activation record for {missing_forward[:5]}"
        assert not missing_backward, f"{name}: no gradient record for {missing_backward[:5]}"
        assert all(torch.isfinite(r.tensor).all() for r in result.records if r.tensor.is_floating_point())
        # (not "non-zero": an untrained ViT's head is initialised to zeros, so its gradients are truly zero)
        assert result.input_grad is not None and result.input_grad.shape == x.shape
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_representative_models_record_every_module(name):
    sweep(name, None if name.startswith("vit") else 96)  # every module runs at 96 px too (a ViT takes its 224 only)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in catalogue() if catalogue_task(n) == "classification"])
def test_every_torchvision_model_records_every_module(name):
    sweep(name)

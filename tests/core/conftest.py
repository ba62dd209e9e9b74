import copy

import pytest
import torch

from hookscope.core.models.catalogue import load_model


@pytest.fixture(scope="session")
def resnet18_loaded():
    return load_model("resnet18", "none", seed=0)


@pytest.fixture
def resnet18(resnet18_loaded):
    """A fresh copy per test, so that a test's hooks can never leak into another's."""
    return copy.deepcopy(resnet18_loaded.module)


@pytest.fixture(scope="session")
def image_tensor():
    return torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))


def _hook_counts(model: torch.nn.Module) -> dict[str, tuple[int, int, int, int]]:
    return {
        path: (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks), len(m._backward_pre_hooks))
        for path, m in model.named_modules()
    }


@pytest.fixture
def hook_counts():
    """Every module's (forward, forward-pre, backward, backward-pre) hook counts, to compare before and after."""
    return _hook_counts

"""Comparing image A with image B: differences, channels ranked by difference, records paired, predictions."""

import numpy as np
import pytest
import torch

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.pictures.compare import (
    channel_differences,
    difference,
    pair_records,
    prediction_changes,
    rank_channels_by_difference,
)


def test_difference_and_ranking_on_known_arrays():
    a = np.zeros((1, 4, 2, 2), dtype=np.float32)
    b = np.zeros((1, 4, 2, 2), dtype=np.float32)
    b[0, 2] = 3.0  # differs most
    b[0, 0, 0, 0] = -2.0  # mean |diff| 0.5
    b[0, 3] = 1.0  # mean |diff| 1
    assert np.array_equal(difference(a, b), a - b)
    np.testing.assert_allclose(channel_differences(a, b), [0.5, 0.0, 3.0, 1.0])
    assert rank_channels_by_difference(a, b).tolist() == [2, 3, 0, 1]
    assert rank_channels_by_difference(np.zeros(3), np.zeros(3)).tolist() == [0, 1, 2], "ties keep channel order"
    with pytest.raises(HookscopeError, match="only equal shapes"):
        difference(a, np.zeros((1, 3, 2, 2)))


def test_two_images_through_resnet18(resnet18):
    x_a = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(6))
    x_b = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(7))
    registry = HookRegistry(resnet18)
    registry.add("layer1", "forward")
    registry.add("layer1.0.relu", "forward")
    registry.add("layer2", "backward")
    run_a = capture_run(resnet18, registry, x_a)
    run_b = capture_run(resnet18, registry, x_b)

    pairs = pair_records(run_a, run_b)
    assert [(p.kind, p.key) for p in pairs] == [(r.kind, r.key) for r in run_a.records]
    assert all(p.a is not None and p.b is not None and p.a.key == p.b.key for p in pairs)
    layer1 = next(p for p in pairs if p.key == "layer1")
    expected = np.abs(layer1.a.tensor.numpy() - layer1.b.tensor.numpy()).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(channel_differences(layer1.a, layer1.b), expected, rtol=1e-6)
    assert rank_channels_by_difference(layer1.a, layer1.b).tolist() == np.argsort(-expected, kind="stable").tolist()
    np.testing.assert_array_equal(difference(layer1.a, layer1.b), layer1.a.tensor.numpy() - layer1.b.tensor.numpy())

    # a record only one run has is paired with None
    registry.add("fc", "forward")
    run_c = capture_run(resnet18, registry, x_b)
    only_b = [p for p in pair_records(run_a, run_c) if p.a is None]
    assert [(p.kind, p.key) for p in only_b] == [("forward", "fc")]

    # the predictions of both, with the change of each of B's top-5 since A
    changes = prediction_changes(run_b, run_a)
    p_a = torch.softmax(run_a.scores[0], dim=0)
    assert [c.index for c in changes] == [p.index for p in run_b.top5]
    for change in changes:
        assert change.before == pytest.approx(float(p_a[change.index]))

"""Dream a channel (hookscope.core.teaching.visualize) on a real ResNet-18 with random weights (seed 0).

Images are 128 pixels (64 where only determinism or hooks are checked), not 224, to keep the tests fast on a busy
2-core machine; the recipe is the same at every size.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.cli import main
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.teaching.visualize import (
    LayerTap,
    Objective,
    VisualizeError,
    VisualizeSettings,
    find_module,
    gram_similarity,
    visualize,
)


@pytest.fixture(scope="module")
def resnet() -> LoadedModel:
    return load_model("resnet18", "none", seed=0)


def no_hooks(module: torch.nn.Module) -> bool:
    return not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks


# The channel the starting image (seed 0, 128 px) excites most in each layer, so that the start is well above zero
# and "5 times" means something (a channel starting near 0 would pass with any growth at all).
GROWTH_CASES = [("layer1.1", 27), ("layer2.1", 4), ("layer3.1", 61)]


@pytest.mark.parametrize(("layer", "channel"), GROWTH_CASES)
def test_the_objective_grows_at_least_five_fold_in_64_steps(resnet, layer: str, channel: int) -> None:
    result = visualize(
        resnet.module, Objective(layer, channel), resnet.preprocess, VisualizeSettings(steps=64, size=128, seed=0)
    )
    assert result.steps_done == 64 and not result.cancelled
    assert result.objective_start > 0.1
    assert result.objective_end >= 5 * result.objective_start, result.summary()
    image = result.image
    assert image.dtype == np.uint8 and image.shape == (128, 128, 3) and image.flags.c_contiguous
    assert image.min() < 64 and image.max() > 192  # a picture, not a flat grey
    assert len(result.history) == 64 and result.step_ms > 0 and result.bare_ms > 0
    # Nine bare forward+backward passes spread over the run, each paired with the step after it.
    assert len(result.pair_ratios) == 9 and result.ratio == sorted(result.pair_ratios)[4] > 0


def test_one_seed_gives_one_image_and_another_seed_another(resnet) -> None:
    settings = VisualizeSettings(steps=8, size=64, seed=3)
    objective = Objective("layer2.0.conv1", 5)
    first = visualize(resnet.module, objective, resnet.preprocess, settings)
    second = visualize(resnet.module, objective, resnet.preprocess, settings)
    other = visualize(resnet.module, objective, resnet.preprocess, replace(settings, seed=4))
    np.testing.assert_array_equal(first.image, second.image)
    assert first.objective_end == second.objective_end
    assert not np.array_equal(first.image, other.image)


def test_the_hook_is_on_the_live_module_while_it_runs_and_gone_after(resnet) -> None:
    module = find_module(resnet.module, "layer3.0")
    assert no_hooks(module)
    seen: list[tuple[int, int]] = []

    def progress(step: int, value: float, image: np.ndarray) -> None:
        seen.append((step, len(module._forward_hooks)))
        assert image.dtype == np.uint8 and image.shape == (64, 64, 3)

    visualize(
        resnet.module,
        Objective("layer3.0", 1),
        resnet.preprocess,
        VisualizeSettings(steps=8, size=64, progress_every=2),
        progress=progress,
    )
    assert seen == [(2, 1), (4, 1), (6, 1), (8, 1)]
    assert no_hooks(module)
    assert all(no_hooks(m) for m in resnet.module.modules())


def test_the_hook_is_removed_on_error_and_on_cancel(resnet) -> None:
    module = find_module(resnet.module, "layer2.1")
    with pytest.raises(VisualizeError, match=r"128 channels \(0-127\); there is no channel 500") as caught:
        visualize(resnet.module, Objective("layer2.1", 500), resnet.preprocess, VisualizeSettings(steps=4, size=64))
    assert caught.value.module_path == "layer2.1"
    assert no_hooks(module)

    calls = []

    def cancelled() -> bool:
        calls.append(len(module._forward_hooks))
        return len(calls) > 3

    result = visualize(
        resnet.module,
        Objective("layer2.1", 2),
        resnet.preprocess,
        VisualizeSettings(steps=50, size=64),
        cancelled=cancelled,
    )
    assert result.cancelled and result.steps_done == 3 and calls == [1, 1, 1, 1]
    assert result.image.dtype == np.uint8 and no_hooks(module)
    assert "cancelled after 3 steps" in result.summary()

    with pytest.raises(VisualizeError, match="no module named 'layer9'"):
        visualize(resnet.module, Objective("layer9", 0), resnet.preprocess, VisualizeSettings(steps=1, size=64))


def test_negative_mode_decreases_the_objective(resnet) -> None:
    settings = VisualizeSettings(steps=32, size=64)
    down = visualize(resnet.module, Objective("layer3.1.conv2", 61, negative=True), resnet.preprocess, settings)
    up = visualize(resnet.module, Objective("layer3.1.conv2", 61), resnet.preprocess, settings)
    assert down.objective_start == up.objective_start > 0.2
    assert down.objective_end < down.objective_start - 0.2, down.summary()
    assert up.objective_end > up.objective_start + 0.2
    assert "minimise" in down.summary() and "maximise" in up.summary()


def test_a_batchnorm_output_gets_its_true_gradient(resnet) -> None:
    """At initialisation an eval-mode BatchNorm is the identity, so optimising its output is optimising its input,
    step by step. (Without the contiguous gradient PyTorch 2.14's CPU BatchNorm backward gets this wrong and the
    two drift apart from the second step: minimising bn2 then made it grow.)"""
    settings = VisualizeSettings(steps=12, size=64)
    for negative in (False, True):
        conv = visualize(resnet.module, Objective("layer2.1.conv2", 4, negative=negative), resnet.preprocess, settings)
        norm = visualize(resnet.module, Objective("layer2.1.bn2", 4, negative=negative), resnet.preprocess, settings)
        assert norm.history == pytest.approx(conv.history, rel=1e-3, abs=1e-4)


def test_the_model_sees_the_image_through_its_own_preprocessing(resnet) -> None:
    """The reported objective is what the model gives for the saved picture fed the usual way (Preprocess.to_tensor:
    the model's mean and std), up to the rounding to 8 bits."""
    preprocess = replace(resnet.preprocess, resize=None, crop=96)
    objective = Objective("layer3.1", 61)
    result = visualize(resnet.module, objective, preprocess, VisualizeSettings(steps=16, size=96))
    x = preprocess.to_tensor(result.pil())
    with LayerTap(find_module(resnet.module, "layer3.1"), "layer3.1") as tap, torch.no_grad():
        value = float(tap.run(resnet.module, x)[:, 61].mean())
    assert value == pytest.approx(result.objective_end, rel=0.03)
    # Fed without the normalisation (raw [0, 1] pixels), the same picture gives a clearly different value.
    with LayerTap(find_module(resnet.module, "layer3.1"), "layer3.1") as tap, torch.no_grad():
        raw = float(
            tap.run(resnet.module, torch.tensor(result.image).permute(2, 0, 1)[None].float() / 255)[:, 61].mean()
        )
    assert abs(raw - result.objective_end) > 0.1 * abs(result.objective_end)


def test_whole_layer_direction_and_diversity(resnet) -> None:
    settings = VisualizeSettings(steps=16, size=64)
    layer = visualize(resnet.module, Objective("layer2.1"), resnet.preprocess, settings)
    assert layer.objective_end > 2 * layer.objective_start
    direction = tuple(1.0 if c == 4 else 0.0 for c in range(128))
    along = visualize(resnet.module, Objective("layer2.1", direction=direction), resnet.preprocess, settings)
    channel = visualize(resnet.module, Objective("layer2.1", 4), resnet.preprocess, settings)
    assert along.objective_end == pytest.approx(channel.objective_end, rel=1e-4)  # a one-hot direction is a channel
    with pytest.raises(VisualizeError, match="direction has 3 values"):
        visualize(resnet.module, Objective("layer2.1", direction=(1, 2, 3)), resnet.preprocess, settings)

    # Two images with a diversity term end less alike (their Gram matrices at the layer) than without it.
    similarity = {}
    for weight in (0.0, 10.0):
        result = visualize(
            resnet.module,
            Objective("layer2.1", 4),
            resnet.preprocess,
            replace(settings, steps=32, images=2, diversity=weight),
        )
        assert len(result.images) == 2
        pixels = torch.stack([torch.tensor(i).permute(2, 0, 1).float() / 255 for i in result.images])
        mean = torch.tensor(resnet.preprocess.mean).view(1, 3, 1, 1)
        std = torch.tensor(resnet.preprocess.std).view(1, 3, 1, 1)
        with LayerTap(find_module(resnet.module, "layer2.1"), "layer2.1") as tap, torch.no_grad():
            similarity[weight] = float(gram_similarity(tap.run(resnet.module, (pixels - mean) / std)))
    assert similarity[10.0] < similarity[0.0] - 0.01, similarity


def test_registry_hooks_on_the_same_model_neither_feed_nor_disturb_it(resnet) -> None:
    """The workspace's hooks stay on the model (nothing is suspended): the image is the same, they stay registered,
    and they record nothing from the optimisation."""
    settings = VisualizeSettings(steps=6, size=64)
    alone = visualize(resnet.module, Objective("layer2.1", 4), resnet.preprocess, settings)
    with HookRegistry(resnet.module) as registry:
        for path, kind in (("layer2.1", "forward"), ("layer2", "backward"), ("layer1.0.conv1", "tensor")):
            registry.add(path, kind)
        recorder = registry.new_recorder()
        together = visualize(resnet.module, Objective("layer2.1", 4), resnet.preprocess, settings)
        assert registry.handle_count() == 3 and len(find_module(resnet.module, "layer2.1")._forward_hooks) == 1
        assert recorder.records == []
    np.testing.assert_array_equal(alone.image, together.image)


# ---- the command line --------------------------------------------------------------------------------------------


def test_cli_writes_a_png_and_one_final_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "channel.png"
    command = (
        "visualize --model resnet18 --weights none --layer layer3.1 --channel 61 --steps 12 --size 96 --opt-seed 0"
    )
    code = main([*command.split(), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1
    line = lines[0]
    assert "maximise layer3.1 channel 61" in line and "12 steps at 96x96" in line and str(out) in line
    assert "objective " in line and " -> " in line and "ms per step" in line and "bare forward+backward" in line
    assert "adjacent pairs" in line
    start, end = (float(v) for v in line.split("objective ")[1].split(";")[0].split(" -> "))
    assert end > start
    with Image.open(out) as picture:
        assert picture.format == "PNG" and picture.size == (96, 96) and picture.mode == "RGB"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--layer", "layer3.1", "--channel", "999"], "'layer3.1' has 256 channels (0-255); there is no channel 999."),
        (["--layer", "layer3.9", "--channel", "1"], "The model has no module named 'layer3.9'."),
    ],
)
def test_cli_bad_layer_or_channel_is_one_line_and_exit_2(tmp_path: Path, capsys, options, message) -> None:
    out = tmp_path / "x.png"
    code = main(["visualize", "--weights", "none", "--steps", "2", "--size", "64", "--out", str(out), *options])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hookscope: error: ") and message in lines[0]
    assert not out.exists()

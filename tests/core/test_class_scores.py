"""Class scores where models really put them, and one ranking of the classes everywhere (issue 13, items 1 and 2).

The HuggingFace models are real ``transformers`` classes built from small configs (no hub download): a ViT whose
output is an ``ImageClassifierOutput`` (a ``ModelOutput``), the same ViT returning a plain tuple, and a ResNet
with spatial feature maps for Grad-CAM. Every gradient is checked against autograd on a copy of the model, with
the objective written out here.
"""

from __future__ import annotations

import copy
import json
import os
import textwrap

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built from configs: nothing may reach for the hub

import numpy as np
import pytest
import torch
from cli_output import message_lines
from torch import nn

from hookscope.cli import main
from hookscope.core.common.errors import RunError
from hookscope.core.engine.capture import capture_run, class_ranking, class_scores, top_predictions
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.files import open_model_file
from hookscope.core.pictures.cam import run_grad_cam

MODEL_PY = textwrap.dedent(
    """
    import torch
    from torch import nn
    from transformers import ResNetConfig, ResNetForImageClassification, ViTConfig, ViTForImageClassification

    SMALL_VIT = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, num_labels=10)


    def build():
        return ViTForImageClassification(ViTConfig(**SMALL_VIT))


    class TupleOut(nn.Module):
        image_size = 32

        def __init__(self):
            super().__init__()
            self.inner = ViTForImageClassification(ViTConfig(**SMALL_VIT))

        def forward(self, x):
            return self.inner(x, return_dict=False)  # (logits,)


    def build_tuple():
        return TupleOut()


    class DictOut(TupleOut):
        def forward(self, x):
            out = self.inner(x)
            return {"embedding": out.logits.detach() * 0 + 1, "logits": out.logits}


    def build_dict():
        return DictOut()


    def build_resnet():
        model = ResNetForImageClassification(
            ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10)
        )
        model.image_size = 64
        return model
    """
)


@pytest.fixture(scope="module")
def model_py(tmp_path_factory):
    pytest.importorskip("transformers")  # in the test extra, so installed wherever the suite runs
    path = tmp_path_factory.mktemp("hf") / "model.py"
    path.write_text(MODEL_PY)
    return path


def _input(size: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _reference(module: nn.Module, x: torch.Tensor, target: int | None) -> tuple[torch.Tensor, int]:
    """d logit[target] / d input on a copy, target None meaning the largest logit (lowest index on ties)."""
    model = copy.deepcopy(module)
    xin = x.clone().requires_grad_(True)
    out = model(xin)
    logits = out[0] if isinstance(out, tuple) else out["logits"]
    index = int(logits[0].argmax()) if target is None else target
    (grad,) = torch.autograd.grad(logits[0, index], xin)
    return grad, index


@pytest.mark.parametrize("factory", ["build", "build_tuple", "build_dict"])
@pytest.mark.parametrize("target", ["top1", 7])
def test_hf_vit_gets_the_gradient_of_its_class_logit(model_py, factory, target):
    loaded = open_model_file(f"{model_py}:{factory}", trust=True, seed=0)
    assert loaded.preprocess.crop == 32, "the ViT's own size (config.image_size or image_size) is the input size"
    x = _input(32)
    with HookRegistry(loaded.module) as registry:
        registry.add("classifier" if factory == "build" else "inner.classifier", "tensor")
        result = capture_run(loaded.module, registry, x, target=target)
    expected, index = _reference(loaded.module, x, None if target == "top1" else target)
    assert result.scores is not None and result.scores.shape == (1, 10)
    assert result.target_index == index
    assert len(result.top5) == 5 and result.top5[0].index == int(result.scores[0].argmax())
    torch.testing.assert_close(result.input_grad, expected, atol=1e-6, rtol=1e-5)
    # the gradient of the logits is one-hot: the chosen logit, not the sum of all of them
    (grad,) = [r.tensor for r in result.records if r.kind == "tensor"]
    assert torch.equal(grad, torch.nn.functional.one_hot(torch.tensor([index]), 10).float())


def test_where_class_scores_are_found():
    scores = torch.randn(1, 5)
    assert class_scores(scores) is scores
    assert class_scores((scores, torch.randn(1, 3, 4, 4))) is scores
    assert class_scores([scores]) is scores
    assert class_scores({"logits": scores, "aux": torch.randn(1, 5)}) is scores

    class Output:
        logits = scores

    assert class_scores(Output()) is scores
    # not class scores: a batch, a feature map, a single number, a tuple that does not start with scores
    for other in (torch.randn(2, 5), torch.randn(1, 3, 4, 4), torch.randn(1, 1), (torch.randn(1, 3, 4, 4), scores), {}):
        assert class_scores(other) is None
    outputs = pytest.importorskip("transformers.modeling_outputs")
    assert class_scores(outputs.ImageClassifierOutput(logits=scores)) is scores


def test_hf_resnet_grad_cam_is_of_the_target_class(model_py):
    loaded = open_model_file(f"{model_py}:build_resnet", trust=True, seed=0)
    x = _input(64, seed=8)
    path = "resnet.encoder.stages.1"
    with HookRegistry(loaded.module) as registry:
        registry.add(path, "forward")
        registry.add(path, "tensor")
        result = capture_run(loaded.module, registry, x, target=4)
    assert result.target_index == 4 and result.target == "logit of class 4"
    cam = run_grad_cam(result, path)
    # the map from its definition, on a copy, for logits[0, 4]
    model = copy.deepcopy(loaded.module)
    kept = {}

    def hook(module, inputs, output):
        kept["act"] = output.detach()
        output.register_hook(lambda grad: kept.__setitem__("grad", grad.detach()))

    model.get_submodule(path).register_forward_hook(hook)
    model(x.clone().requires_grad_(True)).logits[0, 4].backward()
    weights = kept["grad"][0].mean(dim=(1, 2))
    raw = torch.relu((weights[:, None, None] * kept["act"][0]).sum(0))
    up = torch.nn.functional.interpolate(raw[None, None], size=(64, 64), mode="bilinear", align_corners=False)[0, 0]
    expected = (up - up.min()) / (up.max() - up.min())
    np.testing.assert_allclose(cam, expected.numpy(), atol=1e-5)


def test_a_target_that_does_not_exist_is_an_error(model_py):
    loaded = open_model_file(f"{model_py}:build", trust=True, seed=0)
    with HookRegistry(loaded.module) as registry:
        for target in (10, 5000, -1):
            with pytest.raises(RunError, match=r"Class -?\d+ does not exist: the model has 10 classes \(0-9\)"):
                capture_run(loaded.module, registry, _input(32), target=target)
    features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())  # no class scores at all
    with HookRegistry(features) as registry:
        with pytest.raises(RunError, match="Class 3 cannot be the target: the model's output holds no class scores"):
            capture_run(features, registry, _input(16), target=3)
        assert capture_run(features, registry, _input(16)).target == "sum of the output"


def test_cli_finds_hf_class_scores_and_refuses_a_missing_class(model_py, tmp_path, capsys):
    image = tmp_path / "in.png"
    from PIL import Image

    Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)).save(image)
    base = ["export", "--model-file", f"{model_py}:build", "--trust", "--image", str(image), "--no-png",
            "--layers", "classifier", "--hooks", "act,grad"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "a"), "--target", "3"]) == 0
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert "no class scores" not in out and "top-1: class " in out
    assert manifest["target"] == {"index": 3, "description": "logit of class 3"}
    assert len(manifest["prediction_top5"]) == 5
    assert out.split("top-1: ")[1].startswith(manifest["prediction_top5"][0]["label"])
    grad = np.load(tmp_path / "a" / "gradients.npz")["classifier"]
    assert np.array_equal(grad, np.eye(10, dtype=np.float32)[[3]]), "the gradient of logit 3 alone"

    assert main([*base, "--out", str(tmp_path / "b"), "--target", "5000"]) == 2
    captured = capsys.readouterr()
    assert message_lines(captured.err) == [
        "hookscope: error: Class 5000 does not exist: the model has 10 classes (0-9)."
    ]
    assert not (tmp_path / "b" / "manifest.json").exists()


# ---- one ranking -----------------------------------------------------------------------------------------------


def test_ranking_by_logit_then_lowest_index():
    scores = torch.tensor([[1.0, 3.0, 3.0, float("nan"), 2.0, 3.0]])
    assert class_ranking(scores).tolist() == [1, 2, 5, 4, 0, 3]  # ties: lowest index first; NaN last
    assert [p.index for p in top_predictions(scores, None)] == [1, 2, 5, 4, 0]
    # differences far below float32's resolution of a probability still decide the order
    tiny = torch.tensor([[0.0, 1e-9, 2e-9, 0.0, 1e-9]])
    assert class_ranking(tiny).tolist() == [2, 1, 4, 0, 3]
    assert class_ranking(torch.zeros(1, 4, dtype=torch.float64)).tolist() == [0, 1, 2, 3]


def test_ranking_and_its_first_classes_match_a_stable_descending_sort():
    """The numpy ranking (and its first-k shortcut) against torch's stable descending sort of the same row, with
    ties, NaN, both infinities and -0.0 mixed in: every order and every prefix the same."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(2000):
        size = int(torch.randint(2, 40, (1,), generator=generator))
        row = torch.randint(-3, 4, (1, size), generator=generator).double()
        draw = torch.rand(1, size, generator=generator)
        row[draw < 0.1] = float("nan")
        row[(draw >= 0.1) & (draw < 0.15)] = float("inf")
        row[(draw >= 0.15) & (draw < 0.2)] = -float("inf")
        row[(draw >= 0.2) & (draw < 0.25)] = -0.0
        cleaned = torch.nan_to_num(row[0], nan=-torch.inf, posinf=torch.inf, neginf=-torch.inf)
        expected = torch.sort(cleaned, descending=True, stable=True).indices.tolist()
        assert class_ranking(row).tolist() == expected, row
        for first in (1, 2, 5, size, size + 3):
            assert class_ranking(row, first).tolist() == expected[:first], (row, first)
        assert [p.index for p in top_predictions(row, None)] == expected[:5]


@pytest.fixture(scope="module")
def mobilenet():
    return load_model("mobilenet_v3_small", "none", seed=0)


def test_untrained_mobilenet_ties_give_one_top1_everywhere(mobilenet):
    """Every class ~0.001: the probabilities tie in float32, the logits do not."""
    x = _input(64, seed=1)
    with HookRegistry(mobilenet.module) as registry:
        result = capture_run(mobilenet.module, registry, x)
    probabilities = [p.probability for p in result.top5]
    assert max(probabilities) - min(probabilities) < 1e-6, "the tie this test is about"
    order = torch.sort(result.scores[0].double(), descending=True, stable=True).indices[:5].tolist()
    assert [p.index for p in result.top5] == order
    assert result.target_index == result.top5[0].index == order[0]
    assert result.target == f"top-1 logit (class {order[0]})"


def test_cli_prints_the_class_the_manifest_names(mobilenet, tmp_path, capsys):
    from PIL import Image

    image = tmp_path / "in.png"
    Image.fromarray((np.random.default_rng(2).random((64, 64, 3)) * 255).astype(np.uint8)).save(image)
    argv = ["export", "--model", "mobilenet_v3_small", "--weights", "none", "--image", str(image), "--no-png",
            "--layers", "classifier", "--hooks", "act", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out.split("top-1: ")[1]
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    first = manifest["prediction_top5"][0]
    assert manifest["target"]["index"] == first["index"]
    assert printed.startswith(f"{first['label']} (")
    logits = np.load(tmp_path / "o" / "activations.npz")["classifier"][0].astype(np.float64)
    ranked = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    assert [p["index"] for p in manifest["prediction_top5"]] == ranked[:5]

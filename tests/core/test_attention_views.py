"""Attention across layers and on the image (issue 43, items 2-4): rollout and its gradient-weighted form against a
plain-PyTorch implementation written here from the papers' definitions, the captured gradient of the attention
weights against autograd on the eager model, DINO's thresholded view against its ``visualize_attention.py``, and
Grad-CAM of a transformer against pytorch-grad-cam with its ViT ``reshape_transform``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image
from hookscope.core.pictures.attention import (
    attention_layers,
    dino_masks,
    gradient_rollout,
    head_maps,
    query_map,
    rollout,
    rollout_maps,
    token_layout,
)
from hookscope.core.pictures.cam import run_grad_cam

timm = pytest.importorskip("timm")
BLOCKS = [f"blocks.{i}.attn" for i in range(12)]


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()


@pytest.fixture(scope="module")
def image():
    return torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def run(vit, image):
    with HookRegistry(vit) as registry:
        for path in BLOCKS:
            registry.add(path, "attention")
        return run_image(vit, registry, image)


def reference_rollout(attentions, fusion="mean", discard=0.0, weights_of=None):
    """Abnar & Zuidema 2020 as vit-explain writes it: heads fused, the lowest share dropped (never the class token's
    own weight), (A + I) / 2 with rows renormalised, multiplied layer after layer; the class token's row, max 1."""
    tokens = attentions[0].shape[-1]
    result = torch.eye(tokens, dtype=torch.float64)
    for index, attention in enumerate(attentions):
        attention = attention.double()
        if weights_of is not None:  # gradient-weighted: the mean over heads of the positive part of grad x attention
            fused = (weights_of[index].double() * attention).clamp(min=0).mean(dim=1)[0]
        elif fusion == "mean":
            fused = attention.mean(dim=1)[0]
        elif fusion == "max":
            fused = attention.max(dim=1)[0][0]
        else:
            fused = attention.min(dim=1)[0][0]
        flat = fused.reshape(1, -1).clone()
        _, lowest = flat.topk(int(flat.size(-1) * discard), -1, False)
        lowest = lowest[lowest != 0]
        flat[0, lowest] = 0
        fused = flat.reshape(tokens, tokens)
        a = (fused + torch.eye(tokens, dtype=torch.float64)) / 2
        a = a / a.sum(dim=-1, keepdim=True)
        result = a @ result
    mask = result[0, 1:].reshape(14, 14)
    return (mask / mask.max()).numpy()


def test_the_layout_of_tokens():
    assert token_layout(197) == token_layout(197, (14, 14))
    assert (token_layout(197).prefix, token_layout(197).height) == (1, 14)
    assert (token_layout(261).prefix, token_layout(261).width) == (5, 16)  # DINOv2 with 4 registers at 224
    assert token_layout(196).prefix == 0


@pytest.mark.parametrize(("fusion", "discard"), [("mean", 0.0), ("max", 0.0), ("min", 0.0), ("mean", 0.9)])
def test_rollout_equals_the_papers_definition(run, fusion, discard):
    layers = attention_layers(run)
    assert [layer.key for layer in layers] == BLOCKS
    ours = query_map(rollout([layer.weights for layer in layers], fusion, discard), token_layout(197))
    captured = [r.tensor for r in run.records if r.kind == "attention" and r.leaf == ""]
    expected = reference_rollout(captured, fusion, discard)
    assert np.abs(ours - expected).max() <= 1e-6


def test_the_captured_gradient_of_the_attention_equals_autograd_on_the_eager_model(vit, image, run):
    eager = copy.deepcopy(vit)
    kept = []
    for path in BLOCKS:
        attention = eager.get_submodule(path)
        attention.fused_attn = False

        def keep(module, args, output):
            output.retain_grad()
            kept.append(output)

        attention.attn_drop.register_forward_hook(keep)
    scores = eager(image)
    scores[0, run.target_index].backward()
    layers = attention_layers(run)
    for layer, reference in zip(layers, kept, strict=True):
        assert layer.gradient is not None
        scale = float(reference.grad.abs().max())
        assert scale > 0 and (layer.gradient - reference.grad[0]).abs().max().item() <= 1e-5 * scale
    ours = query_map(gradient_rollout([la.weights for la in layers], [la.gradient for la in layers]), token_layout(197))
    expected = reference_rollout([k.detach() for k in kept], weights_of=[k.grad for k in kept])
    assert np.abs(ours - expected).max() <= 1e-5
    maps = rollout_maps(run)
    assert set(maps) == {"rollout", "gradient_rollout"} and maps["rollout"].shape == (14, 14)
    np.testing.assert_allclose(maps["gradient_rollout"], ours)


def test_dino_masks_equal_visualize_attention(run):
    attentions = [r for r in run.records if r.leaf == ""][-1].tensor  # the last block's weights
    maps = head_maps(attentions[0], token_layout(197))
    threshold = 0.6
    # DINO's visualize_attention.py, on the class token's attention over the patches
    nh = attentions.shape[1]
    flat = attentions[0, :, 0, 1:].reshape(nh, -1)
    val, idx = torch.sort(flat)
    val /= torch.sum(val, dim=1, keepdim=True)
    cumval = torch.cumsum(val, dim=1)
    th_attn = cumval > (1 - threshold)
    idx2 = torch.argsort(idx)
    for head in range(nh):
        th_attn[head] = th_attn[head][idx2[head]]
    expected = th_attn.reshape(nh, 14, 14).numpy()
    ours = dino_masks(maps, threshold)
    assert ours.dtype == bool and (ours == expected).mean() >= 0.99  # float32 vs float64 sums may flip a tie
    assert ours.any(axis=(1, 2)).all()


def test_grad_cam_of_a_transformer_equals_pytorch_grad_cam_with_its_vit_reshape(vit, image):
    gradcam = pytest.importorskip("pytorch_grad_cam")
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    path = "blocks.11.norm1"
    with HookRegistry(vit) as registry:
        registry.add(path, "forward")
        registry.add(path, "tensor")
        result = run_image(vit, registry, image)
    ours = run_grad_cam(result, path)

    def reshape_transform(tensor, height=14, width=14):  # pytorch-grad-cam's ViT tutorial
        result = tensor[:, 1:, :].reshape(tensor.size(0), height, width, tensor.size(2))
        return result.transpose(2, 3).transpose(1, 2)

    model = copy.deepcopy(vit)
    with gradcam.GradCAM(
        model=model, target_layers=[model.blocks[11].norm1], reshape_transform=reshape_transform
    ) as cam:
        theirs = cam(input_tensor=image.clone(), targets=[ClassifierOutputTarget(result.target_index)])[0]
    assert ours.shape == theirs.shape == (224, 224)
    assert float(ours.std()) > 0
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] >= 0.999

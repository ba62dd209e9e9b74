"""The scan's ranking of attention heads (issue 43, item 5): ``hookscope scan --attention`` ranks each head of each
attention module by how concentrated its class-token attention over the patches is on each image
(1 - H(p) / log(P)), and lists each head's top images in scan.json and on the --html page. Checked against the same
score computed here by hand from the weights a plain hook reads (timm with ``fused_attn=False``, the softmax going
into ``attn_drop``), in float64 NumPy."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.heads import check_head_modules, concentration
from hookscope.core.scan.results import HEAD_SCORE, read_scan

MODEL = "timm/test_vit"  # timm's smallest ViT: 160 px, 10 x 10 patches of 16, 6 blocks of 2 heads
TOP = 3
PREFIX, PATCHES, BLOCKS, HEADS = 1, 10 * 10, 6, 2  # the class token, then the patches


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """8 pictures of smooth random colour, of different sizes (distinct, tie-free scores)."""
    root = tmp_path_factory.mktemp("heads-images")
    rng = np.random.default_rng(3)
    for index in range(8):
        size = (int(rng.integers(90, 200)), int(rng.integers(80, 180)))
        small = rng.integers(0, 256, size=(size[1] // 8 + 2, size[0] // 8 + 2, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(root / f"photo{index:02d}.png")
    return root


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("timm")
    return load_model(MODEL, "none", seed=0)  # what the command line's --weights none opens


def plain_scores(loaded, images: list[Path]) -> dict[str, np.ndarray]:
    """(images, heads) scores per attention module, by hand: the unfused model, the softmax read going into each
    block's ``attn_drop`` (the hook people write), the class token's row over the patches renormalised, 1 minus its
    entropy over log(P)."""
    model = copy.deepcopy(loaded.module).eval()
    rows: dict[str, list[np.ndarray]] = {}
    for index, block in enumerate(model.blocks):
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_pre_hook(
            lambda _m, args, path=f"blocks.{index}.attn": rows.setdefault(path, []).append(
                args[0][0, :, 0, PREFIX:].double().numpy()
            )
        )
    with torch.no_grad():
        for path in images:
            model(loaded.preprocess.to_tensor(read_image(path)))
    scores = {}
    for path, per_image in rows.items():
        p = np.stack(per_image)  # (images, heads, patches)
        p = p / p.sum(axis=-1, keepdims=True)
        entropy = -(p * np.log(p)).sum(axis=-1)
        scores[path] = 1 - entropy / math.log(PATCHES)
    return scores


def test_the_score_is_one_on_a_single_patch_and_zero_spread_evenly():
    weights = torch.zeros(1, 2, 5, 5)  # a class token and 2 x 2 patches
    weights[0, 0, 0, 3] = 1.0  # head 0: the class token looks at one patch
    weights[0, 1, 0] = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1])  # head 1: evenly over the patches, set aside its own
    np.testing.assert_allclose(concentration(weights).numpy(), [[1.0, 0.0]], atol=1e-6)


def test_the_class_token_and_registers_are_set_aside_as_keys():
    weights = torch.zeros(1, 1, 21, 21)  # DINOv2 with registers: a class token, 4 registers, 4 x 4 patches
    weights[0, 0, 0, :5] = 0.15  # most of the class token's attention on itself and the registers ...
    weights[0, 0, 0, 5 + 6] = 0.25  # ... the rest on one patch: all of its attention over the patches
    assert concentration(weights).item() == pytest.approx(1.0, abs=1e-6)


def test_scan_attention_ranks_every_head_as_the_plain_computation_does(loaded, folder, tmp_path, capsys):
    from hookscope.cli import main

    out = tmp_path / "out"
    code = main(["scan", "--model", MODEL, "--weights", "none", "--images", str(folder), "--layers", "all",
                 "--attention", "--top", str(TOP), "--out", str(out), "--batch-size", "3", "--html"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    images = [Path(p) for p in json.loads((out / "scan.json").read_text())["images"]]
    assert images == find_images(folder)
    expected = plain_scores(loaded, images)
    data = json.loads((out / "scan.json").read_text())
    assert list(data["modules"]) == [f"blocks.{i}.attn" for i in range(BLOCKS)]  # every attention module, no other
    assert data["scan"]["heads"] == list(data["modules"]) and data["scan"]["head_score"] == HEAD_SCORE
    result = read_scan(out)
    for path, module in result.modules.items():
        scores = expected[path]
        assert module.layout.kind == "heads" and module.channels == HEADS and module.boxes is None, path
        for head in range(HEADS):
            order = sorted(range(len(images)), key=lambda i: (-scores[i, head], i))[:TOP]
            entries = module.top[head]
            assert [e.image for e in entries] == order, (path, head)
            for entry in entries:
                assert abs(entry.score - scores[entry.image, head]) <= 1e-8 and entry.box is None
            np.testing.assert_allclose(module.mean[head], scores[:, head].mean(), rtol=1e-5, atol=1e-7)
    # The page lists, per head, its top images with their scores.
    page = (out / "page" / "blocks.5.attn.html").read_text()
    assert 'id="head-1"' in page and "head 1 " in page and "Heads are ranked by" in page
    best = result.modules["blocks.5.attn"].top[1][0]
    assert f'data-image="{best.image}"' in page and f"{best.score:.4g}" in page


def test_a_module_that_is_not_attention_is_refused_in_one_line(loaded):
    with pytest.raises(HookscopeError, match=r"Only the heads of attention modules are ranked: 'blocks.0.mlp' is"):
        check_head_modules(loaded.module, ["blocks.0.attn", "blocks.0.mlp"])

"""Register tokens on a real DINOv2-with-registers (issue 43, items 1 and 2): a tiny random
``Dinov2WithRegistersModel`` (4 registers) saved with ``save_pretrained`` and served from 127.0.0.1 as the Hub, opened
the way the app opens a Hub model. Its attention modules are offered (the Attn column), their weights equal eager
``output_attentions`` while the model runs fused attention, and the pictures set the class token and the four
registers aside: the grid is the patches only, the class token the query by default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.engine.attention import attention_modules
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image
from hookscope.core.pictures.attention import attention_picture, patch_query, query_name, rollout, rollout_maps

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "chelsea.png"
TOLERANCE = 1e-6  # issue 43: max abs difference from the eager computation
REGISTERS = 4
SIDE, PATCH = 56, 14  # a 4 x 4 grid of patches: 1 class token + 4 registers + 16 patches = 21 tokens
GRID = SIDE // PATCH
NAME = "tiny/dinoreg"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.hub_server import make_dinov2_with_registers

    folder = tmp_path_factory.mktemp("hub")
    make_dinov2_with_registers(folder / NAME, SIDE, PATCH, REGISTERS)
    return folder


@pytest.fixture
def loaded(repos, tmp_path, monkeypatch):
    """The model as the app opens ``hf:tiny/dinoreg``: fetched from a real Hub server on 127.0.0.1."""
    from hookscope.core.models import hub as hub_models
    from tests.hub_server import HubServer, use_hub
    from tests.loopback import serving

    with serving(HubServer(repos)) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        yield hub_models.load_hub_model(f"hf:{NAME}")


def _run(loaded):
    paths = list(attention_modules(loaded.module))
    with HookRegistry(loaded.module) as registry:
        for path in paths:
            registry.add(path, "attention")
        return paths, run_image(loaded, registry, Image.open(SAMPLE).convert("RGB"))


def test_the_attn_column_is_offered_for_every_layer_of_a_dinov2_with_registers(loaded):
    dinov2 = loaded.module.encoder  # the app's image encoder around the Hub model
    assert type(dinov2).__name__ == "Dinov2WithRegistersModel" and dinov2.config.num_register_tokens == REGISTERS
    assert dinov2.config._attn_implementation == "sdpa"  # the fused path: the weights never exist as a tensor
    offered = HookRegistry(loaded.module).attention_modules()  # what the tree's Attn column shows a box for
    assert list(offered) == [f"encoder.encoder.layer.{i}.attention" for i in range(2)]
    assert all(support.capturable and support.heads == 2 for support in offered.values())


def test_the_weights_equal_eager_output_attentions_with_the_registers_in_the_sequence(loaded):
    from transformers import Dinov2WithRegistersModel

    from hookscope.core.models import hub as hub_models

    paths, result = _run(loaded)
    captured = {r.key: r.tensor for r in result.records if r.kind == "attention" and r.leaf == ""}
    assert sorted(captured) == sorted(paths)
    assert tuple(result.input.shape[-2:]) == (SIDE, SIDE)  # the processor's crop: a 4 x 4 grid
    folder = hub_models.cached_snapshot(NAME)
    eager = Dinov2WithRegistersModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = eager(pixel_values=result.input, output_attentions=True).attentions
    assert len(expected) == len(paths)
    tokens = 1 + REGISTERS + GRID * GRID
    for path, reference in zip(paths, expected, strict=True):
        assert captured[path].shape == reference.shape == (1, 2, tokens, tokens)
        assert (captured[path] - reference).abs().max().item() <= TOLERANCE, path


def test_the_pictures_set_the_class_token_and_the_registers_aside(loaded):
    paths, result = _run(loaded)
    key = paths[-1]
    weights = next(r.tensor for r in result.records if r.key == key and r.leaf == "")[0].double()  # (heads, N, N)
    prefix = 1 + REGISTERS
    picture = attention_picture(result, key)  # the panel's default: each head, the class token's query
    assert (picture.layout.prefix, picture.layout.height, picture.layout.width) == (prefix, GRID, GRID)
    assert picture.query == 0 and "the class token" in picture.caption
    assert picture.tiles.shape == (2, GRID, GRID)
    for head in range(2):  # the class token's row over the 16 patch keys only, each tile scaled to its maximum
        row = weights[head, 0, prefix:].reshape(GRID, GRID)
        np.testing.assert_allclose(picture.tiles[head], (row / row.max()).numpy(), rtol=1e-5, atol=1e-6)
    assert [query_name(picture.layout, q) for q in range(1, prefix)] == [
        f"prefix token {q} (a register)" for q in range(1, prefix)
    ]
    # A click on the input's bottom-right patch makes that patch the query: token 5 + 15, never a register.
    assert patch_query(picture.layout, SIDE - 1, SIDE - 1, SIDE, SIDE) == prefix + GRID * GRID - 1
    # Rollout: the class token's row of the joint attention over the patches, registers set aside here too.
    joint = rollout([r.tensor[0] for r in result.records if r.kind == "attention" and r.leaf == ""])
    expected = joint[0, prefix:].reshape(GRID, GRID)
    maps = rollout_maps(result)
    np.testing.assert_allclose(maps["rollout"], (expected / expected.max()).numpy(), rtol=1e-5, atol=1e-6)

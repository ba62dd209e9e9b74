"""Attention weights through hooks (issue 43, items 1 and 7): the Attn tick's capture equals the eager computation
(transformers' ``output_attentions=True`` with ``attn_implementation="eager"``, timm with ``fused_attn=False``,
``nn.MultiheadAttention``'s own weights) while the model runs fused attention; modules not ticked keep running the
fused kernel; what cannot be captured exactly is refused with the reason."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attention_models import OpaqueAttention
from PIL import Image
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.attention import ATTENTION_METHOD, attention_modules
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "chelsea.png"
TOLERANCE = 1e-6  # issue 43: max abs difference from the eager computation


def attention_records(model: nn.Module, x: torch.Tensor, paths: list[str]) -> dict[str, torch.Tensor]:
    """Tick Attn on ``paths`` and run ``x`` the one way every front end does; the weights by module."""
    with HookRegistry(model) as registry:
        for path in paths:
            registry.add(path, "attention")
        result = run_image(model, registry, x)
    records = {r.key: r.tensor for r in result.records if r.kind == "attention" and r.leaf == ""}  # not PATH/grad
    assert sorted(records) == sorted(paths)
    return records


class FusedKernels(TorchDispatchMode):
    """Counts the fused attention kernels that really ran (the aten ops under scaled_dot_product_attention)."""

    def __init__(self) -> None:
        super().__init__()
        self.fused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in func.name() and "backward" not in func.name():
            self.fused += 1
        return func(*args, **(kwargs or {}))


# ---- timm --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vit_tiny():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()


def test_timm_fused_attention_weights_equal_the_unfused_computation(vit_tiny):
    model = vit_tiny
    assert all(block.attn.fused_attn for block in model.blocks)  # the model runs scaled_dot_product_attention
    paths = [f"blocks.{i}.attn" for i in range(len(model.blocks))]
    assert list(attention_modules(model)) == paths
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    captured = attention_records(model, x, paths)

    eager = copy.deepcopy(model)
    expected: dict[str, torch.Tensor] = {}
    for path in paths:  # timm's own weights: what attn_drop is given when fused_attn is False
        attention = eager.get_submodule(path)
        attention.fused_attn = False
        attention.attn_drop.register_forward_hook(lambda m, a, out, p=path: expected.__setitem__(p, out.detach()))
    with torch.no_grad():
        eager(x)
    for path in paths:
        assert captured[path].shape == (1, 3, 197, 197)
        assert (captured[path] - expected[path]).abs().max().item() <= TOLERANCE, path


def test_an_attn_tick_is_two_hooks_on_the_module_and_unticking_removes_them(vit_tiny):
    attention = vit_tiny.blocks[2].attn
    before = (len(attention._forward_pre_hooks), len(attention._forward_hooks))
    registry = HookRegistry(vit_tiny)
    info = registry.add("blocks.2.attn", "attention")
    assert info.method == ATTENTION_METHOD
    assert (len(attention._forward_pre_hooks), len(attention._forward_hooks)) == (before[0] + 1, before[1] + 1)
    registry.remove("blocks.2.attn", "attention")
    assert (len(attention._forward_pre_hooks), len(attention._forward_hooks)) == before


def test_modules_not_ticked_keep_running_the_fused_kernel(vit_tiny):
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        alone = vit_tiny(x)
    with HookRegistry(vit_tiny) as registry:
        registry.add("blocks.0.norm1", "forward")  # a run with no Attn tick
        run_image(vit_tiny, registry, x)  # the first run surveys the model (one more forward pass)
        with FusedKernels() as kernels:
            plain = run_image(vit_tiny, registry, x)
        assert kernels.fused == 12
        assert torch.equal(plain.scores, alone)  # the same kernels, the same numbers as the model alone
        registry.add("blocks.3.attn", "attention")
        with FusedKernels() as kernels:
            ticked = run_image(vit_tiny, registry, x)
        assert kernels.fused == 11  # only the ticked module computes its attention explicitly
    assert [r.key for r in ticked.records if r.kind == "attention"] == ["blocks.3.attn", "blocks.3.attn/grad"]
    assert (ticked.scores - alone).abs().max().item() < 1e-4  # the explicit attention gives the model its output


def test_between_runs_a_tick_leaves_the_module_fused(vit_tiny):
    x = torch.randn(1, 3, 224, 224)
    with HookRegistry(vit_tiny) as registry:
        registry.add("blocks.5.attn", "attention")
        with torch.no_grad(), FusedKernels() as kernels:
            vit_tiny(x)  # the model called by its owner, not recording: the tick costs nothing
    assert kernels.fused == 12


# ---- transformers --------------------------------------------------------------------------------------------------
def _vit():
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                              image_size=32, patch_size=8))  # fmt: skip


def _deit():
    from transformers import DeiTConfig, DeiTModel

    return DeiTModel(DeiTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                                image_size=32, patch_size=8))  # fmt: skip


def _dinov2():
    from transformers import Dinov2Config, Dinov2Model

    return Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                                    image_size=32, patch_size=8))  # fmt: skip


def _clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return CLIPVisionModel(CLIPVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=37, image_size=32, patch_size=8))  # fmt: skip


def _siglip_vision():
    from transformers import SiglipVisionConfig, SiglipVisionModel

    return SiglipVisionModel(SiglipVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                intermediate_size=37, image_size=32, patch_size=8))  # fmt: skip


@pytest.mark.parametrize("build", [_vit, _deit, _dinov2, _clip_vision, _siglip_vision],
                         ids=["vit", "deit", "dinov2", "clip", "siglip"])  # fmt: skip
def test_transformers_sdpa_attention_weights_equal_output_attentions_of_eager(build):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = build().eval()
    assert model.config._attn_implementation == "sdpa"  # the fused path: the weights never exist
    paths = list(attention_modules(model))
    assert all(support.capturable for support in attention_modules(model).values())
    layers = paths[:2]  # the encoder's, in order; SigLIP's pooling head (an nn.MultiheadAttention) comes last
    assert paths[2:] == (["head.attention"] if build is _siglip_vision else [])
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    captured = attention_records(model, x, paths)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        expected = eager(pixel_values=x, output_attentions=True).attentions
    for path, weights in zip(layers, expected, strict=True):
        assert captured[path].shape == weights.shape
        assert (captured[path] - weights).abs().max().item() <= TOLERANCE, path


def test_eager_transformers_attention_is_captured_as_computed():
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = _vit().eval()
    model.set_attn_implementation("eager")
    x = torch.randn(1, 3, 32, 32)
    captured = attention_records(model, x, list(attention_modules(model)))
    with torch.no_grad():
        expected = model(pixel_values=x, output_attentions=True).attentions
    for weights, reference in zip(captured.values(), expected, strict=True):
        assert torch.equal(weights, reference)


# ---- the Hub (a real one on 127.0.0.1) ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.hub_server import make_clip, make_vit

    folder = tmp_path_factory.mktemp("hub")
    make_vit(folder / "tiny" / "vit")
    make_clip(folder / "tiny" / "clip")
    return folder


@pytest.fixture
def hub(repos, tmp_path, monkeypatch):
    from tests.hub_server import HubServer, use_hub
    from tests.loopback import serving

    with serving(HubServer(repos)) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        yield server


def test_hub_vit_and_clip_attention_equal_eager_output_attentions(hub):
    from transformers import CLIPModel, ViTForImageClassification

    from hookscope.core.models import hub as hub_models

    image = Image.open(SAMPLE).convert("RGB")
    for name, eager_of in (
        ("tiny/vit", lambda folder: ViTForImageClassification.from_pretrained(folder, attn_implementation="eager")),
        ("tiny/clip", lambda folder: CLIPModel.from_pretrained(folder, attn_implementation="eager").vision_model),
    ):
        loaded = hub_models.load_hub_model(f"hf:{name}")
        paths = list(attention_modules(loaded.module))
        assert paths and loaded.module.config._attn_implementation == "sdpa"
        with HookRegistry(loaded.module) as registry:
            for path in paths:
                registry.add(path, "attention")
            result = run_image(loaded, registry, image)
        captured = [r.tensor for r in result.records if r.kind == "attention" and r.leaf == ""]
        eager = eager_of(str(hub_models.cached_snapshot(name))).eval()
        with torch.no_grad():
            expected = eager(pixel_values=result.input, output_attentions=True).attentions
        assert len(captured) == len(expected) == len(paths)
        for weights, reference in zip(captured, expected, strict=True):
            assert (weights - reference).abs().max().item() <= TOLERANCE, name


# ---- nn.MultiheadAttention ---------------------------------------------------------------------------------------
class TinyEncoder(nn.Module):
    """Patches -> a TransformerEncoderLayer (its MultiheadAttention runs scaled_dot_product_attention, no weights
    asked for) -> a MultiheadAttention pooling called with its default need_weights=True -> classes."""

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 16, 8, 8)
        self.layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.query = nn.Parameter(torch.randn(1, 1, 16))
        self.pool = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.layer(self.patches(x).flatten(2).transpose(1, 2))
        pooled, _ = self.pool(self.query.expand(x.shape[0], -1, -1), tokens, tokens)
        return self.head(pooled[:, 0])


def test_multihead_attention_weights_equal_its_own_per_head_weights():
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    assert list(attention_modules(model)) == ["layer.self_attn", "pool"]
    x = torch.randn(1, 3, 32, 32)
    captured = attention_records(model, x, ["layer.self_attn", "pool"])
    kept: dict[str, torch.Tensor] = {}

    def own_weights(path):
        def hook(module, args, kwargs):  # the same call, asking MultiheadAttention for its weights per head
            kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False}
            kept[path] = module.forward(*args, **kwargs)[1].detach()

        return hook

    for path in ("layer.self_attn", "pool"):
        model.get_submodule(path).register_forward_pre_hook(own_weights(path), with_kwargs=True)
    model(x)  # with gradients, as a run: no fast path that would skip the module's call
    assert captured["layer.self_attn"].shape == (1, 4, 16, 16) and captured["pool"].shape == (1, 2, 1, 16)
    for path, weights in captured.items():
        assert (weights - kept[path]).abs().max().item() <= TOLERANCE, path


# ---- what cannot be captured is said -----------------------------------------------------------------------------
class Opaque(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 8, 8)
        self.attn = OpaqueAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.embed(x).flatten(2).transpose(1, 2)).mean(1)


def test_a_module_whose_weights_cannot_be_read_is_refused_with_the_reason():
    model = Opaque()
    support = attention_modules(model)["attn"]
    assert not support.capturable and "neither a softmax nor" in support.reason
    registry = HookRegistry(model)
    with pytest.raises(HookscopeError, match="cannot be captured: OpaqueAttention's code calls neither"):
        registry.add("attn", "attention")
    assert not model.attn._forward_pre_hooks and not model.attn._forward_hooks


def test_a_flash_attention_kernel_is_refused_with_the_reason():
    pytest.importorskip("transformers")
    model = _vit()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(HookscopeError, match="'flash_attention_2' attention kernel.*attn_implementation='sdpa'"):
        HookRegistry(model).add("layers.0.attention", "attention")


def test_a_model_without_attention_has_no_attention_modules_and_refuses_the_kind():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None)
    assert attention_modules(model) == {}
    with pytest.raises(
        HookscopeError, match="'layer1' \\(Sequential\\) is not an attention module; the model has none"
    ):
        HookRegistry(model).add("layer1", "attention")


def test_the_command_line_refuses_an_uncapturable_module_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--model", "resnet18", "--weights", "none",
         "--image", str(SAMPLE), "--layers", "layer1", "--hooks", "attn", "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'layer1' (Sequential) is not an attention module; the model has none" in lines[0]


# ---- the command line and the Python API -------------------------------------------------------------------------
def hookscope_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hookscope", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))  # fmt: skip


def test_export_hooks_attn_writes_every_attention_module_and_the_rollout_maps(tmp_path):
    import json

    import numpy as np

    from hookscope.core.pictures.attention import gradient_rollout, query_map, rollout, token_layout

    out = tmp_path / "out"
    done = hookscope_cli("export", "--model", "timm/vit_tiny_patch16_224", "--weights", "none", "--image", SAMPLE,
                         "--hooks", "attn", "--out", out, "--no-png")  # fmt: skip
    assert done.returncode == 0, done.stderr
    archive = np.load(out / "attention.npz")
    paths = [f"blocks.{i}.attn" for i in range(12)]
    assert sorted(archive.files) == sorted(paths + [f"{p}/grad" for p in paths])  # the Attn modules only
    weights = [torch.from_numpy(archive[p][0]) for p in paths]
    assert all(w.shape == (3, 197, 197) for w in weights)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(3, 197))
    maps = np.load(out / "attention_rollout.npz")
    layout = token_layout(197)
    np.testing.assert_allclose(maps["rollout"], query_map(rollout(weights), layout), atol=1e-6)
    grads = [torch.from_numpy(archive[f"{p}/grad"][0]) for p in paths]
    np.testing.assert_allclose(maps["gradient_rollout"], query_map(gradient_rollout(weights, grads), layout), atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["modules"]["blocks.0.attn"]["records"][0]["shape"] == [1, 3, 197, 197]


def test_export_hooks_attn_on_a_model_without_attention_is_one_line(tmp_path):
    done = hookscope_cli("export", "--model", "resnet18", "--weights", "none", "--image", SAMPLE, "--hooks", "attn",
                         "--out", tmp_path / "out")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "hookscope: error: The model has no attention module whose weights can be captured (attn)."
    ]
    assert not (tmp_path / "out").exists()


def test_hookscope_capture_returns_the_attention_and_its_rollout(vit_tiny):
    import hookscope

    x = torch.randn(1, 3, 224, 224)
    capture = hookscope.capture(vit_tiny, x, hooks={f"blocks.{i}.attn": ["attn"] for i in range(12)})
    assert capture.attention["blocks.0.attn"].shape == (1, 3, 197, 197)
    assert capture.attention["blocks.0.attn/grad"].shape == (1, 3, 197, 197)
    maps = capture.attention_rollout()
    assert set(maps) == {"rollout", "gradient_rollout"} and maps["rollout"].shape == (14, 14)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in vit_tiny.modules())  # every hook removed


def test_the_attention_bench_times_every_side_and_leaves_no_hook():
    from hookscope.core.bench.attention import attention_benchmark, report

    model = TinyEncoder()
    result = attention_benchmark(model, size=32, repeat=2, warmup=0)
    assert result.modules == 2 and set(result.times) == {"alone", "idle", "ticked"}  # no fused_attn switch here
    assert all(len(times) == 2 and min(times) > 0 for times in result.times.values())
    lines = report(result, "tiny")
    assert "idle/alone" in lines[1] and "ticked/alone" in lines[1]
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())


def test_the_inspectors_snippet_of_an_attn_tick_captures_the_same_weights(vit_tiny):
    from hookscope.core.teaching.snippets import kind_hook, snippet_for

    assert kind_hook("attention").startswith("register_forward_pre_hook + register_forward_hook")
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(7))
    with HookRegistry(vit_tiny) as registry:
        info = registry.add("blocks.1.attn", "attention")
        expected = run_image(vit_tiny, registry, x).records[0].tensor
        snippet = snippet_for(registry, info)
    fresh = copy.deepcopy(vit_tiny)
    namespace = {"model": fresh, "torch": torch, "captured": {}}
    exec(compile(snippet, "<snippet>", "exec"), namespace)  # plain PyTorch, as the hook inspector shows it
    with torch.no_grad():
        fresh(x)
    assert (namespace["captured"]["attention:blocks.1.attn"] - expected).abs().max().item() <= TOLERANCE

"""``hookscope export --hooks attn ... --script OUT.py`` writes plain PyTorch that reproduces ``attention.npz`` bit
for bit (issue 43, item 5): the weights of every ticked attention module and their gradients ("PATH/grad").

The written script runs in a fresh process with nothing of Hookscope imported (``test_script_export``'s runner), and
every array it saves must equal the export's exactly (``np.array_equal``, not a tolerance): timm's
``vit_tiny_patch16_224`` with random weights (its fused ``scaled_dot_product_attention``), and a model file whose
``nn.MultiheadAttention`` modules are called without weights (inside ``nn.TransformerEncoderLayer``) and with their
mean over heads (the pooling query).
"""

from __future__ import annotations

import numpy as np
from test_script_export import _exported, _picture, _run_script

from hookscope.cli import main


def _equal(saved, expected: dict[str, np.ndarray]) -> list[str]:
    """The keys whose arrays differ (shape, dtype or any bit of a value) between the script's file and the export."""
    with np.load(saved) as archive:
        got = {key: archive[key] for key in archive.files}
    assert sorted(got) == sorted(expected)
    return [k for k, v in expected.items() if got[k].dtype != v.dtype or not np.array_equal(got[k], v)]


def _export_with_script(tmp_path, capsys, *model_args: str, layers: str) -> tuple[str, dict[str, np.ndarray]]:
    image = _picture(tmp_path / "photo.png", 4, (150, 110))
    out, script = tmp_path / "out", tmp_path / "redo.py"
    argv = ["export", *model_args, "--image", str(image), "--layers", layers, "--hooks", "attn", "--no-png",
            "--out", str(out), "--script", str(script)]  # fmt: skip
    assert main(argv) == 0
    assert f"script that redoes the run of {image} in plain PyTorch: {script}" in capsys.readouterr().err
    text = script.read_text()
    compile(text, str(script), "exec")
    _run_script(script, tmp_path / "captures.npz", tmp_path)
    return text, _exported(out)


def test_the_script_of_a_vit_reproduces_attention_npz_bit_for_bit(tmp_path, capsys):
    paths = ["blocks.0.attn", "blocks.5.attn", "blocks.11.attn"]
    text, expected = _export_with_script(
        tmp_path, capsys, "--model", "timm/vit_tiny_patch16_224", "--weights", "none", "--seed", "7",
        layers=",".join(paths),
    )  # fmt: skip
    assert "class AttentionMode(torch.overrides.TorchFunctionMode):" in text
    assert "handles.extend(attention_hooks(model.get_submodule(\"blocks.0.attn\"), 'blocks.0.attn'))" in text
    assert "register_forward_hook(leave, always_call=True)" in text
    keys = {f"attention/{p}" for p in paths} | {f"attention/{p}/grad" for p in paths}
    assert keys <= set(expected) and expected["attention/blocks.0.attn"].shape == (1, 3, 197, 197)
    assert _equal(tmp_path / "captures.npz", expected) == []


MODEL_FILE = '''
import torch
from torch import nn


class Encoder(nn.Module):
    """Patches, a transformer encoder layer (its nn.MultiheadAttention called with need_weights=False), then one
    query pooling the tokens through another nn.MultiheadAttention (called with its weights averaged over heads)."""

    def __init__(self):
        super().__init__()
        self.patches = nn.Conv2d(3, 16, 8, 8)
        self.layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.pool = nn.MultiheadAttention(16, 2, batch_first=True)
        self.query = nn.Parameter(torch.randn(1, 1, 16))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        tokens = self.layer(self.patches(x).flatten(2).transpose(1, 2))
        pooled, _ = self.pool(self.query.expand(x.shape[0], -1, -1), tokens, tokens)
        return self.head(pooled[:, 0])


def build():
    return Encoder()
'''


def test_the_script_of_multihead_attention_reproduces_attention_npz_bit_for_bit(tmp_path, capsys):
    source = tmp_path / "encoder.py"
    source.write_text(MODEL_FILE)
    text, expected = _export_with_script(
        tmp_path, capsys, "--model-file", f"{source}:build", "--trust", "--seed", "2", "--target", "3",
        layers="layer.self_attn,pool",
    )  # fmt: skip
    assert "torch.nn.functional.multi_head_attention_forward" in text
    assert expected["attention/layer.self_attn"].shape[:2] == (1, 4) and expected["attention/pool"].shape[:3] == (
        1, 2, 1)  # fmt: skip
    assert {"attention/layer.self_attn/grad", "attention/pool/grad"} <= set(expected)
    assert _equal(tmp_path / "captures.npz", expected) == []

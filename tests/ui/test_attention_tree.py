"""The tree's Attn column (issue 43, items 1 and 7): shown only for a model with attention modules, a box only on
those modules, disabled with the reason where the weights cannot be read exactly, and a click that puts the hooks on
the live module and records the weights in the next run."""

from __future__ import annotations

import pytest
import torch
from attention_models import OpaqueAttention
from PySide6.QtCore import Qt
from torch import nn

from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.tree import module_tree
from hookscope.ui.widgets.module_tree import ATTENTION, HEADERS, TOOLTIP, ModuleTreeModel
from hookscope.ui.widgets.module_tree_view import ModuleTreeView

RUN_TIMEOUT_MS = 120_000
CHECKED = Qt.CheckState.Checked


class TwoAttentions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.opaque = OpaqueAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.opaque(self.mha(x, x, x)[0])


def tree_of(model: nn.Module, qtbot) -> tuple[ModuleTreeModel, ModuleTreeView]:
    tree = ModuleTreeModel()
    view = ModuleTreeView(tree)
    qtbot.addWidget(view)
    tree.set_model(module_tree(model), HookRegistry(model), type(model).__name__)
    return tree, view


def test_the_attn_column_shows_only_for_a_model_with_attention(qtbot) -> None:
    torchvision = pytest.importorskip("torchvision")
    tree, view = tree_of(TwoAttentions(), qtbot)
    assert HEADERS[ATTENTION] == "Attn" and not view.tree.isColumnHidden(ATTENTION)
    resnet = torchvision.models.resnet18(weights=None)
    tree.set_model(module_tree(resnet), HookRegistry(resnet), "resnet18")
    assert not tree.has_attention and view.tree.isColumnHidden(ATTENTION)


def test_a_box_only_on_attention_modules_and_a_disabled_one_says_why(qtbot) -> None:
    model = TwoAttentions()
    tree, _ = tree_of(model, qtbot)
    check = Qt.ItemDataRole.CheckStateRole
    mha, opaque, linear = (tree.index_of(path, ATTENTION) for path in ("mha", "opaque", "opaque.proj"))
    assert mha.data(check) is not None and mha.flags() & Qt.ItemFlag.ItemIsUserCheckable
    assert linear.data(check) is None  # not an attention module: no box
    assert not opaque.flags() & Qt.ItemFlag.ItemIsEnabled  # the box is there, disabled
    assert "Attn cannot be ticked: OpaqueAttention's code calls neither a softmax" in tree.data(opaque, TOOLTIP)
    asked: list = []
    tree.tick_requested.connect(lambda pairs, ticked: asked.append(pairs))
    assert not tree.setData(opaque, CHECKED, check) and not asked  # a click asks for nothing
    assert tree.setData(mha, CHECKED, check) and asked == [[("mha", "attention")]]


def test_ticking_attn_hooks_the_module_and_the_run_records_its_weights(qtbot) -> None:
    pytest.importorskip("timm")
    from hookscope.ui.state.workspace import Workspace

    space = Workspace(weights="none", ticks=["blocks.0.norm1"])
    space.attach_view(lambda: (300, 300))
    try:
        with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
            space.start("timm/vit_tiny_patch16_224", None)
        tree = ModuleTreeModel()
        tree.tick_requested.connect(space.set_ticked)  # direct, as the window wires it
        space.hooks_changed.connect(tree.show_ticks)
        tree.set_model(space.nodes, space.registry, space.loaded.name)
        attention = space.loaded.module.get_submodule("blocks.4.attn")
        hooks = len(attention._forward_pre_hooks), len(attention._forward_hooks)
        with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
            assert tree.setData(tree.index_of("blocks.4.attn", ATTENTION), CHECKED, Qt.ItemDataRole.CheckStateRole)
        assert (len(attention._forward_pre_hooks), len(attention._forward_hooks)) == (hooks[0] + 1, hooks[1] + 1)
        assert tree.index_of("blocks.4.attn", ATTENTION).data(Qt.ItemDataRole.CheckStateRole) == CHECKED
        weights = next(r.tensor for r in space.last.result.records if (r.kind, r.key) == ("attention", "blocks.4.attn"))
        assert weights.shape == (1, 3, 197, 197)
        torch.testing.assert_close(weights.sum(-1), torch.ones(1, 3, 197))
    finally:
        space.shutdown()

"""The window's parts on their own: pictures (no Qt), the image list, the tree model, one record panel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPointF, Qt
from torch import nn

from hookscope.core.engine.hooks import HookRegistry, Record
from hookscope.core.engine.tree import NOT_RUN_REASON, default_ticks, module_tree, survey
from hookscope.core.pictures.panels import PanelSettings, picture_of, prepare_pictures
from hookscope.ui.state.image_queue import ImageQueue, push_recent
from hookscope.ui.widgets.feature_map_panel import FeatureMapPanel
from hookscope.ui.widgets.module_tree import ACTIVATIONS, GRAD_INPUTS, GRADIENTS, NAME, SHAPE, ModuleTreeModel


def record(tensor: torch.Tensor, kind: str = "forward", path: str = "layer") -> Record:
    return Record(path, kind, 0, "", "register_forward_hook", tensor)


# ---- pictures -------------------------------------------------------------------------------------------------


def test_sorting_by_mean_puts_the_strongest_channel_first() -> None:
    maps = torch.zeros(1, 4, 3, 3)
    for channel, level in enumerate((1.0, 5.0, 3.0, 0.5)):
        maps[0, channel] = level
        maps[0, channel, 0, 0] = 0.0  # so per-channel scaling has a range
    picture = picture_of(record(maps), PanelSettings(sort="mean"))
    assert list(picture.arrangement.order) == [1, 2, 0, 3]
    layout = picture.arrangement.layout
    assert layout.tile_at(1, 1) == 1  # the first tile shows channel 1
    unsorted = picture.with_settings(PanelSettings())
    assert unsorted.arrangement.order is None and unsorted.arrangement.layout.tile_at(1, 1) == 0
    recoloured = picture.with_settings(PanelSettings(colormap="magma", sort="mean"))
    assert recoloured.arrangement is picture.arrangement  # a colormap change redraws nothing


def test_gradient_pictures_show_magnitudes_and_pooled_features_become_bars() -> None:
    grad = -torch.arange(8, dtype=torch.float32).reshape(1, 2, 2, 2)
    for kind in ("tensor", "grad_input", "backward"):  # Grad, Grad in, and a full backward hook's grad_output
        picture = picture_of(record(grad, kind=kind), PanelSettings())
        assert picture.is_gradient and (picture.channels.data >= 0).all()
        np.testing.assert_array_equal(picture.channels.data, np.abs(grad[0].numpy()))
    pooled = picture_of(record(torch.randn(1, 512, 1, 1)), PanelSettings(sort="max"))
    assert pooled.channels.kind == "vector" and pooled.channels.data.shape == (512,)
    values = pooled.arrangement.values
    assert (np.diff(values) <= 0).all()  # sorted, highest first


def test_prepare_uses_each_pairs_own_settings() -> None:
    records = [record(torch.randn(1, 3, 4, 4), path="a"), record(torch.randn(1, 3, 4, 4), path="b")]
    chosen = {("b", "forward"): PanelSettings(scaling="shared")}
    pictures = prepare_pictures(records, lambda p, k: chosen.get((p, k), PanelSettings()))
    assert [p.settings.scaling for p in pictures] == ["channel", "shared"]


def test_image_queue_steps_round_and_recent_files_stay_unique(tmp_path) -> None:
    queue = ImageQueue()
    assert queue.step(1) is None
    assert queue.replace(["a.png", "b.png", "c.png"]) == "a.png"
    assert queue.step(1) == "b.png" and queue.step(1) == "c.png" and queue.step(1) == "a.png"
    assert queue.step(-1) == "c.png"
    recent = push_recent([], str(tmp_path / "x.png"))
    recent = push_recent(recent, str(tmp_path / "y.png"))
    recent = push_recent(recent, str(tmp_path / "x.png"))
    assert recent == [str(tmp_path / "x.png"), str(tmp_path / "y.png")]
    assert len(push_recent([f"/{n}" for n in range(20)], "/new")) == 10


# ---- the tree model -------------------------------------------------------------------------------------------


class Skipping(nn.Module):
    """``unused`` is a child that never runs: the tree greys it out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.unused = nn.Linear(2, 2)
        self.conv2 = nn.Conv2d(4, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv(x))


def test_tree_model_asks_for_ticks_reads_them_from_the_registry_and_greys_modules_that_did_not_run(qtbot) -> None:
    model = Skipping().eval()
    registry = HookRegistry(model)
    tree = ModuleTreeModel()
    tree.set_model(module_tree(model), registry, "toy")
    asked: list = []

    def apply(pairs, ticked) -> None:  # what the workspace does with the request (a direct connection)
        asked.append((list(pairs), ticked))
        for path, kind in pairs:
            (registry.add if ticked else registry.remove)(path, kind)
        tree.show_ticks([(path, kind, ticked) for path, kind in pairs])

    tree.tick_requested.connect(apply)
    index = tree.index_of("conv", ACTIVATIONS)
    assert tree.flags(index) & Qt.ItemFlag.ItemIsUserCheckable
    assert tree.setData(index, Qt.CheckState.Checked.value, Qt.ItemDataRole.CheckStateRole)  # an int works too
    assert len(model.conv._forward_hooks) == 1 and registry.has("conv", "forward")  # on when setData returns
    assert asked == [([("conv", "forward")], True)]
    tree.setData(index, Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)  # ticking twice asks nothing
    assert len(model.conv._forward_hooks) == 1 and len(asked) == 1

    tree.set_ticked([(p, "tensor") for p in tree.paths_of_type("Conv2d")], True)
    assert len(asked) == 2 and len(asked[1][0]) == 2  # one request for the batch
    assert tree.data(tree.index_of("conv2", GRADIENTS), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    assert len(model.conv2._forward_hooks) == 1 and not model.conv2._backward_hooks  # Grad: a tensor hook
    assert tree.setData(tree.index_of("conv2", GRAD_INPUTS), Qt.CheckState.Checked, Qt.ItemDataRole.CheckStateRole)
    assert registry.has("conv2", "grad_input") and model.conv2._backward_hooks  # Grad in: a full backward hook
    assert tree.data(tree.index_of("conv2", GRAD_INPUTS), Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    assert [tree.headerData(c, Qt.Orientation.Horizontal) for c in range(tree.columnCount())][1:5] == [
        "In",
        "Act",
        "Grad",
        "Grad\nin",
    ]  # Grad in on two lines: the four fit a narrow dock

    assert tree.data(tree.index_of("unused", NAME), Qt.ItemDataRole.ForegroundRole) is None  # no run yet
    tree.set_survey(survey(model, torch.randn(1, 3, 8, 8)))
    assert tree.data(tree.index_of("unused", NAME), Qt.ItemDataRole.ForegroundRole) is not None
    assert NOT_RUN_REASON in tree.data(tree.index_of("unused", NAME), Qt.ItemDataRole.ToolTipRole)
    assert tree.data(tree.index_of("conv", NAME), Qt.ItemDataRole.ForegroundRole) is None
    assert tree.data(tree.index_of("conv2", SHAPE)) == "1×4×4×4"
    assert tree.data(tree.index_of("unused", SHAPE)) == "did not run"

    tree.setData(index, Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole)
    assert len(model.conv._forward_hooks) == 1  # Act's hook went; Grad's (it puts the tensor hook on) stays
    registry.clear()


def test_tree_structure_matches_the_module_tree(qtbot) -> None:
    model = Skipping()
    tree = ModuleTreeModel()
    tree.set_model(module_tree(model), HookRegistry(model), "toy")
    root = tree.index(0, 0)
    assert tree.rowCount() == 1 and tree.rowCount(root) == 3
    child = tree.index(1, 0, root)
    assert tree.node(child).path == "unused" and tree.parent(child) == root


def test_default_checks_pick_an_early_and_a_late_layer() -> None:
    nodes = module_tree(Skipping())
    assert default_ticks("resnet18", module_tree(__import__("torchvision").models.resnet18())) == [
        "layer1.0.conv1",
        "layer4.1.conv2",
    ]
    assert len(default_ticks("toy", nodes)) == 2


# ---- one record panel -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("channels, side", [(64, 56), (2048, 7)])
def test_panel_hover_finds_every_tile_by_arithmetic(qtbot, channels: int, side: int) -> None:
    values = torch.arange(channels * side * side, dtype=torch.float32).reshape(1, channels, side, side)
    picture = picture_of(record(values), PanelSettings())
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.resize(500, 500)
    panel.show()
    panel.show_picture(picture)
    qtbot.waitExposed(panel)
    layout = picture.arrangement.layout
    for channel in (0, 1, channels // 2, channels - 1):
        x, y = layout.tile_origin(channel)
        scene = panel._viewbox.mapViewToScene(QPointF(x + 0.5, y + 0.5))
        hit = panel.channel_at(scene)
        assert hit is not None and hit[0] == channel
        assert hit[1] == pytest.approx(float(values[0, channel, 0, 0]))
    painted = panel._mosaic.rendered
    assert painted.arrangement is picture.arrangement and painted.lut == "viridis"
    assert picture.arrangement.image.dtype == np.uint8


def test_panel_settings_redraw_without_a_run(qtbot) -> None:
    values = torch.rand(1, 16, 5, 5)
    values[0, 7] += 10
    panel = FeatureMapPanel("layer", "forward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.show_picture(picture_of(record(values), PanelSettings()))
    changed: list = []
    panel.settings_changed.connect(lambda path, kind, settings: changed.append(settings))
    panel.choose(sort="mean")
    assert changed[-1].sort == "mean"
    assert panel.picture.arrangement.layout.tile_at(0, 0) == 7
    panel.colormap_box.set_value("gray", notify=True)  # as its menu does
    assert changed[-1].colormap == "gray"
    painted = panel._mosaic.rendered.qimage  # the grey table: a mosaic value v paints as (v, v, v)
    mosaic = panel.picture.arrangement.image
    assert painted.size().toTuple() == mosaic.shape[::-1]
    assert painted.pixelColor(0, 0).getRgb()[:3] == (int(mosaic[0, 0]),) * 3


def test_panel_drop_down_menus_change_the_settings(qtbot) -> None:
    from PySide6.QtWidgets import QMenu

    values = torch.rand(1, 16, 5, 5)
    panel = FeatureMapPanel("layer", "backward", "layer", PanelSettings())
    qtbot.addWidget(panel)
    panel.show()
    panel.show_picture(picture_of(record(values, kind="backward"), PanelSettings()))
    qtbot.mouseClick(panel.scaling_box, Qt.MouseButton.LeftButton)
    menu = panel.scaling_box.findChild(QMenu)
    assert menu is not None and [a.isChecked() for a in menu.actions()] == [True, False]
    with qtbot.waitSignal(panel.settings_changed) as changed:
        menu.actions()[1].trigger()
    assert changed.args[2].scaling == "shared" and panel.picture.settings.scaling == "shared"
    assert panel.scaling_box.text().startswith("shared")
    assert "|grad|" in panel.sort_box._items["mean"]
    menu.close()  # triggered from code, the menu stays open: not left on screen


def test_predictions_of_nan_scores_show_nan_instead_of_failing(qtbot) -> None:
    from hookscope.core.engine.capture import top_predictions
    from hookscope.ui.widgets.predictions import PredictionsPanel

    panel = PredictionsPanel()
    qtbot.addWidget(panel)
    top5 = top_predictions(torch.full((1, 10), float("nan")), None)
    assert len(top5) == 5 and all(p.probability != p.probability for p in top5)  # NaN
    panel.show_predictions(top5, top5[0].index, "top-1", 10)
    assert [row.percent.text() for row in panel.rows] == ["NaN"] * 5
    assert all(row.bar.value() == 0 for row in panel.rows)
    top5 = top_predictions(torch.tensor([[0.0, 10.0, 1.0, 2.0, 3.0, 4.0]]), None)
    panel.show_predictions(top5, None, "top-1", 6)
    assert panel.rows[0].percent.text().endswith("%") and panel.rows[0].bar.value() > 900

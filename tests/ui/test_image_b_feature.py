"""Image B built from a workspace and a fake host: B runs through the same hooks as A, its slot shows it, the View
menu sets every panel's A / B / A − B view in the workspace, and a B that cannot be read is dropped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QKeySequence

from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.pictures.panels import PanelSettings
from hookscope.ui.features.image_b import VIEW_MENU, ImageBFeature

RUN_TIMEOUT_MS = 120_000
PAIRS = {("layer1.0.conv1", "forward"), ("layer1.0.conv1", "tensor")}


@pytest.fixture
def feature(workspace, host) -> ImageBFeature:
    return ImageBFeature(workspace, host)


def record(result, kind: str, key: str):
    return next(r for r in result.records if (r.kind, r.key) == (kind, key))


def test_it_contributes_its_slot_and_menu_entries(feature, host) -> None:
    assert host.input_rows == [feature.slot]
    assert feature.slot.hint.isVisibleTo(host.parent) and not feature.slot.clear_button.isVisibleTo(host.parent)
    assert host.actions["file.open_image_b"].title == "Open image B…"
    assert QKeySequence(host.actions["file.open_image_b"].shortcut) == QKeySequence("Ctrl+B")
    assert host.actions["file.clear_image_b"].title == "Clear image B"
    views = [spec for spec in host.actions.values() if spec.menu == VIEW_MENU]
    assert [spec.title for spec in sorted(views, key=lambda s: s.order)] == [
        "image A",
        "image B",
        "the difference A − B",
    ]
    assert host.actions[VIEW_MENU].menu == "View"  # the submenu's place in the View menu
    assert host.actions["view.sort.diff"].menu == "View/Channel order (all panels)"
    assert all(spec.title.strip("…") for spec in host.actions.values())  # every entry has words


def test_image_b_runs_through_the_same_hooks_and_shows_in_its_slot(
    feature, workspace, host, qtbot, photos, monkeypatch
) -> None:
    monkeypatch.setattr(feature, "ask_image_b_path", lambda: str(photos[1]))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as applied:
        host.trigger("file.open_image_b")
        assert feature.slot.name.text() == f"{photos[1].name}  (running…)"
    outcome = applied.args[0]
    assert workspace.image_b.path == str(photos[1]) and outcome.image_b.path == str(photos[1])
    assert outcome.comparison is not None
    result_a, result_b = outcome.result, outcome.comparison.result
    assert result_b.target_index == result_a.target_index  # B's gradients are of A's class

    # B went through the hooks on the model: its activations are those of a direct engine run on B.
    loaded = load_model("resnet18", "none", seed=0)
    with HookRegistry(loaded.module) as registry:
        registry.add("layer1.0.conv1", "forward")
        direct = capture_run(loaded.module, registry, loaded.preprocess.to_tensor(read_image(photos[1])))
    np.testing.assert_allclose(
        record(result_b, "forward", "layer1.0.conv1").tensor.numpy(),
        record(direct, "forward", "layer1.0.conv1").tensor.numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    views = outcome.comparison.views[("forward", "layer1.0.conv1")]
    assert set(views) == {"A", "B", "diff"}
    a, b = record(result_a, "forward", "layer1.0.conv1"), record(result_b, "forward", "layer1.0.conv1")
    np.testing.assert_array_equal(views["diff"].channels.data, a.tensor[0].numpy() - b.tensor[0].numpy())

    slot = feature.slot
    assert slot.name.text() == photos[1].name
    assert slot.thumbnail.pixmap() is not None and not slot.thumbnail.pixmap().isNull()
    assert slot.clear_button.isVisibleTo(host.parent)

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as applied:
        slot.clear_button.click()
    assert workspace.image_b is None and applied.args[0].comparison is None
    assert not slot.thumbnail.isVisibleTo(host.parent) and slot.hint.isVisibleTo(host.parent)


def test_the_view_menu_sets_every_panels_view_in_the_workspace(feature, workspace, host, qtbot) -> None:
    assert workspace.ticked_pairs() == PAIRS
    with qtbot.waitSignal(workspace.panel_settings_changed) as changed:
        host.trigger("view.image_b.diff")
    assert {(path, kind) for path, kind, settings in changed.args[0] if settings.view == "diff"} == PAIRS
    assert all(workspace.settings_for(*pair).view == "diff" for pair in PAIRS)
    assert workspace.default_settings.view == "diff"  # panels ticked later too
    host.trigger("view.image_b.B")
    assert {workspace.settings_for(*pair).view for pair in PAIRS} == {"B"}
    host.trigger("view.sort.diff")
    assert workspace.settings_for("layer1.0.conv1", "forward") == PanelSettings(sort="diff", view="B")
    with pytest.raises(ValueError, match="Unknown view"):
        feature.show_view_everywhere("C")


def test_an_unreadable_image_b_is_dropped_and_the_results_stay(feature, workspace, host, qtbot, tmp_path: Path) -> None:
    before = workspace.last
    broken = tmp_path / "second.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with qtbot.waitSignal(workspace.error, timeout=RUN_TIMEOUT_MS) as shown:
        feature.set_image_b(broken)
    assert "second.png" in shown.args[0]
    assert workspace.last is before and workspace.image is before.image
    assert workspace.image_b is None  # dropped: the next run works again
    assert any("Image B (second.png) was dropped" in line for line in host.statuses)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as applied:
        pass
    assert applied.args[0].comparison is None and applied.args[0].image == before.image
    assert feature.slot.hint.isVisibleTo(host.parent)

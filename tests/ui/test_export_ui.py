"""Exporting from the window: a panel's Export menu (PNG, SVG, one channel, arrays, statistics) and File >
Export run (the layout of ``hookscope export``), checked against the panel's own mosaic and the run's records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtWidgets import QMenu

from hookscope.core.common.resources import colormap_lut
from hookscope.core.outputs.panel_export import read_stats_csv, svg_embedded_png
from hookscope.core.pictures.views import channel_stats, to_uint8

RUN_TIMEOUT_MS = 120_000


def export_through_menu(panel, label: str, path: Path, monkeypatch) -> None:
    """Pick ``label`` in the panel's Export menu, answering the file question with ``path``."""
    exporter = panel.export_button.exporter
    monkeypatch.setattr(exporter, "choose_path", lambda title, suggested, pattern: str(path))
    menu = QMenu()
    exporter.fill_menu(menu)
    actions = {action.text(): action for action in menu.actions() if action.text()}
    assert label in actions, f"{label!r} not in {list(actions)}"
    assert actions[label].isEnabled()
    actions[label].trigger()
    menu.deleteLater()


def record_of(window, kind: str, key: str):
    return next(r for r in window.workspace.last.result.records if (r.kind, r.key) == (kind, key))


def test_png_and_svg_exports_are_the_mosaic_in_its_colormap(window, tmp_path, monkeypatch):
    panel = window.panel_area.panels[("forward", "layer1.0.conv1")]
    panel.choose(colormap="magma", sort="mean")
    mosaic = panel.picture.arrangement.image
    assert mosaic.shape == (8 * 57 - 1, 8 * 57 - 1)  # 64 tiles of 56x56 with 1-pixel gaps

    export_through_menu(panel, "Mosaic as PNG…", tmp_path / "mosaic.png", monkeypatch)
    written = np.asarray(Image.open(tmp_path / "mosaic.png").convert("RGB"))
    assert written.shape[:2] == mosaic.shape  # native resolution: one mosaic pixel per file pixel
    np.testing.assert_array_equal(written, colormap_lut("magma")[mosaic])

    export_through_menu(panel, "Mosaic as SVG…", tmp_path / "mosaic.svg", monkeypatch)
    document = (tmp_path / "mosaic.svg").read_text()
    assert "layer1.0.conv1" in document and "image-rendering" in document
    np.testing.assert_array_equal(np.asarray(svg_embedded_png(document).convert("RGB")), written)
    assert window.statusBar().currentMessage().startswith("Exported mosaic.svg")


def test_gradient_panel_with_shared_scaling_exports_what_it_draws(window, tmp_path, monkeypatch):
    panel = window.panel_area.panels[("tensor", "layer4.1.conv2")]
    panel.choose(scaling="shared", colormap="inferno")
    export_through_menu(panel, "Mosaic as PNG…", tmp_path / "grad", monkeypatch)  # the suffix is added
    written = np.asarray(Image.open(tmp_path / "grad.png").convert("RGB"))
    np.testing.assert_array_equal(written, colormap_lut("inferno")[panel.picture.arrangement.image])


def test_one_channel_arrays_and_statistics(window, tmp_path, monkeypatch):
    panel = window.panel_area.panels[("forward", "layer1.0.conv1")]
    panel.choose(colormap="cividis")
    labels = [a.text() for a in _menu_actions(panel)]
    assert not any(label.startswith("Channel") for label in labels)  # no channel clicked yet
    panel.channel_clicked.emit(panel.picture, 5)  # as a click on tile 5 does
    export_through_menu(panel, "Channel 5 as PNG…", tmp_path / "channel5.png", monkeypatch)
    data = panel.picture.channels.data
    written = np.asarray(Image.open(tmp_path / "channel5.png").convert("RGB"))
    assert written.shape[:2] == data.shape[1:]
    np.testing.assert_array_equal(written, colormap_lut("cividis")[to_uint8(data[5])])

    export_through_menu(panel, "Array as .npy…", tmp_path / "conv1.npy", monkeypatch)
    raw = record_of(window, "forward", "layer1.0.conv1").tensor.numpy()
    saved = np.load(tmp_path / "conv1.npy")
    assert saved.shape == (1, 64, 56, 56) and saved.dtype == raw.dtype
    np.testing.assert_array_equal(saved, raw)

    export_through_menu(panel, "Arrays as .npz (raw and drawn)…", tmp_path / "conv1.npz", monkeypatch)
    with np.load(tmp_path / "conv1.npz") as archive:
        np.testing.assert_array_equal(archive["layer1.0.conv1"], raw)
        np.testing.assert_array_equal(archive["shown"], data)

    gradient = window.panel_area.panels[("tensor", "layer4.1.conv2")]
    export_through_menu(gradient, "Statistics as CSV…", tmp_path / "grad_stats.csv", monkeypatch)
    stats = read_stats_csv(tmp_path / "grad_stats.csv")
    expected = channel_stats(gradient.picture.channels.data)  # of |grad|, as drawn
    assert len(stats["mean"]) == 512
    for name in ("mean", "max", "min", "std"):
        np.testing.assert_allclose(stats[name], expected[name], rtol=1e-6)
    assert (stats["min"] >= 0).all()


def _menu_actions(panel):
    menu = QMenu()
    panel.export_button.exporter.fill_menu(menu)
    actions = [a for a in menu.actions() if a.text()]
    menu.deleteLater()
    return actions


def test_export_run_writes_the_command_line_layout(window, qtbot, tmp_path):
    space = window.workspace
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        space.tick("layer2.0.conv1", "pre", True)
    out = tmp_path / "run"
    sessions = window.features["sessions"]
    with qtbot.waitSignal(sessions.exported, timeout=RUN_TIMEOUT_MS):
        assert sessions.export_run(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hook_kinds"] == ["act", "in", "grad"]  # the vocabulary's words
    assert manifest["model"]["name"] == "resnet18" and manifest["input_shape"] == [1, 3, 224, 224]
    with np.load(out / "activations.npz") as archive:
        assert set(archive.files) == {"layer1.0.conv1", "layer4.1.conv2"}
        np.testing.assert_array_equal(
            archive["layer1.0.conv1"], record_of(window, "forward", "layer1.0.conv1").tensor.numpy()
        )
    with np.load(out / "inputs.npz") as archive:
        assert "layer2.0.conv1" in archive.files
    with np.load(out / "gradients.npz") as archive:  # the Grad column (tensor hooks): as hookscope export names it
        assert set(archive.files) == {"layer1.0.conv1", "layer4.1.conv2"}
    assert not (out / "output_gradients.npz").exists()  # no full backward hook's grad_output was ticked
    np.testing.assert_array_equal(np.load(out / "input.npy"), space.last.result.input.numpy())
    png = Image.open(out / "png" / "activations" / "layer1.0.conv1.png")
    assert png.size == (8 * 57 - 1, 8 * 57 - 1)


def test_export_run_without_results_says_so(make_window):
    window = make_window()  # its model still loads in the background: no run yet
    window.show_dialogs = False
    assert window.workspace.last is None
    assert not window.features["sessions"].export_run("/nonexistent/never")
    assert "Nothing to export yet" in window.last_error

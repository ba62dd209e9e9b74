"""``hookscope.Viewer`` and ``hookscope.run``: the window on a model the test holds, its hooks on that very object,
and the model given back as it was lent (issue 42)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from PySide6.QtCore import QTimer
from torch import nn

import hookscope
from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.ui.viewer import Viewer, run

ROOT = Path(__file__).resolve().parents[2]
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
HOOKS = {"layer1": ["act", "grad"], "fc": ["in"]}


@pytest.fixture
def viewers(qtbot):
    """Viewers made by the test, closed at its end (the leak check then finds no window)."""
    made: list[Viewer] = []

    def make(*args, **options) -> Viewer:
        viewer = Viewer(*args, **options)
        made.append(viewer)
        return viewer

    yield make
    for viewer in made:
        viewer.close()


def hook_dicts(model: nn.Module) -> dict[tuple[str, str], dict]:
    return {(path, name): dict(getattr(m, name)) for path, m in model.named_modules() for name in HOOK_DICTS}


def resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None)


class Small(nn.Module):
    """A network defined in the test, as one would in a notebook."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(0.5)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.pool(self.relu(self.bn(self.conv(x)))).flatten(1)))


def test_the_hooks_are_on_the_callers_module_and_the_model_comes_back_as_lent(viewers, photos) -> None:
    model = resnet()
    model.train()
    model.layer2.eval()  # a mix of modes, each given back as it was
    calls: list[tuple[int, ...]] = []
    mine = model.layer1.register_forward_hook(lambda module, args, output: calls.append(tuple(output.shape)))
    before_hooks = hook_dicts(model)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    modes = {path: m.training for path, m in model.named_modules()}
    devices = {key: value.device for key, value in model.state_dict().items()}

    viewer = viewers(model, images=[photos[0]], tick=HOOKS)
    viewer.capture()
    registry = viewer.workspace.registry
    assert viewer.workspace.loaded.module is model  # the very object, not a copy
    ours = registry.handle_ids()
    # Act and Grad on layer1 (a forward hook each), In on fc (a forward pre-hook), beside the caller's own hook
    assert set(model.layer1._forward_hooks) == {mine.id} | (ours & set(model.layer1._forward_hooks))
    assert len(ours & set(model.layer1._forward_hooks)) == 2
    assert len(ours & set(model.fc._forward_pre_hooks)) == 1
    assert calls, "the caller's own hook was not called by the window's run"
    assert not model.training and not model.layer1.training  # the window runs it in eval mode

    viewer.close()
    assert viewer.closed
    assert hook_dicts(model) == before_hooks  # every hook of Hookscope's gone, the caller's left as it was
    assert {path: m.training for path, m in model.named_modules()} == modes
    assert {key: value.device for key, value in model.state_dict().items()} == devices
    after = model.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], state[k]) for k in state)
    seen = len(calls)
    model.eval()(torch.zeros(1, 3, 64, 64))
    assert len(calls) == seen + 1  # the caller's hook still works
    with pytest.raises(HookscopeError, match="closed"):
        viewer.capture()


@pytest.mark.parametrize("kind", ["path", "pil"])
def test_capture_is_bit_for_bit_hookscope_capture(viewers, photos, kind) -> None:
    model = resnet().eval()
    image = photos[1] if kind == "path" else Image.open(photos[1]).convert("RGB")
    viewer = viewers(model, images=[image], tick=HOOKS)
    shown = viewer.capture()
    alone = hookscope.capture(model, image, hooks=HOOKS)
    assert isinstance(shown, hookscope.Capture)
    for got, want in [
        (shown.activations, alone.activations),
        (shown.gradients, alone.gradients),
        (shown.inputs, alone.inputs),
    ]:
        assert got.keys() == want.keys() and got
        for key in want:
            assert torch.equal(got[key], want[key]), key
    assert torch.equal(shown.input, alone.input)
    assert [p.index for p in shown.predictions] == [p.index for p in alone.predictions]
    assert set(shown.kinds) == {"forward", "tensor", "pre"}


def test_a_module_defined_here_is_ticked_and_unticked_through_the_api(viewers, photos, qtbot) -> None:
    model = Small()
    viewer = viewers(model, images=[photos[2]], tick=["conv"])
    first = viewer.capture()
    assert set(first.activations) == {"conv"} and set(first.gradients) == {"conv"}
    assert first.activations["conv"].shape == (1, 8, 224, 224)

    viewer.tick("bn", ["in", "act"])
    assert viewer.ticked() == {"conv": ["act", "grad"], "bn": ["in", "act"]}
    assert viewer.workspace.is_ticked("bn", "pre")
    assert len(model.bn._forward_hooks) == 1 and len(model.bn._forward_pre_hooks) == 1  # on the module at once
    shown = viewer.capture()
    assert set(shown.activations) == {"conv", "bn"} and set(shown.inputs) == {"bn"}
    panels = viewer.window.panel_area.panels
    assert ("forward", "bn") in panels and ("pre", "bn") in panels  # the panels followed the ticks

    viewer.untick("conv")
    assert not model.conv._forward_hooks
    assert set(viewer.capture().activations) == {"bn"}
    assert ("forward", "conv") not in viewer.window.panel_area.panels
    assert viewer.window.tree_model is not None and not viewer.workspace.is_ticked("conv", "forward")

    with pytest.raises(HookscopeError, match="no module named 'nope'"):
        viewer.tick("nope")
    with pytest.raises(HookscopeError, match="Hook words"):
        viewer.tick("fc", ["activations"])
    # the names before one vocabulary ("tick", as in the window): still there, each with one warning
    with pytest.warns(FutureWarning, match=r"Viewer.check is now Viewer.tick"):
        viewer.check("conv", "act")
    with pytest.warns(FutureWarning, match=r"Viewer.checked is now Viewer.ticked"):
        assert viewer.checked() == viewer.ticked() == {"conv": ["act"], "bn": ["in", "act"]}
    viewer.open(photos[0])
    assert viewer.capture().image == str(photos[0])
    assert not model.training or model.training is False


def test_bad_arguments_are_refused_before_any_window(photos) -> None:
    with pytest.raises(HookscopeError, match="no module named 'layer9'"):
        Viewer(resnet(), images=[photos[0]], tick=["layer9"])
    with pytest.raises(ImageError, match="tensor"):
        Viewer(resnet(), images=[torch.zeros(3, 32, 32)])
    with pytest.raises(ImageError):
        Viewer(resnet(), images=[photos[0].with_name("missing.png")])
    with pytest.raises(HookscopeError, match="torch.nn.Module"):
        Viewer("resnet18")  # type: ignore[arg-type]


def test_the_screenshot_is_the_windows_pixels(viewers, photos) -> None:
    viewer = viewers(Small(), images=[photos[0]], tick=["conv"])
    viewer.capture()
    shot = viewer.screenshot()
    window = viewer.window
    ratio = window.devicePixelRatio()
    assert shot.dtype == np.uint8 and shot.shape == (round(window.height() * ratio), round(window.width() * ratio), 4)
    assert len(np.unique(shot[..., :3].reshape(-1, 3), axis=0)) > 50  # not blank: the window is drawn
    # the mosaic of conv's activations is in it: its view's pixels are many colours
    panel = window.panel_area.panels[("forward", "conv")]
    view = panel._view.viewport()
    corner = view.mapTo(window, view.rect().topLeft())
    part = shot[corner.y() : corner.y() + view.height(), corner.x() : corner.x() + view.width(), :3]
    assert part.size and len(np.unique(part.reshape(-1, 3), axis=0)) > 20


def test_run_returns_once_every_viewer_is_closed(viewers, photos) -> None:
    viewer = viewers(Small(), images=[photos[0]], tick=["conv"])
    viewer.capture()
    QTimer.singleShot(200, viewer.close)
    QTimer.singleShot(60_000, viewer.close)  # should run() not return by itself: the test then fails, not hangs
    run()
    assert viewer.closed
    run()  # no viewer open: returns at once


def test_the_inspector_lists_the_callers_own_hooks_as_not_hookscopes(workspace, host, qtbot) -> None:
    """For any model (here a catalogue model in a workspace), not only a viewer's."""
    from hookscope.ui.features.inspector import REMOVE, InspectorFeature

    model = workspace.loaded.module

    def my_probe(module, args, output) -> None:
        pass

    handle = model.layer2.register_forward_hook(my_probe)
    try:
        inspector = InspectorFeature(workspace, host)
        yours = [info for info in inspector.infos if info.yours]
        assert [(i.path, i.kind, i.method) for i in yours] == [("layer2", "forward", "register_forward_hook")]
        assert "not Hookscope's" in yours[0].note and "my_probe" in yours[0].note
        assert "of yours" in inspector.count_label.text()
        assert inspector.count == workspace.registry.handle_count()  # the live count is Hookscope's own
        row = inspector.infos.index(yours[0])
        assert inspector.table.cellWidget(row, REMOVE) is None  # no remove button: Hookscope leaves it alone
        assert inspector.select(yours[0])
        assert "Not Hookscope's" in inspector.why.text()
        assert "my_probe" in inspector.code.toPlainText()
        inspector.remove_all()
        assert list(model.layer2._forward_hooks) == [handle.id]  # Remove all removed Hookscope's hooks only
    finally:
        handle.remove()


def test_in_ipython_the_qt_loop_is_integrated_and_viewer_returns_at_once(tmp_path, photos) -> None:
    script = textwrap.dedent(
        f"""
        import json, torch, torchvision
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
        shell = TerminalInteractiveShell.instance(simple_prompt=False)
        import hookscope
        model = torchvision.models.resnet18(weights=None)
        viewer = hookscope.Viewer(model, images=[{str(photos[0])!r}], tick=["layer1"])
        loop = shell.active_eventloop
        if str(loop).startswith("qt"):
            hookscope.run()  # the loop is integrated: returns at once
        records = sorted(viewer.capture().activations)
        viewer.close()
        print(json.dumps({{"loop": loop, "records": records, "api": __import__("os").environ.get("QT_API")}}))
        """
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(answer["loop"]).startswith("qt"), answer
    assert answer["records"] == ["layer1"]


DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch, torchvision
    import numpy as np
    from PySide6.QtGui import QImage
    import hookscope
    from real_screen import check_plot

    model = torchvision.models.resnet18(weights=None)
    viewer = hookscope.Viewer(model, images=[sys.argv[2]], tick=["layer1.0.conv1"])
    window = viewer.window
    window.resize(1200, 760)
    window.move(0, 0)
    viewer.capture()
    shot = viewer.screenshot()
    where = window.geometry()
    # the screenshot as the screen's top-left part (the window is at 0, 0): check_plot reads global coordinates
    rgb = np.ascontiguousarray(shot[..., :3])
    image = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888)
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    panel = window.panel_area.panels[("forward", "layer1.0.conv1")]
    plot = check_plot(panel, image)
    report = {"shape": list(shot.shape), "size": [window.width(), window.height()], "at": [where.x(), where.y()],
              "plot": plot, "platform": __import__("PySide6.QtGui").QtGui.QGuiApplication.platformName()}
    viewer.close()
    open(sys.argv[1], "w").write(json.dumps(report))
    """
)


def test_on_a_real_x_server_the_screenshot_shows_the_panel_drawn(tmp_path, photos) -> None:
    from real_screen import MATCH_NEEDED
    from test_real_screen import x_server

    out = tmp_path / "report.json"
    with x_server(1280, 800, window_manager=False) as display:
        env = {
            **os.environ,
            "DISPLAY": display,
            "QT_QPA_PLATFORM": "xcb",
            "HOME": str(tmp_path),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "ui"), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("QT_SCALE_FACTOR", None)
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, str(out), str(photos[0])],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["platform"] == "xcb" and report["at"] == [0, 0]
    assert report["shape"][:2] == report["size"][::-1] and report["shape"][2] == 4
    plot = report["plot"]
    assert plot is not None and plot["checked"] > 20, report
    assert plot["ratio"] >= MATCH_NEEDED, report


def test_the_window_says_where_a_held_models_input_settings_came_from(viewers, photos) -> None:
    """Given torchvision weights, the line under the input names their transforms (not "a guess for a model
    file"), the button is plain Input…, and the Weights box says it is your model object; unasked, a guess."""
    from torchvision.models import ResNet18_Weights

    viewer = viewers(resnet().eval(), images=[photos[1]], tick=["layer1"], preprocess=ResNet18_Weights.DEFAULT)
    viewer.capture()
    feature = next(f for f in viewer.window.features.values() if type(f).__name__ == "InputSettingsFeature")
    assert feature.requirements.text().endswith("(the weights' own transforms)")
    assert feature.button.text() == "Input…"
    assert viewer.workspace.loaded.weights_text == "Your model object"
    guessed = viewers(resnet().eval(), images=[photos[1]], tick=["layer1"])
    guessed.capture()
    other = next(f for f in guessed.window.features.values() if type(f).__name__ == "InputSettingsFeature")
    assert other.requirements.text().endswith("(a guess for a model file: check it with Input…)")
    assert other.button.text() == "Input… (guessed)"


def test_opening_a_file_of_the_image_list_makes_it_the_lists_current_one(viewers, photos) -> None:
    """Seen on the X server: ``open`` showed the list's second file while the list still marked the first."""
    viewer = viewers(resnet().eval(), images=[photos[0], photos[1]], tick=["layer1"])
    viewer.capture()
    viewer.open(photos[1])
    shown = viewer.capture()
    assert viewer.workspace.image_index == 1 and shown.image == str(photos[1])

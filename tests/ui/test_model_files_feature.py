"""The model files feature built from a workspace and a fake host: File > Open model…, dropped model files,
File > Recent models, and the questions a file raises (architecture, trust), answered by replacing the one
method that asks. Real files (state_dicts, pickles, TorchScript, a model.py) in tmp_path; real loads and runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torchvision
from PySide6.QtWidgets import QMenu
from torch import nn

from hookscope.core.models import catalogue as core_models
from hookscope.core.models.files import file_sha256
from hookscope.ui.dialogs.architecture_dialog import ArchitectureDialog, ArchitectureFit, guess_architecture
from hookscope.ui.features.open_model import MODEL_FOLDER_KEY, ModelFilesFeature, is_model_file
from hookscope.ui.state.settings import app_settings

RUN_TIMEOUT_MS = 120_000


class MarkerNet(nn.Module):
    """A small model whose unpickling leaves a marker file: proof that code from the file ran."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = str(marker)
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv(x)).flatten(1))

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        Path(state["marker"]).write_text("unpickled")


def never(*args, **kwargs):
    raise AssertionError(f"this question must not be asked here: {args}")


def forward_hooks(workspace, path: str) -> int:
    return len(workspace.registry.module(path)._forward_hooks)


ACT_AND_GRAD = 2  # the Act tick's forward hook, and the Grad tick's (it puts a tensor hook on the output)


@pytest.fixture
def files(workspace, host) -> ModelFilesFeature:
    return ModelFilesFeature(workspace, host)


def test_actions_and_drop_handler_are_declared(files, host):
    spec = host.actions["file.open_model"]
    assert spec.title == "Open model…" and spec.menu == "File" and spec.shortcut == "Ctrl+Shift+O"
    recent = host.actions["file.recent_models"]
    assert recent.title == "Recent models" and recent.menu == "File" and recent.populate is not None
    assert host.drop_handlers == [files.open_dropped]
    assert is_model_file("a/b.safetensors") and is_model_file("m.py:build") and not is_model_file("cat.png")


def test_a_dropped_state_dict_asks_for_its_architecture_and_loads(
    files, workspace, host, qtbot, tmp_path, photos, monkeypatch
):
    torch.manual_seed(7)
    saved = torchvision.models.resnet18().state_dict()
    path = tmp_path / "cats_finetuned.pth"
    torch.save(saved, path)
    before = workspace.ticked_pairs()
    old_module = workspace.loaded.module
    asked = []
    monkeypatch.setattr(
        files, "ask_architecture", lambda file, keys, fits: asked.append((file, keys, fits)) or ("resnet18", False)
    )
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        rest = host.drop_handlers[0]([str(photos[0]), str(path)])
    assert rest == [str(photos[0])]  # images are left for the image list
    assert asked == [(str(path), len(saved), [ArchitectureFit("resnet18", len(saved))])]  # resnet18 fits, said so
    assert asked[0][2][0].text == f"resnet18: all {len(saved)} tensors fit"
    # The predictions keep ResNet-18's class names: the file's last layer still gives its 1000 classes.
    names = core_models.default_categories("resnet18")
    assert workspace.loaded.categories == names
    assert [p.label for p in workspace.last.result.top5] == [names[p.index] for p in workspace.last.result.top5]
    loaded = workspace.loaded
    assert loaded.source == "state_dict" and loaded.model_file == str(path) and loaded.name == "resnet18"
    assert loaded.model_sha256 == file_sha256(path)  # a session saved later notices a changed file
    state = loaded.module.state_dict()
    assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in saved)
    assert workspace.ticked_pairs() == before  # the ticks carried over to the new model...
    assert forward_hooks(workspace, "layer1.0.conv1") == ACT_AND_GRAD  # ...as real hooks on its module
    assert not old_module.layer1[0].conv1._forward_hooks  # and none is left on the old one
    assert workspace.last.result.records


def test_recent_models_reopen_a_file_without_asking(files, workspace, host, qtbot, tmp_path, monkeypatch):
    host.remembers = True
    torch.manual_seed(8)
    saved = torchvision.models.resnet18().state_dict()
    path = tmp_path / "cats_finetuned.pth"
    torch.save(saved, path)
    monkeypatch.setattr(files, "ask_architecture", lambda file, keys, fits: ("resnet18", True))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        files.open(path)
    first = workspace.loaded
    menu = QMenu()
    host.actions["file.recent_models"].populate(menu)
    actions = menu.actions()
    assert [a.text() for a in actions] == ["cats_finetuned.pth as resnet18 (non-strict)"]
    assert actions[0].toolTip() == str(path)

    monkeypatch.setattr(files, "ask_architecture", never)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        actions[0].trigger()
    assert workspace.loaded is not first and workspace.loaded.model_file == str(path)
    assert torch.equal(workspace.loaded.module.fc.weight, saved["fc.weight"])


def test_no_recent_models_when_the_host_does_not_remember(files, host):
    menu = QMenu()
    host.actions["file.recent_models"].populate(menu)
    assert [(a.text(), a.isEnabled()) for a in menu.actions()] == [("No recent models", False)]


def test_a_state_dict_that_does_not_fit_stops_unless_non_strict(files, workspace, host, qtbot, tmp_path, monkeypatch):
    torch.manual_seed(3)
    saved = torchvision.models.resnet18(num_classes=10).state_dict()
    path = tmp_path / "ten_classes.pt"
    torch.save({"state_dict": saved}, path)
    previous = workspace.loaded
    answers = iter([("resnet18", False), ("resnet18", True)])
    monkeypatch.setattr(files, "ask_architecture", lambda file, keys, fits: next(answers))
    with qtbot.waitSignal(files.refused, timeout=RUN_TIMEOUT_MS) as refused:
        files.open(path)
    message = refused.args[0]
    assert "does not fit resnet18" in message and "shape mismatch" in message and "fc.weight" in message
    assert "(10, 512)" in message and "non-strict" in message and "--" not in message
    assert host.errors[-1] == message
    assert (
        workspace.loaded is previous and forward_hooks(workspace, "layer1.0.conv1") == ACT_AND_GRAD
    )  # nothing half-loaded

    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        files.open(path)
    loaded = workspace.loaded
    assert loaded is not previous and "Non-strict load" in loaded.notice
    assert torch.equal(loaded.module.layer1[0].conv1.weight, saved["layer1.0.conv1.weight"])
    assert loaded.module.fc.weight.shape == (1000, 512)


def test_a_pickled_model_opens_only_when_trusted(files, workspace, host, qtbot, tmp_path, monkeypatch):
    marker = tmp_path / "unpickled.marker"
    path = tmp_path / "whole_model.pt"
    torch.save(MarkerNet(marker), path)
    previous, results = workspace.loaded, workspace.last
    asked = []
    monkeypatch.setattr(files, "ask_trust", lambda file, objects: asked.append((file, objects)) or False)
    with qtbot.waitSignal(files.refused, timeout=RUN_TIMEOUT_MS) as refused:
        assert host.drop_handlers[0]([str(path)]) == []
    assert asked and asked[0][0] == str(path)
    assert any(name.endswith("MarkerNet") for name in asked[0][1])  # the question names what the file imports
    assert "not trusted" in refused.args[0] and "whole_model.pt" in host.errors[-1]
    assert not marker.exists()  # nothing from the file ran
    assert workspace.loaded is previous and workspace.last is results

    monkeypatch.setattr(files, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        files.open(path)
    assert marker.exists()
    assert workspace.loaded.source == "pickle" and isinstance(workspace.loaded.module, MarkerNet)
    assert workspace.last.result.records  # its default layers were ticked and ran


def test_a_python_factory_runs_only_when_trusted(files, workspace, qtbot, tmp_path, monkeypatch):
    marker = tmp_path / "imported.marker"
    code = tmp_path / "model.py"
    code.write_text(
        "import pathlib\nfrom torch import nn\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "def build():\n    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3))\n"
    )
    previous = workspace.loaded
    trust = []
    monkeypatch.setattr(files, "ask_trust", lambda file, objects: trust.append(file) or False)
    monkeypatch.setattr(files, "ask_factory", never)  # "build" is found without running the file
    with qtbot.waitSignal(files.refused, timeout=RUN_TIMEOUT_MS):
        files.open(code)
    assert trust == [f"{code}:build"] and not marker.exists() and workspace.loaded is previous

    monkeypatch.setattr(files, "ask_trust", lambda file, objects: True)
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        files.open(code)
    assert marker.exists() and workspace.loaded.source == "python"
    assert workspace.last.result.input.shape == (1, 1, 224, 224)  # a grayscale input was guessed


def test_a_python_file_with_several_functions_asks_which(files, host, tmp_path, monkeypatch):
    code = tmp_path / "nets.py"
    code.write_text("def small():\n    pass\n\ndef large():\n    pass\n\nclass _Hidden:\n    pass\n")
    asked = []
    monkeypatch.setattr(files, "ask_factory", lambda file, names: asked.append(names) or None)
    files.open(code)
    assert asked == [["small", "large"]]
    assert "no function to build the model was chosen" in host.errors[-1]


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_and_other_files_are_refused_and_the_results_stay(files, workspace, host, qtbot, tmp_path):
    scripted = tmp_path / "scripted.pt"
    torch.jit.script(nn.Sequential(nn.Conv2d(3, 4, 3))).save(str(scripted))
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"these are not weights" * 100)
    previous, results = workspace.loaded, workspace.last
    with qtbot.waitSignal(files.refused, timeout=RUN_TIMEOUT_MS) as refused:
        files.open(scripted)
    assert "TorchScript" in refused.args[0] and "hooks" in refused.args[0] and "--" not in refused.args[0]
    with qtbot.waitSignal(files.refused, timeout=RUN_TIMEOUT_MS) as refused:
        files.open(junk)
    assert "not a PyTorch model or weights file" in refused.args[0]
    assert "TorchScript" in host.errors[-2] and "not a PyTorch model" in host.errors[-1]  # both shown
    assert workspace.loaded is previous and workspace.last is results
    assert (
        forward_hooks(workspace, "layer1.0.conv1") == ACT_AND_GRAD
    )  # the previous hooks are still on the previous model


def test_the_open_dialog_starts_in_the_last_folder_used(workspace, host, tmp_path, monkeypatch, qtbot):
    host.remembers = True
    files = ModelFilesFeature(workspace, host)
    assert files.start_folder() == os.path.expanduser("~")
    folder = tmp_path / "models"
    folder.mkdir()
    opened = []
    monkeypatch.setattr(files, "ask_model_file", lambda: str(folder / "net.pth"))
    monkeypatch.setattr(files, "open", lambda path: opened.append(path))
    host.trigger("file.open_model")
    assert opened == [str(folder / "net.pth")] and files.start_folder() == str(folder)
    assert app_settings().value(MODEL_FOLDER_KEY) == str(folder)

    from fakes import FakeHost

    def reopened(remembers: bool) -> str:  # the app started again, with or without remembering
        later = FakeHost()
        qtbot.addWidget(later.parent)
        later.remembers = remembers
        return ModelFilesFeature(workspace, later).start_folder()

    assert reopened(True) == str(folder)  # kept in the settings
    assert reopened(False) == os.path.expanduser("~")


def test_the_architecture_chooser_searches_and_guesses(qtbot, tmp_path):
    dialog = ArchitectureDialog(str(tmp_path / "resnet50_finetuned.pth"), 320)
    qtbot.addWidget(dialog)
    assert dialog.architecture == "resnet50" and not dialog.non_strict
    dialog.filter.setText("mobilenet v3")
    shown = [dialog.list.item(n).text() for n in range(dialog.list.count()) if not dialog.list.item(n).isHidden()]
    assert shown and all("mobilenet" in name and "v3" in name for name in shown)
    assert dialog.architecture in shown
    dialog.filter.setText("no such network")
    assert dialog.architecture is None
    assert guess_architecture("my_vit_b_16.pt", core_models.catalogue()) == "vit_b_16"
    both = ["resnet50", "timm/resnet50", "timm/resnet50d", "resnet5"]  # torchvision's and timm's names side by side
    assert guess_architecture("resnet50_finetuned.pth", both) == "resnet50"
    assert guess_architecture("timm_resnet50.pth", both) == "timm/resnet50"
    assert guess_architecture("resnet50d.bin", both) == "timm/resnet50d"
    assert guess_architecture("weights.pt", both) is None


def test_the_architectures_that_fit_are_found_selected_and_said(qtbot, tmp_path):
    from hookscope.ui.dialogs.architecture_dialog import architectures_that_fit

    torch.manual_seed(3)
    path = tmp_path / "weights.pt"  # a name that hints nothing
    model = torchvision.models.resnet18()
    torch.save(model.state_dict(), path)
    fits = architectures_that_fit(str(path))
    assert [fit.name for fit in fits] == ["resnet18"] and fits[0].text == "resnet18: all 122 tensors fit"
    model.fc = torch.nn.Linear(512, 10)  # a new head: no architecture of the catalogue fits every tensor
    other = tmp_path / "resnet18_ten_classes.pt"
    torch.save(model.state_dict(), other)
    assert architectures_that_fit(str(other)) == []

    dialog = ArchitectureDialog(str(path), 122, fits=fits)
    qtbot.addWidget(dialog)
    assert dialog.architecture == "resnet18" and dialog.list.item(0).text() == "resnet18"
    assert "resnet18: all 122 tensors fit" in dialog.fit_label.text()
    unfitted = ArchitectureDialog(str(other), 122, fits=[])
    qtbot.addWidget(unfitted)
    assert unfitted.architecture == "resnet18"  # the name's hint, said to be a guess
    assert "No architecture" in unfitted.fit_label.text()

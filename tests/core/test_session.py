"""Sessions: saved, reopened and run again they give identical arrays; moved or changed files are reported."""

import json
import shutil

import numpy as np
import pytest
import torch
from cli_output import message_lines
from PIL import Image

from hookscope.core.common.errors import HookscopeError, ModelError
from hookscope.core.common.resources import sample_image
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.target_words import Objective
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.files import file_sha256
from hookscope.core.models.images import read_image
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.session import (
    Session,
    load_session,
    register_session_hooks,
    save_session,
    session_from,
)

HOOKS = [
    ("conv1", "forward"),
    ("bn1", "forward"),
    ("layer1.0.relu", "forward"),
    ("layer2", "backward"),
    ("fc", "pre"),
    ("layer3", "tensor"),
    ("layer3.0.conv1", "grad_input"),
]


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "project" / "images"
    folder.mkdir(parents=True)
    a = folder / "a.png"
    shutil.copy(sample_image(), a)
    b = folder / "b.png"
    Image.new("RGB", (96, 80), (20, 140, 200)).save(b)
    return a, b


def run_arrays(loaded, hooks, image, target):
    with HookRegistry(loaded.module) as registry:
        for path, kind in hooks:
            registry.add(path, kind)
        x = loaded.preprocess.to_tensor(read_image(image))
        result = capture_run(loaded.module, registry, x, target=target, categories=loaded.categories)
    return {(r.key, r.kind): r.tensor.clone() for r in result.records}, result.input_grad


def test_saved_session_reopened_and_run_again_gives_identical_arrays(tmp_path, images):
    loaded = load_model("resnet18", "none", seed=7)
    # the window's state differs from the model's defaults: it must come back as it was
    loaded.preprocess = type(loaded.preprocess)(resize=160, crop=128, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    before, grad_before = run_arrays(loaded, HOOKS, images[0], target=3)
    with HookRegistry(loaded.module) as registry:  # the window passes its registry's hooks
        for path, kind in HOOKS:
            registry.add(path, kind)
        ticked = registry.handles()
    session = session_from(
        loaded, ticked, images, target=3, colormap="magma", scaling="shared", edits=["zero:layer4.1.conv2:3,5"],
        ui={"splitter": [1, 2], "selected": "layer2"},
    )  # fmt: skip
    path = tmp_path / "project" / "look.hookscope.json"
    save_session(session, path)

    reopened, problems = load_session(path)
    assert problems == []
    assert reopened == session
    assert reopened.hooks == HOOKS and reopened.kinds == ("forward", "pre", "backward", "tensor", "grad_input")
    assert reopened.model == {"name": "resnet18", "weights": "none", "seed": 7}
    assert reopened.preprocessing["crop"] == 128 and reopened.ui == {"splitter": [1, 2], "selected": "layer2"}

    fresh = open_model(ModelSource.from_session(reopened))  # a new model instance, as a fresh window builds it
    assert fresh.module is not loaded.module and fresh.preprocess == loaded.preprocess
    with HookRegistry(fresh.module) as registry:
        assert register_session_hooks(registry, reopened) == []
        assert {(h.path, h.kind) for h in registry.handles()} == set(HOOKS)
    after, grad_after = run_arrays(fresh, reopened.hooks, reopened.found_images()[0], reopened.target)
    assert before.keys() == after.keys() and len(before) >= len(HOOKS)
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert torch.equal(grad_before, grad_after)


def test_paths_are_stored_absolute_and_relative_and_a_moved_folder_still_opens(tmp_path, images):
    session = session_from(load_model("resnet18"), HOOKS[:1], images)
    path = tmp_path / "project" / "s.json"
    save_session(session, path)
    data = json.loads(path.read_text())
    assert data["images"][0]["path"] == str(images[0]) and data["images"][0]["relative"] == "images/a.png"
    assert data["images"][0]["sha256"] == file_sha256(images[0])

    moved = tmp_path / "elsewhere" / "project"
    shutil.move(tmp_path / "project", moved)
    reopened, problems = load_session(moved / "s.json")
    assert problems == []
    assert reopened.images == [str(moved / "images" / "a.png"), str(moved / "images" / "b.png")]


def test_a_moved_image_is_reported_and_the_rest_restored(tmp_path, images):
    session = session_from(load_model("resnet18"), HOOKS, images, target=5, colormap="cividis")
    path = tmp_path / "s.json"  # outside the project folder: the relative path does not help here
    save_session(session, path)
    images[1].rename(tmp_path / "b-moved.png")

    reopened, problems = load_session(path)
    assert problems == [f"Image '{images[1]}' was not found (it may have moved); the rest of the session was restored."]
    assert reopened.missing == [str(images[1])]
    assert reopened.found_images() == [str(images[0])]
    assert reopened.blocking_problem() is None
    assert (reopened.hooks, reopened.target, reopened.colormap) == (HOOKS, Objective("class", index=5), "cividis")


def test_changed_files_are_detected_by_their_hash(tmp_path, images):
    weights = tmp_path / "w.pth"
    torch.save(load_model("resnet18", "none", seed=1).module.state_dict(), weights)
    model_file = tmp_path / "net.pt"
    model_file.write_bytes(b"model file contents")
    session = Session(
        model={"name": "net.pt", "path": str(model_file), "arch": "resnet18", "weights": str(weights), "seed": 0},
        hooks=HOOKS[:1],
        images=[str(images[0])],
    )
    path = tmp_path / "s.json"
    save_session(session, path)
    assert json.loads(path.read_text())["model"]["file"]["sha256"] == file_sha256(model_file)
    model_file.write_bytes(b"model file contents, retrained")
    with open(weights, "ab") as handle:
        handle.write(b"\0")
    Image.new("RGB", (8, 8)).save(images[0])

    reopened, problems = load_session(path)
    assert problems == [
        f"Model file '{model_file}' has changed since the session was saved (its SHA-256 differs).",
        f"Weights file '{weights}' has changed since the session was saved (its SHA-256 differs).",
        f"Image '{images[0]}' has changed since the session was saved (its SHA-256 differs).",
    ]
    assert reopened.model["path"] == str(model_file) and reopened.model["arch"] == "resnet18"
    assert reopened.blocking_problem() is None


def test_a_missing_weights_file_blocks_running_but_not_opening(tmp_path, images):
    weights = tmp_path / "w.pth"
    torch.save(load_model("resnet18", "none", seed=1).module.state_dict(), weights)
    loaded = load_model("resnet18", str(weights))
    session = session_from(loaded, HOOKS, images[:1])
    save_session(session, tmp_path / "s.json")
    weights.unlink()
    reopened, problems = load_session(tmp_path / "s.json")
    assert problems == [
        f"Weights file '{weights}' was not found (it may have moved); the session cannot run without it."
    ]
    assert reopened.hooks == HOOKS and reopened.found_images() == [str(images[0])]
    with pytest.raises(ModelError, match="cannot run without it"):
        open_model(ModelSource.from_session(reopened))


def test_a_hook_on_a_module_the_model_lacks_is_reported(tmp_path):
    session = Session(hooks=[("conv1", "forward"), ("layer9", "forward")])
    with HookRegistry(load_model("resnet18").module) as registry:
        problems = register_session_hooks(registry, session)
        assert [(h.path, h.kind) for h in registry.handles()] == [("conv1", "forward")]
    assert problems == ["The model has no module 'layer9'; its forward hook was not restored."]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"^'.*bad\.json' is not a Hookscope session: invalid JSON at line 1, column 2\.$"),
        ('{"hello": 1}', r"^'.*bad\.json' is not a Hookscope session file\.$"),
        # (a malformed hooks entry is a problem line of its own: tests/core/test_session_damage.py)
        ('{"format": "hookscope-session", "model": {"seed": "x"}}', r"^'.*bad\.json' is a damaged"),
    ],
)
def test_a_file_that_is_not_a_session_is_one_readable_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(HookscopeError, match=message):
        load_session(path)
    with pytest.raises(HookscopeError, match=r"^Session file '.*nope\.json' does not exist\.$"):
        load_session(tmp_path / "nope.json")


def test_unknown_values_fall_back_with_a_line_each(tmp_path):
    path = tmp_path / "s.json"
    save_session(Session(hooks=[("conv1", "forward")]), path)
    data = json.loads(path.read_text())
    data.update(version=99, colormap="rainbow", scaling="log", hooks=[["conv1", "sideways"], ["bn1", "forward"]])
    path.write_text(json.dumps(data))
    reopened, problems = load_session(path)
    assert len(problems) == 4 and "newer Hookscope" in problems[0]
    assert "'sideways'" in problems[1] and "rainbow" in problems[2] and "'log'" in problems[3]
    assert (reopened.colormap, reopened.scaling, reopened.hooks) == ("viridis", "channel", [("bn1", "forward")])
    assert np.all([isinstance(p, str) for p in problems])


def test_a_model_file_session_reopens_the_file_and_gives_identical_arrays(tmp_path, images):
    from hookscope.core.models.files import open_model_file

    weights = tmp_path / "project" / "finetuned.pth"
    torch.save(load_model("resnet18", "none", seed=11).module.state_dict(), weights)
    loaded = open_model_file(weights, arch="resnet18")
    before, _ = run_arrays(loaded, HOOKS[:3], images[0], "top1")
    session = session_from(loaded, HOOKS[:3], images[:1])
    assert session.model == {
        "name": "resnet18", "weights": "none", "seed": 0, "source": "state_dict", "path": str(weights),
        "arch": "resnet18", "sha256": file_sha256(weights),
    }  # fmt: skip
    save_session(session, tmp_path / "project" / "s.json")
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "project", moved)

    reopened, problems = load_session(moved / "s.json")
    assert problems == [] and reopened.model["path"] == str(moved / "finetuned.pth")
    fresh = open_model(ModelSource.from_session(reopened))
    assert fresh.model_file == str(moved / "finetuned.pth")
    after, _ = run_arrays(fresh, reopened.hooks, reopened.found_images()[0], "top1")
    assert all(torch.equal(before[key], after[key]) for key in before)

    (moved / "finetuned.pth").unlink()
    reopened, problems = load_session(moved / "s.json")
    assert problems == [f"Model file '{weights}' was not found (it may have moved); the session cannot run without it."]
    with pytest.raises(ModelError, match="cannot run without it"):
        open_model(ModelSource.from_session(reopened))


def test_edits_are_saved_with_their_state_and_restored(tmp_path, images):
    from hookscope.core.engine.interventions import parse_edit
    from hookscope.core.outputs.session import apply_session_edits, edit_specs

    loaded = load_model("resnet18")
    with HookRegistry(loaded.module) as registry:
        registry.add_edit(parse_edit("zero:layer4.1.conv2:3,5"))
        off = registry.add_edit(parse_edit("scale:layer1:0.5"))
        registry.set_edit_enabled(off, False)
        specs = edit_specs(registry)
    assert specs == ["zero:layer4.1.conv2:3,5", "#scale:layer1:0.5"]
    save_session(session_from(loaded, HOOKS[:1], images[:1], edits=specs + ["zero:layer9:1"]), tmp_path / "s.json")
    reopened, _ = load_session(tmp_path / "s.json")
    with HookRegistry(loaded.module) as registry:
        problems, others = apply_session_edits(registry, reopened, loaded.preprocess)
        assert edit_specs(registry) == specs and others == {}
    assert len(problems) == 1 and problems[0].startswith("Edit 'zero:layer9:1' was not restored: ")


def test_cli_runs_a_saved_session_headlessly(tmp_path, images):
    import subprocess
    import sys
    from pathlib import Path

    loaded = load_model("resnet18", "none", seed=4)
    hooks = [("conv1", "forward"), ("layer4", "backward")]
    expected, _ = run_arrays(loaded, hooks, images[0], 9)
    save_session(session_from(loaded, hooks, images, target=9, colormap="gray"), tmp_path / "s.json")
    images[1].unlink()  # image B went missing: reported, the rest runs

    out = tmp_path / "out"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--session", str(tmp_path / "s.json"), "--out", str(out)],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "".join(line + "\n" for line in message_lines(done.stderr)) == (
        f"hookscope: Image '{images[1]}' was not found (it may have moved); the rest of the session was restored.\n"
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["seed"] == 4 and manifest["target"]["index"] == 9
    assert manifest["hook_kinds"] == ["act", "grad_out"] and manifest["image"] == str(images[0])
    np.testing.assert_array_equal(np.load(out / "activations.npz")["conv1"], expected[("conv1", "forward")].numpy())
    grads = np.load(out / "output_gradients.npz")["layer4"]  # grad_out: a full backward hook's grad_output
    np.testing.assert_array_equal(grads, expected[("layer4", "backward")].numpy())
    with Image.open(out / "png" / "activations" / "conv1.png") as png:  # the session's colormap: gray
        pixels = np.asarray(png)
    assert np.array_equal(pixels[..., 0], pixels[..., 1]) and np.array_equal(pixels[..., 1], pixels[..., 2])


def test_cli_refuses_a_session_whose_weights_file_is_missing_in_one_line(tmp_path, images, capsys):
    from hookscope.cli import main

    weights = tmp_path / "w.pth"
    torch.save(load_model("resnet18", "none", seed=1).module.state_dict(), weights)
    save_session(session_from(load_model("resnet18", str(weights)), HOOKS, images[:1]), tmp_path / "s.json")
    weights.unlink()
    assert main(["export", "--session", str(tmp_path / "s.json"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"hookscope: error: Weights file '{weights}' was not found (it may have moved); the session cannot run without it.\n"
    )


def test_a_mix_edit_restores_with_its_other_image_ready_to_blend(tmp_path, images):
    from hookscope.core.engine.capture import capture_run
    from hookscope.core.outputs.session import apply_session_edits, edit_specs

    loaded = load_model("resnet18")
    spec = f"mix:layer1:0.5:{images[1]}"
    save_session(session_from(loaded, HOOKS[:1], images[:1], edits=[spec]), tmp_path / "s.json")
    reopened, _ = load_session(tmp_path / "s.json")
    x = loaded.preprocess.to_tensor(read_image(images[0]))
    with HookRegistry(loaded.module) as registry:
        registry.add("layer1", "forward")
        plain = capture_run(loaded.module, registry, x).records[0].tensor
        problems, others = apply_session_edits(registry, reopened, loaded.preprocess)
        assert problems == [] and edit_specs(registry) == [spec]
        assert set(others) == {str(images[1])}
        expected = loaded.preprocess.to_tensor(read_image(images[1]))
        assert torch.equal(others[str(images[1])], expected)
        blended = capture_run(loaded.module, registry, x, others=others).records[0].tensor
    assert not torch.equal(plain, blended)


def test_each_panels_view_and_settings_are_saved_and_restored(tmp_path):
    from hookscope.core.outputs.session import panels_ui, session_panel_settings
    from hookscope.core.pictures.panels import PanelSettings

    default = PanelSettings("magma", "shared", "mean", "B")
    panels = {
        ("layer1.0.conv1", "forward"): PanelSettings(view="diff"),  # only the view differs from the plain defaults
        ("layer4.1.conv2", "backward"): PanelSettings("plasma", "channel", "diff", "B"),
    }
    path = tmp_path / "views.hookscope.json"
    save_session(
        Session(
            hooks=[("layer1.0.conv1", "forward")],
            colormap="magma",
            scaling="shared",
            ui={**panels_ui(default, panels), "image_list": []},
        ),
        path,
    )
    saved = json.loads(path.read_text())["ui"]
    assert ["layer1.0.conv1", "act", "viridis", "channel", "none", "diff"] in saved["panels"]  # the words
    assert saved["view"] == "B" and saved["sort"] == "mean"

    reopened, problems = load_session(path)
    assert problems == []
    assert session_panel_settings(reopened) == (default, panels, [])


def test_panel_settings_of_older_or_damaged_sessions_fall_back_per_panel():
    from hookscope.core.outputs.session import session_panel_settings
    from hookscope.core.pictures.panels import PanelSettings

    older = Session(colormap="gray", ui={"sort": "max", "panels": [["fc", "forward", "magma", "shared", "mean"]]})
    default, panels, problems = session_panel_settings(older)  # saved before the view was kept: view A
    assert default == PanelSettings("gray", "channel", "max", "A") and problems == []
    assert panels == {("fc", "forward"): PanelSettings("magma", "shared", "mean", "A")}

    damaged = Session(
        ui={
            "view": "C",
            "panels": [
                ["fc", "forward", "magma", "shared", "mean", "sideways"],
                ["bn1", "forward", "magma", "shared", "mean", "diff"],
                7,
            ],
        }
    )
    default, panels, problems = session_panel_settings(damaged)
    assert default == PanelSettings() and panels == {
        ("bn1", "forward"): PanelSettings("magma", "shared", "mean", "diff")
    }
    assert len(problems) == 3 and "'C'" in problems[0] and "'sideways'" in problems[1] and "7" in problems[2]


def test_a_session_knows_every_hook_kind_the_engine_has():
    """session.py keeps its own list (it imports no torch); it must stay the engine's."""
    from hookscope.core.common.vocabulary import KINDS
    from hookscope.core.outputs.session import KNOWN_KINDS

    assert KNOWN_KINDS == KINDS

"""A session that cannot be restored whole: what cannot is listed and the rest is restored; a damaged file is one
"damaged session" line with exit 2.

- an image that is not readable (``/etc/passwd`` reached through the relative path, a 3 GB sparse file that is no
  image) is a problem line, not the end of the session, and the 3 GB file is neither read nor hashed;
- an edit whose channel the module does not have is a problem line (the model is surveyed first), the other edits
  apply;
- a malformed hooks (edits, images) entry is a line of its own, the other entries are restored;
- ``1e999`` and deep nesting are a damaged session (exit 2), never an "unexpected error".
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from hookscope.cli import main
from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.resources import sample_image
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.outputs.session import (
    Session,
    apply_session_edits,
    load_session,
    register_session_hooks,
    save_session,
    session_from,
    session_survey,
)


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict]:
    """A real session (ResNet-18, random weights, two hooks, one good edit, the sample image), as JSON to damage."""
    image = tmp_path / "project" / "cat.png"
    image.parent.mkdir()
    shutil.copy(sample_image(), image)
    loaded = load_model("resnet18", "none", seed=0)
    session = session_from(loaded, [("conv1", "forward"), ("layer1", "backward")], [image],
                           edits=["zero:layer1:3"])  # fmt: skip
    path = tmp_path / "project" / "s.hookscope.json"
    save_session(session, path)
    return path, json.loads(path.read_text())


def rewrite(path: Path, document: dict | str) -> Path:
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def export_session(path: Path, out: Path) -> int:
    return main(["export", "--session", str(path), "--out", str(out), "--no-png"])


def lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


# ---- unreadable images ---------------------------------------------------------------------------------------
def test_etc_passwd_through_the_relative_path_is_listed_and_the_rest_runs(saved, tmp_path, capsys) -> None:
    path, document = saved
    good = document["images"][0]
    relative = os.path.relpath("/etc/passwd", path.parent)
    document["images"] = [{"path": "/nowhere/cat.png", "relative": relative, "sha256": None}, good]
    rewrite(path, document)
    session, problems = load_session(path)
    assert problems == ["Cannot read '/etc/passwd': it is not an image file (or its format is not supported). "
                        "The rest of the session was restored."]  # fmt: skip
    assert session.found_images() == [good["path"]]

    out = tmp_path / "out"
    assert export_session(path, out) == 0
    err = lines(capsys.readouterr().err)
    assert any("Cannot read '/etc/passwd'" in line for line in err)
    assert not any("error" in line for line in err)
    assert (out / "manifest.json").is_file()  # the one good image, in the folder itself


def test_a_3_gb_non_image_is_listed_quickly_without_being_read_or_hashed(saved, tmp_path, capsys) -> None:
    path, document = saved
    big = path.parent / "huge.png"
    with open(big, "wb") as handle:  # sparse: 3 GB on paper, nothing on disk
        handle.truncate(3 * 1024**3)
    document["images"].insert(0, {"path": str(big), "relative": "huge.png", "sha256": "0" * 64})
    rewrite(path, document)
    start = time.perf_counter()
    session, problems = load_session(path)
    elapsed = time.perf_counter() - start
    assert problems == [f"Cannot read '{big}': it is not an image file (or its format is not supported). "
                        "The rest of the session was restored."]  # fmt: skip
    assert elapsed < 1.5, elapsed  # hashing 3 GB takes far longer
    assert session.found_images() == [document["images"][1]["path"]]
    assert export_session(path, tmp_path / "out") == 0


def test_no_readable_image_left_is_one_error_line(saved, tmp_path, capsys) -> None:
    path, document = saved
    document["images"] = [{"path": "/etc/passwd"}]
    rewrite(path, document)
    assert export_session(path, tmp_path / "out") == 2
    err = lines(capsys.readouterr().err)
    assert err[-1] == "hookscope: error: None of the session's images could be used; there is nothing to run."


# ---- edits -----------------------------------------------------------------------------------------------------
def test_an_edit_with_a_channel_out_of_range_is_listed_and_the_others_apply(saved, tmp_path, capsys) -> None:
    path, document = saved
    document["edits"] = ["zero:layer1:3", "zero:layer1:999", "keep:conv1:70,2"]
    rewrite(path, document)
    out = tmp_path / "out"
    assert export_session(path, out) == 0
    err = lines(capsys.readouterr().err)
    assert (
        "hookscope: Edit 'zero:layer1:999' was not restored: layer1 has 64 channels; channel 999 does not exist." in err
    )
    assert (
        "hookscope: Edit 'keep:conv1:70,2' was not restored: conv1 has 64 channels; channel 70 does not exist." in err
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["edits"] == ["zero:layer1:3"]
    activations = np.load(out / "activations.npz")
    assert activations["conv1"].shape == (1, 64, 112, 112)


def test_session_survey_lets_the_registry_check_channels() -> None:
    loaded = load_model("resnet18", "none")
    session = Session(edits=["zero:layer1:999", "scale:layer2:0.5"])
    survey = session_survey(loaded.module, session, loaded.preprocess)
    assert survey is not None and survey.input_shape == (1, 3, 224, 224)
    with HookRegistry(loaded.module) as registry:
        registry.adopt_survey(survey)
        problems, _ = apply_session_edits(registry, session, loaded.preprocess)
        assert problems == ["Edit 'zero:layer1:999' was not restored: layer1 has 64 channels; channel 999 does not "
                            "exist."]  # fmt: skip
        assert [edit.spec for edit in registry.enabled_edits()] == ["scale:layer2:0.5"]
    # nothing to check: no survey (the model does not run for nothing)
    assert session_survey(loaded.module, Session(edits=["scale:layer2:0.5"]), loaded.preprocess) is None


# ---- malformed entries -----------------------------------------------------------------------------------------
def test_malformed_hooks_entries_are_listed_and_the_rest_restored(saved) -> None:
    path, document = saved
    document["hooks"] = [["conv1", "forward"], 5, ["layer2"], None, {"a": 1}, ["layer1", "backward"]]
    document["edits"] = ["zero:layer1:3", 7, ["scale:layer2:0.5"]]
    rewrite(path, document)
    session, problems = load_session(path)
    assert session.hooks == [("conv1", "forward"), ("layer1", "backward")]
    assert session.edits == ["zero:layer1:3"]
    assert problems == [
        "Hooks entry 5 is not [module, kind]; it was not restored.",
        "Hooks entry ['layer2'] is not [module, kind]; it was not restored.",
        "Hooks entry None is not [module, kind]; it was not restored.",
        "Hooks entry {'a': 1} is not [module, kind]; it was not restored.",
        "Edits entry 7 is not an edit spec; it was not restored.",
        "Edits entry ['scale:layer2:0.5'] is not an edit spec; it was not restored.",
    ]


def test_a_hooks_value_that_is_not_a_list_is_one_line(saved) -> None:
    path, document = saved
    document["hooks"] = {"conv1": "forward"}
    document["images"] = [document["images"][0], 12]
    rewrite(path, document)
    session, problems = load_session(path)
    assert session.hooks == [] and len(session.images) == 1
    assert problems == ["The session's hooks are not a list; none was restored.",
                        "Images entry 12 is not a file entry; it was not restored."]  # fmt: skip


def test_the_cli_restores_the_rest_of_a_session_with_malformed_hooks(saved, tmp_path, capsys) -> None:
    path, document = saved
    document["hooks"] = [["conv1", "forward"], 5]
    rewrite(path, document)
    out = tmp_path / "out"
    assert export_session(path, out) == 0
    assert "hookscope: Hooks entry 5 is not [module, kind]; it was not restored." in capsys.readouterr().err
    assert list(np.load(out / "activations.npz")) == ["conv1"]


# ---- damaged files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text.replace('"seed": 0', '"seed": 1e999'),
        lambda text: text.replace('"target": "top1"', '"target": 1e999'),
        lambda text: text.replace('"target": "top1"', '"target": -Infinity'),
        lambda text: text.replace('"target": "top1"', '"target": NaN'),
        lambda text: text.replace('"seed": 0', '"seed": 1' + "0" * 400),
        lambda text: text.replace('"ui": {}', '"ui": ' + "[" * 100_000 + "]" * 100_000),
        lambda text: text.replace('"ui": {}', '"ui": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000),
    ],
    ids=[
        "seed-1e999",
        "target-1e999",
        "target-minus-infinity",
        "target-nan",
        "seed-10^400",
        "deep-lists",
        "deep-objects",
    ],  # fmt: skip
)
def test_numbers_out_of_range_and_deep_nesting_are_a_damaged_session(saved, tmp_path, capsys, damage) -> None:
    path, _ = saved
    text = path.read_text()
    damaged = damage(text)
    assert damaged != text
    rewrite(path, damaged)
    with pytest.raises(HookscopeError, match="is a damaged Hookscope session"):
        load_session(path)
    assert export_session(path, tmp_path / "out") == 2
    err = lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("hookscope: error: ") and "damaged Hookscope session" in err[0]
    assert "unexpected" not in err[0] and len(err[0]) < 400


def test_a_session_that_loads_runs_its_hooks(saved) -> None:
    """The healthy file still does everything (a guard for the parsing changes)."""
    path, _ = saved
    session, problems = load_session(path)
    assert problems == [] and session.edits == ["zero:layer1:3"]
    loaded = load_model("resnet18", "none")
    with HookRegistry(loaded.module) as registry:
        assert register_session_hooks(registry, session) == []
        assert sorted((h.path, h.kind) for h in registry.handles()) == [("conv1", "forward"), ("layer1", "backward")]

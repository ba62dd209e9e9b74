"""Hostile input: targets. A session's target, or --target, that no model can have (a class number of a million
digits, ``true``) is refused in one line in Hookscope's words, never Python's "Exceeds the limit (4300 digits)" and
never quietly read as class 1.

Real sessions saved by Hookscope and damaged as a file would be, the real ``hookscope`` entry point.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hostile import SAMPLE, one_error

from hookscope.cli import main


@pytest.fixture(scope="module")
def session_text(tmp_path_factory) -> tuple[Path, str]:
    """A real session (ResNet-18, random weights, one hook, the sample image) and its JSON text."""
    from hookscope.core.models.catalogue import load_model
    from hookscope.core.outputs.session import save_session, session_from

    folder = tmp_path_factory.mktemp("session")
    shutil.copy(SAMPLE, folder / "cat.png")
    session = session_from(load_model("resnet18", "none", seed=0), [("conv1", "forward")], [folder / "cat.png"])
    save_session(session, folder / "s.hookscope.json")
    text = (folder / "s.hookscope.json").read_text()
    assert '"target": "top1"' in text
    return folder, text


@pytest.mark.parametrize("target, said", [('"class:' + "9" * 10**6 + '"', "holds a number of 1000000 digits"),
                                          ("true", "True is no gradient target")])  # fmt: skip
def test_a_session_target_no_model_can_have_is_one_line(session_text, tmp_path, capsys, target, said) -> None:
    """Issue 46: "unexpected error: ValueError: Exceeds the limit (4300 digits)"; "target": true became class 1."""
    folder, text = session_text
    path = folder / "damaged.hookscope.json"
    path.write_text(text.replace('"target": "top1"', f'"target": {target}'))
    out = tmp_path / "out"
    assert main(["export", "--session", str(path), "--out", str(out), "--no-png"]) == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"hookscope: error: '{path}' is a damaged Hookscope session (") and said in line
    assert len(line) < 400 and "4300" not in line and not out.exists()


@pytest.mark.parametrize("target", ["class:" + "9" * 5000, "9" * 5000, "box:" + "9" * 20, "class:1@0,0,1," + "9" * 30])
def test_a_target_number_too_long_for_any_model_is_refused_in_one_short_line(tmp_path, capsys, target) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["export", "--weights", "none", "--image", SAMPLE, "--target", target, "--out", str(tmp_path / "o")])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "argument --target: target must be " in err and len(err.splitlines()[-1]) < 400
    assert not (tmp_path / "o").exists()


def test_the_target_words_refuse_a_number_no_model_has_in_their_own_words() -> None:
    from hookscope.core.common.errors import RunError
    from hookscope.core.engine.target_words import parse_target

    for text in ("class:" + "9" * 10**6, "9" * 10**6, "box:" + "9" * 10, "class:3@0,0," + "9" * 12 + ",5"):
        with pytest.raises(RunError, match=r"holds a number of \d+ digits: no model has that many"):
            parse_target(text)
    assert parse_target("class:999999999").index == 999_999_999  # nine digits: a number, checked at the run

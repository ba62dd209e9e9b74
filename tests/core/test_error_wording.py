"""Errors carry facts, front ends word them: an engine error says what went wrong and, as a field (``remedy``),
what the user can do; the command line words that with its options, the window with its menus and buttons, and no
engine message names a command-line option."""

from __future__ import annotations

import ast
import copy
import pickle
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.cli import main
from hookscope.cli.common import readable_error
from hookscope.cli.words import CLI_WORDS
from hookscope.core.common.errors import HookscopeError, ModelError, Remedy
from hookscope.core.common.resources import sample_image
from hookscope.core.live.video import no_camera_error
from hookscope.core.models.files import ArchitectureRequired, TrustRequired, open_model_file
from hookscope.ui.words import WINDOW_WORDS, window_words

CORE = Path(hookscope.__file__).parent / "core"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Where core text may name options: its own commands' (the benchmarks' parsers; the installer build's step), the
# standalone script's own options (its usage lines and template), and the generated command-line reference.
OWN_OPTIONS = {
    "bench/": None,  # python -m hookscope.core.bench.*: commands of their own
    "models/bundled_weights.py": None,  # python -m hookscope.core.models.bundled_weights, run by the installer build
    "teaching/guide.py": {"--help"},  # the command-line reference page: each command's --help
    "teaching/script_templates/standalone.py": {"--image", "--device", "--save"},  # the script's own options
    "teaching/script_export.py": {"--image", "--device", "--save"},  # the script's usage lines
}


def _strings(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a module but its docstrings (f-strings' literal parts included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_engine_message_names_a_command_line_option():
    named = []
    for path in sorted(CORE.rglob("*.py")):
        where = path.relative_to(CORE).as_posix()
        allowed = next((options for prefix, options in OWN_OPTIONS.items() if where.startswith(prefix)), set())
        if allowed is None:
            continue
        for line, text in _strings(path):
            named += [f"core/{where}:{line}: {option}" for option in OPTION.findall(text) if option not in allowed]
    assert named == [], "engine text that names command-line options (give the error a Remedy):\n" + "\n".join(named)


def test_every_remedy_is_worded_by_both_front_ends():
    assert set(CLI_WORDS) == set(WINDOW_WORDS) == set(Remedy)
    for remedy in Remedy:
        assert not OPTION.search(remedy.plain) and not OPTION.search(WINDOW_WORDS[remedy]), remedy
        assert CLI_WORDS[remedy] != WINDOW_WORDS[remedy]


@pytest.fixture
def state_dict_file(tmp_path) -> Path:
    path = tmp_path / "weights.pth"
    torch.save(nn.Linear(3, 2).state_dict(), path)
    return path


def test_a_state_dict_without_its_architecture_in_both_front_ends(state_dict_file):
    with pytest.raises(ArchitectureRequired) as raised:
        open_model_file(state_dict_file)
    error = raised.value
    fact = f"'{state_dict_file}' is a state_dict (2 tensors, no architecture)"
    assert (error.fact, error.remedy, error.path, error.keys) == (
        fact,
        Remedy.NAME_ARCHITECTURE,
        str(state_dict_file),
        2,
    )
    assert (
        readable_error(error) == f"{fact}: choose the architecture it belongs to (--arch NAME, e.g. --arch resnet18)."
    )
    assert window_words(error) == f"{fact}: choose the architecture it belongs to."
    assert str(error) == f"{fact}: choose the architecture it belongs to (e.g. resnet18)."  # the Python API's


def test_a_pickled_model_that_needs_trust_in_both_front_ends(tmp_path):
    path = tmp_path / "whole.pt"
    torch.save(nn.Linear(3, 2), path)
    with pytest.raises(TrustRequired) as raised:
        open_model_file(path)
    error = raised.value
    assert error.remedy is Remedy.TRUST and error.objects == ("torch.nn.modules.linear.Linear",)
    assert readable_error(error) == f"{error.fact}: pass --trust if you trust its author."
    assert window_words(error) == f"{error.fact}: confirm that you trust its author."
    assert "--" not in str(error) and "--" not in window_words(error)
    for kept in (pickle.loads(pickle.dumps(error)), copy.copy(error)):  # the facts cross a worker's boundary
        assert (kept.fact, kept.remedy, kept.path, kept.objects) == (
            error.fact,
            error.remedy,
            error.path,
            error.objects,
        )


def test_a_compiled_model_points_to_its_code_in_both_front_ends(tmp_path):
    path = tmp_path / "scripted.pt"
    torch.jit.script(nn.Linear(3, 2)).save(str(path))
    with pytest.raises(ModelError) as raised:
        open_model_file(path)
    error = raised.value
    assert error.remedy is Remedy.MODEL_CODE and error.fact.endswith("so Python hooks on its modules would never fire")
    assert readable_error(error).endswith(
        "; open the model's Python code instead: a state_dict with --arch NAME, a model.py:build factory (with "
        "--weights FILE), or a pickled nn.Module with --trust."
    )
    assert window_words(error).endswith(", or a pickled nn.Module (File > Open model…).")


def test_the_command_line_says_the_same_error_with_its_options(state_dict_file, tmp_path, capsys):
    argv = ["export", "--model-file", str(state_dict_file), "--image", str(sample_image()), "--out", str(tmp_path)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"hookscope: error: '{state_dict_file}' is a state_dict (2 tensors, no architecture): choose the architecture "
        "it belongs to (--arch NAME, e.g. --arch resnet18).\n"
    )


def test_no_camera_in_both_front_ends():
    error = no_camera_error()
    assert error.remedy is Remedy.VIDEO_INSTEAD and error.fact.startswith("No camera found: ")
    assert readable_error(error) == f"{error.fact} Open a video file instead (--video FILE)."
    assert window_words(error) == f"{error.fact} Open a video file instead (File > Open video…)."


def test_an_error_without_a_remedy_is_its_message_everywhere():
    error = HookscopeError("The model has no module named 'x'.", module_path="x")
    assert str(error) == readable_error(error) == window_words(error) == "The model has no module named 'x'."

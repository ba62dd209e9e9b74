"""One meaning per option of the command line: one default for the weights, ``--seed`` the weights' seed in every
command, every option in its --help under one name (no hidden old spelling), every subcommand listed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from hookscope.cli import main
from hookscope.cli.common import DEFAULT_WEIGHTS
from hookscope.cli.dispatch import COMMANDS, SUBCOMMANDS, build_window_parser
from hookscope.cli.export import build_export_parser
from hookscope.cli.scan import build_scan_parser
from hookscope.cli.teach import build_lessons_parser, build_visualize_parser
from hookscope.core.teaching.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def _default(parser, dest: str):
    return next(action.default for action in parser._actions if action.dest == dest)


def test_weights_have_one_default_and_seed_is_the_weights_seed_everywhere():
    parsers = {"window": build_window_parser(), "export": build_export_parser(), "scan": build_scan_parser(), "visualize": build_visualize_parser(),
               "lessons": build_lessons_parser()}  # fmt: skip
    assert {name: _default(p, "weights") for name, p in parsers.items()} == dict.fromkeys(parsers, DEFAULT_WEIGHTS)
    for name, parser in parsers.items():
        seed = next(action for action in parser._actions if "--seed" in action.option_strings)
        assert "random weights" in seed.help, name
    visualize = build_visualize_parser()
    assert visualize.parse_args(["--layer", "x", "--out", "o.png", "--seed", "3"]).seed == 3
    assert visualize.parse_args(["--layer", "x", "--out", "o.png", "--opt-seed", "5"]).opt_seed == 5


def test_visualizes_old_weights_seed_spelling_is_gone(capsys):
    """--seed is the weights' seed in every command; visualize's old --weights-seed (a silent alias since issue 22,
    never in --help or the CLI reference) is refused as any unknown option is, in one line with exit 2."""
    parsers = {"window": build_window_parser(), **{name: build() for name, (build, _run) in COMMANDS.items()}}
    for name, parser in parsers.items():
        assert not any("--weights-seed" in action.option_strings for action in parser._actions), name
    with pytest.raises(SystemExit) as stop:
        main(["visualize", "--layer", "layer1", "--out", "o.png", "--weights-seed", "2"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --weights-seed 2" in capsys.readouterr().err


def test_help_lists_every_subcommand_on_a_line_of_its_own(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert re.search(rf"^  {name} +\S", text, re.MULTILINE), name


def test_lessons_help_counts_the_lessons():
    assert f"in {len(LESSONS)} lessons" in build_lessons_parser().format_help().replace("\n", " ")


def test_visualize_seed_seeds_the_weights_and_opt_seed_the_optimisation(tmp_path, capsys):
    def run(*options: str) -> tuple[str, bytes]:
        out = tmp_path / "v.png"
        code = main(["visualize", "--weights", "none", "--layer", "layer1", "--steps", "1", "--size", "32",
                     "--out", str(out), *options])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        line = capsys.readouterr().out
        return line.split(": objective ")[1].split(" -> ")[0], out.read_bytes()

    start_1, picture_1 = run("--seed", "1")
    start_2, picture_2 = run("--seed", "2")
    assert start_1 != start_2  # other weights: another objective at the start
    assert run("--seed", "2", "--opt-seed", "7")[1] != picture_2

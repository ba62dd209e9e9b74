"""``hookscope --help`` answers at once: building the command line's parsers (the window's and every subcommand's),
and parsing a command line, import no torch and no Qt; ``import hookscope`` alone imports neither (issue 42, item 7).

Checked in fresh interpreters, by what ends up in ``sys.modules``, not by the clock (the machines are noisy):
``python -m hookscope.core.bench.startup`` prints the times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hookscope.core.common.vocabulary import TERMS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchvision", "PySide6", "shiboken6", "pyqtgraph", "superqt")


def run_python(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


HEAVY_LOADED = f"sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))"


def test_every_help_is_printed_without_torch_or_qt():
    code = f"""
import contextlib, io, json, sys
from hookscope.cli.dispatch import COMMANDS, SUBCOMMANDS, main

helps = {{}}
for args in ([], *([name] for name in SUBCOMMANDS)):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([*args, "--help"])
            code = None
        except SystemExit as stop:
            code = stop.code
    helps[" ".join(args)] = [code, out.getvalue()]
print(json.dumps({{"helps": helps, "commands": sorted(COMMANDS), "heavy": {HEAVY_LOADED}}}))
"""
    found = run_python(code)
    assert found["heavy"] == [], f"building the parsers imported {found['heavy']}"
    assert set(found["helps"]) == {"", *found["commands"]}
    for name, (status, text) in found["helps"].items():
        assert status == 0, (name, status)
        assert text.startswith(f"usage: hookscope {name}".rstrip()), (name, text[:200])
        assert "--help" in text and "--debug" in text
    assert "Headless subcommands" in found["helps"][""][1]
    assert "The four hooks in 9 lessons" in " ".join(found["helps"]["lessons"][1].split())


def test_parsing_a_command_line_imports_no_torch_either():
    """The argument types (hook words, --target's forms, counts, frame ranges) are checked before anything heavy
    loads, and a refused one is the usual argparse line, exit 2."""
    code = f"""
import contextlib, io, json, sys
from hookscope.cli.dispatch import COMMANDS, build_window_parser

build_window_parser().parse_intermixed_args(["a.jpg", "--tick", "layer1,fc", "--hooks", "act,grad", "b.jpg"])
args = COMMANDS["export"][0]().parse_args(
    ["--image", "a.jpg", "--hooks", "act,grad_in", "--target", "class:3@0,0,8,8", "--frames", "2:5"]
)
COMMANDS["scan"][0]().parse_args(["--images", "d", "--layers", "all", "--out", "o", "--top", "3"])
COMMANDS["live"][0]().parse_args(["--camera", "0", "--hooks", "act,grad", "--target", "7"])
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        COMMANDS["export"][0]().parse_args(["--target", "nonsense"])
        status = None
    except SystemExit as stop:
        status = stop.code
print(json.dumps({{"hooks": args.hooks, "target": args.target.spec, "status": status, "error": err.getvalue(),
                  "heavy": {HEAVY_LOADED}}}))
"""
    found = run_python(code)
    assert found["heavy"] == [], f"parsing imported {found['heavy']}"
    assert found["hooks"] == ["forward", "grad_input"] and found["target"] == "class:3@0,0,8,8"
    assert found["status"] == 2
    assert (
        found["error"].strip().splitlines()[-1].startswith("hookscope export: error: argument --target: target must be")
    )


def test_python_m_hookscope_help_answers_as_the_command_does():
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: hookscope") and "Headless subcommands" in done.stdout
    script = Path(sys.executable).with_name("hookscope")  # the console script next to this interpreter, when installed
    if script.is_file():
        console = subprocess.run([str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert console.returncode == 0 and console.stdout == done.stdout


def test_import_hookscope_alone_imports_no_torch_and_no_qt():
    code = f"""
import json, sys
import hookscope
names = dir(hookscope)
version = hookscope.__version__
words = hookscope.HOOK_WORDS  # the vocabulary is light too
print(json.dumps({{"heavy": {HEAVY_LOADED}, "capture": "capture" in names, "words": sorted(words)}}))
"""
    found = run_python(code)
    assert found["heavy"] == [], f"import hookscope imported {found['heavy']}"
    assert found["capture"] and found["words"] == sorted(terms.word for terms in TERMS)


def test_the_light_lesson_ids_are_the_lessons():
    """``hookscope lessons --help`` counts the lessons from a torch-free list: it stays the lessons' own."""
    from hookscope.core.teaching.lesson_ids import LESSON_IDS
    from hookscope.core.teaching.lessons import LESSONS

    assert LESSON_IDS == tuple(item.id for item in LESSONS)


def test_the_target_words_are_the_engines():
    from hookscope.core.engine import objectives, target_words

    assert objectives.Objective is target_words.Objective and objectives.parse_target is target_words.parse_target
    assert objectives.parse_target("box:2") == target_words.Objective("box", index=2)


def test_the_startup_benchmark_prints_every_figure():
    """One round (no time is asserted): every --help, import torch, the engine after it, import hookscope alone."""
    from hookscope.core.bench.startup import measure, report

    result = measure(runs=1, commands=["lessons"])
    lines = report(result)
    text = "\n".join(lines)
    for label in ("hookscope --help", "hookscope lessons --help", "import torch", "hookscope.capture, after import torch",
                  "import hookscope (alone)"):  # fmt: skip
        assert label in text, label
    assert result.alone_imported == set()
    assert result.engine_imported == set()  # hookscope.capture loads neither torchvision nor Qt
    assert all(len(figure.values) == 1 for figure in (*result.helps, result.torch, result.engine))

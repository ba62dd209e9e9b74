"""The documentation stays true: the generated command-line reference holds every subcommand and option of the
parsers ``hookscope`` uses, and the commands README.md and the guide show still parse (and the cheap ones run)
as written. ``mkdocs build --strict`` itself (broken links, missing images) runs in ``.ci/run``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _guide_files():
    spec = importlib.util.spec_from_file_location("guide_files", DOCS / "hooks" / "guide_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


guide = _guide_files()


def _code_blocks(path: Path, languages: tuple[str, ...] = ("bash", "sh", "shell", "")) -> list[str]:
    """The fenced code blocks of a Markdown file in the given languages (``""``: no language given)."""
    blocks = re.findall(r"^```([\w-]*)\n(.*?)^```", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    return [body for language, body in blocks if language in languages]


def _shell_commands(block: str) -> list[str]:
    """The command lines of a shell block: continuation lines joined, comments and ``$ `` prompts dropped, output
    lines (in a block that shows a prompt) left out."""
    prompted = any(line.startswith("$ ") for line in block.splitlines())
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        if prompted:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        line = line.split("  #", 1)[0].strip()
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def _hookscope_invocations(command: str) -> list[list[str]]:
    """Every ``hookscope ...`` in a command line (also after ``&&``), as argument lists."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found, words = [], []
    for token in [*lexer, ";"]:
        if token in ("&&", "||", ";", "|", "&"):
            if words and words[0] in ("hookscope", "hookscope/hookscope"):
                found.append(words[1:])
            words = []
        else:
            words.append(token)
    return found


def _parse(args: list[str]) -> argparse.Namespace:
    """Parse as ``hookscope`` does (``hookscope.cli.main``): a subcommand's parser, or the window's."""
    parsers = guide.command_parsers()
    name = args[0] if args and args[0] in parsers else ""
    parser, rest = parsers[name], args[1:] if name else args
    options = {option for action in parser._actions for option in action.option_strings}
    for word in rest:  # spelled out: argparse takes abbreviations, which a new option can make ambiguous
        if word.startswith("--") and word.split("=")[0] not in options:
            raise SystemExit(f"'{word}' is not an option of hookscope {name}".rstrip())
    return parser.parse_args(rest) if name else parser.parse_intermixed_args(rest)


def _assert_parses(where: str, args: list[str]) -> None:
    try:
        _parse(args)
    except SystemExit as exit_:  # --help and --version exit 0 once printed: that is parsing too
        if exit_.code not in (0, None):
            pytest.fail(f"{where}: 'hookscope {' '.join(args)}' does not parse: {exit_.code}")


def _documented_commands(paths: list[Path]) -> list[tuple[str, list[str]]]:
    found = []
    for path in paths:
        shell = _code_blocks(path, ("bash", "sh", "shell"))
        sessions = [b for b in _code_blocks(path, ("", "text", "console")) if re.search(r"^\$ ", b, re.MULTILINE)]
        for block in shell + sessions:  # a plain block is a shell session when it shows a "$ " prompt
            for command in _shell_commands(block):
                if "..." in command or re.search(r"\s\[", command):
                    continue  # shortened ("hookscope scan ... --ray auto") or a synopsis ("[--top 9]"): not a command
                found += [(f"{path.name}: {command}", args) for args in _hookscope_invocations(command)]
    return found


def _inline_commands(paths: list[Path]) -> list[tuple[str, list[str]]]:
    """``hookscope ...`` in inline code in the prose (`hookscope download --model resnet50`), where it is a whole
    command: not a synopsis with [optional] parts or a shortened one with "..."."""
    found = []
    for path in paths:
        for span in re.findall(r"`(hookscope [^`]+)`", path.read_text().replace("\n", " ")):
            if len(span.split()) == 2 and span.split()[1] in guide.command_parsers():
                continue  # the name of a subcommand ("`hookscope scan` writes ..."), not a command line
            if not re.search(r"\[|\.\.\.|…|\||[A-Z]{3,}", span):
                found += [(f"{path.name}: {span}", args) for args in _hookscope_invocations(span)]
    return found


# --- the generated reference -------------------------------------------------------------------------------------


def test_the_reference_knows_every_subcommand_the_cli_dispatches_to():
    from hookscope.cli.dispatch import SUBCOMMANDS

    assert set(guide.command_parsers()) == {"", *SUBCOMMANDS}


def test_every_subcommand_and_every_option_is_in_the_generated_reference():
    page = guide.render_reference()
    headings = re.findall(r"^## `(hookscope[^`]*)`$", page, flags=re.MULTILINE)
    parsers = guide.command_parsers()
    assert headings == [f"hookscope {name}".strip() for name in parsers]
    sections = dict(zip(headings, re.split(r"^## `hookscope[^`]*`$", page, flags=re.MULTILINE)[1:], strict=True))
    checked = 0
    for name, parser in parsers.items():
        section = sections[f"hookscope {name}".strip()]
        for action in parser._actions:
            for option in action.option_strings:
                # in the usage/--help text and as a row of the options table
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section), (name, option)
                assert (
                    re.search(rf"^\| `{re.escape(option)}[ `]", section, flags=re.MULTILINE)
                    or f", `{option}" in section
                ), (name, option)
                checked += 1
            if action.help and action.help != argparse.SUPPRESS:
                assert guide._escape(action.help.replace("%(default)s", str(action.default))) in section, action.dest
    assert checked > 80  # every option of seven parsers, not an empty loop


def test_the_reference_is_the_help_text_itself():
    """The page holds ``--help`` verbatim, so the two cannot say different things."""
    page = guide.render_reference()
    for name, parser in guide.command_parsers().items():
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"
        try:
            text = parser.format_help().rstrip()
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
        assert f"```text\n{text}\n```" in page, name


def test_a_new_option_appears_in_the_reference_without_editing_the_docs(monkeypatch):
    import hookscope.cli.dispatch
    import hookscope.cli.teach

    real = hookscope.cli.teach.build_lessons_parser

    def with_one_more() -> argparse.ArgumentParser:
        parser = real()
        parser.add_argument("--brand-new-option", metavar="X", help="an option nobody documented by hand")
        return parser

    monkeypatch.setitem(hookscope.cli.dispatch.COMMANDS, "lessons", (with_one_more, hookscope.cli.teach.run_lessons))
    page = guide.render_reference()
    assert "| `--brand-new-option X` |" in page
    assert "an option nobody documented by hand" in page


def test_a_new_subcommand_is_in_the_reference_by_itself(monkeypatch):
    """The reference reads the command line's own dispatch table: a subcommand added there cannot be left out."""
    import argparse

    import hookscope.cli.dispatch as dispatch

    def build() -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="hookscope brand-new")
        parser.add_argument("--shiny", help="a brand-new option")
        return parser

    monkeypatch.setattr(dispatch, "SUBCOMMANDS", (*dispatch.SUBCOMMANDS, "brand-new"))
    monkeypatch.setitem(dispatch.COMMANDS, "brand-new", (build, lambda args: 0))
    page = guide.render_reference()
    assert "## `hookscope brand-new`" in page and "--shiny" in page and "a brand-new option" in page


# --- README's and the guide's commands ----------------------------------------------------------------------------


def test_readme_keeps_the_two_commands_ci_runs():
    blocks = [_shell_commands(block) for block in _code_blocks(README, ("bash",))]
    commands = [command for block in blocks for command in block]
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.14.1 torchvision==0.29.1 && "
        "pip install . && hookscope"
    ) in commands
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.14.1 torchvision==0.29.1 && "
        "pip install -e '.[test]' && lint-imports && ruff check app tests && ruff format --check app tests && mypy && "
        "python -m pytest"
    ) in commands
    assert len(README.read_text().splitlines()) <= 160  # a first visit's README, not the manual


def test_every_shell_block_in_readme_and_the_guide_is_valid_shell():
    bash = shutil.which("bash")
    assert bash
    blocks = [
        (path, block) for path in [README, *sorted(DOCS.rglob("*.md"))] for block in _code_blocks(path, ("bash",))
    ]
    assert len(blocks) >= 8
    for path, block in blocks:
        done = subprocess.run([bash, "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, (path.name, block, done.stderr)


def test_every_hookscope_command_in_readme_and_the_guide_parses():
    """Each documented command line is accepted by the parser ``hookscope`` itself uses: a renamed or removed
    option, a wrong choice or a missing required argument fails here."""
    commands = _documented_commands([README, *sorted(DOCS.rglob("*.md"))])
    assert len(commands) >= 12
    subcommands_seen = set()
    for where, args in commands:
        _assert_parses(where, args)
        subcommands_seen.add(args[0] if args and args[0] in guide.command_parsers() else "")
    assert {"", "export", "scan", "visualize", "lessons"} <= subcommands_seen


def test_every_hookscope_command_in_the_prose_parses():
    commands = _inline_commands([README, *sorted(DOCS.rglob("*.md"))])
    assert len(commands) >= 10
    for where, args in commands:
        _assert_parses(where, args)


def test_a_wrong_option_in_a_documented_command_would_be_caught():
    with pytest.raises(SystemExit):
        _parse(["export", "--model", "resnet18", "--layerz", "layer1"])
    with pytest.raises(SystemExit):
        _parse(["export", "--model", "resnet18", "--layer", "layer1"])  # argparse would take it for --layers
    with pytest.raises(SystemExit):
        _parse(["scan", "--images", "photos"])  # --layers and --out are required
    assert _documented_commands([README])  # README does have commands to check


def _hookscope_script() -> str:
    beside = Path(sys.executable).with_name("hookscope")
    found = str(beside) if beside.is_file() else shutil.which("hookscope")
    if not found:
        pytest.skip("the hookscope command is not installed in this environment")
    return found


def test_readme_command_line_examples_run_as_written(tmp_path):
    """README's "And from the command line" block, run line by line in a scratch folder that has the checkout's
    resources/ (the example reads resources/chelsea.png): each exits 0 and does what the README says."""
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    blocks = [block for block in _code_blocks(README, ("bash",)) if block.lstrip().startswith("hookscope --help")]
    assert len(blocks) == 1
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(_hookscope_script()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    commands = _shell_commands(blocks[0])
    assert commands[0] == "hookscope --help"
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        if command == "hookscope --help":
            assert "usage: hookscope" in done.stdout
        if command.startswith("hookscope export"):
            out = tmp_path / "out"
            assert {"manifest.json", "activations.npz", "gradients.npz"} <= {p.name for p in out.iterdir()}
        if command == "hookscope lessons --run-all":
            assert "all 9 lessons reproduced their claims" in done.stderr


def test_readme_links_point_at_files_that_exist():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link


# --- the built guide -----------------------------------------------------------------------------------------------


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="the guide's tools: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the guide's tools: pip install -e '.[docs]'")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def test_the_guide_builds_strict_with_the_reference_and_the_screenshots(tmp_path):
    done = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "cli.html").read_text()
    assert "hookscope scan" in reference and "--ray-actors" in reference
    for image in (ROOT / "resources" / "screenshots").glob("*.png"):
        assert (tmp_path / "site" / "screenshots" / image.name).read_bytes() == image.read_bytes()
    assert (tmp_path / "site" / "index.html").is_file()
    # The Python API reference, rendered from the docstrings by mkdocstrings, and the page's picture.
    api = (tmp_path / "site" / "reference" / "api.html").read_text()
    for name in ("hookscope.capture", "hookscope.Capture", "hookscope.Viewer", "hookscope.run"):
        assert f'id="{name}"' in api, name
    assert ":class:" not in api  # the docstrings' Sphinx roles show as code (docs/hooks/griffe_roles.py)
    for image in (DOCS / "images").glob("*.png"):
        assert (tmp_path / "site" / "images" / image.name).read_bytes() == image.read_bytes()


def test_a_broken_link_or_a_missing_image_fails_the_strict_build(tmp_path):
    """--strict is what CI relies on: a copy of the guide with one dead link and one missing picture fails."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    page = tmp_path / "docs" / "grad-cam.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md).\n\n![gone](screenshots/no-such.png)\n")
    done = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "screenshots/no-such.png" in done.stderr


def test_the_windows_help_names_every_subcommand():
    """``hookscope --help`` is where a newcomer at a terminal starts: it lists every subcommand."""
    from hookscope.cli.dispatch import SUBCOMMANDS

    text = guide.command_parsers()[""].format_help()
    for name in SUBCOMMANDS:
        assert re.search(rf"\b{name}\b", text.split("Headless subcommands:")[1]), name


# --- the Python API -----------------------------------------------------------------------------------------------


def test_every_python_block_in_readme_and_the_guide_is_valid_python():
    import ast

    blocks = [
        (path, block) for path in [README, *sorted(DOCS.rglob("*.md"))] for block in _code_blocks(path, ("python",))
    ]
    assert len(blocks) >= 5
    for path, block in blocks:
        try:
            ast.parse(block)
        except SyntaxError as error:
            pytest.fail(f"{path.name}: {error}\n{block}")


def test_the_api_reference_documents_every_public_name():
    """docs/reference/api.md renders each name of ``hookscope.__all__`` (mkdocstrings reads it from the source): a
    name added to the package and not to the page fails here."""
    import hookscope

    page = (DOCS / "reference" / "api.md").read_text()
    documented = set(re.findall(r"^::: hookscope\.(\w+)$", page, flags=re.MULTILINE))
    assert documented == set(hookscope.__all__) - {"__version__"}
    guide_page = (DOCS / "python-api.md").read_text()
    for name in ("capture", "Capture", "Viewer", "run", "HookscopeError", "Preprocess"):
        assert f"hookscope.{name}" in guide_page or f"`{name}`" in guide_page, name

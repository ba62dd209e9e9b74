"""One vocabulary of hook kinds: every name a person meets (the tree's column, a panel's title, an export's files,
the manifest, a session, the options of both command lines) is read from one table, the window and ``hookscope
export`` take the same words and write the same files, and what was written before (sessions, export manifests:
the fixtures in ``fixtures/before_one_vocabulary`` were written by the code before the vocabulary) still reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.cli import main
from hookscope.cli.dispatch import COMMANDS, build_window_parser
from hookscope.core.common.vocabulary import (
    HOOK_WORDS,
    KINDS,
    SHOWN_AS,
    TERMS,
    TERMS_OF_KIND,
    kind_of,
    kinds_in_order_given,
    word_of,
    words_text,
)
from hookscope.core.outputs.export import ARCHIVES, archives_of, picture_folder
from hookscope.core.outputs.session import load_session, panels_ui, save_session, session_panel_settings
from hookscope.core.pictures.panels import KIND_LABELS

BEFORE = Path(__file__).parent / "fixtures" / "before_one_vocabulary"
OLD_ARCHIVES = {  # what an export named its archives before one vocabulary (the fixture manifest says the same)
    "forward": "activations.npz",
    "pre": "inputs.npz",
    "backward": "gradients.npz",
    "tensor": "tensor_gradients.npz",
    "grad_input": "input_gradients.npz",
}


def test_every_kind_has_one_row_and_each_name_follows_from_it():
    assert {terms.kind for terms in TERMS} == set(KINDS)  # a new kind is a new row, or this fails
    assert len({terms.word for terms in TERMS}) == len({terms.files for terms in TERMS}) == len(TERMS)
    for terms in TERMS:
        assert terms.files == terms.title.lower().replace(" ", "_")  # the file says the title: gradients.npz
        assert KIND_LABELS[terms.kind] == terms.title  # a panel's title
        assert ARCHIVES[terms.kind] == terms.archive == f"{terms.files}.npz"
        assert picture_folder(terms.kind) == f"png/{terms.files}"
        assert HOOK_WORDS[terms.word] == terms.kind and word_of(terms.kind) == terms.word
    # the tensor hook on the output (the Grad column) is "gradients"; a full backward hook's grad_output, which no
    # column ticks, is "output gradients"; no two kinds share a name any more
    assert (TERMS_OF_KIND["tensor"].column, TERMS_OF_KIND["tensor"].title) == ("Grad", "Gradients")
    assert TERMS_OF_KIND["backward"].column is None and TERMS_OF_KIND["backward"].word == "grad_out"
    assert all(TERMS_OF_KIND[shown].column for shown in SHOWN_AS.values())


def test_both_command_lines_take_the_same_words_and_list_them_from_the_table(capsys):
    export = COMMANDS["export"][0]()
    window = build_window_parser()
    for word, kind in HOOK_WORDS.items():
        assert export.parse_args(["--hooks", word]).hooks == [kind]
        assert window.parse_intermixed_args(["--hooks", word]).hooks == [kind]
    assert capsys.readouterr().err == ""  # the words are not old spellings
    for parser in (export, COMMANDS["live"][0](), COMMANDS["bench"][0](), window):
        assert words_text() in " ".join(parser.format_help().split())
    assert export.parse_args(["--hooks", "act,grad_out,in"]).hooks == ["forward", "backward", "pre"]  # as given


def test_old_spellings_still_work_with_one_warning_line(capsys):
    export = COMMANDS["export"][0]()
    assert export.parse_args(["--hooks", "forward,tensor,grad_in"]).hooks == ["forward", "tensor", "grad_input"]
    assert capsys.readouterr().err == (
        "hookscope: warning: --hooks: 'forward' is now 'act' and 'tensor' is now 'grad'; the old words still work, "
        "for now.\n"
    )
    args = build_window_parser().parse_intermixed_args(["a.png", "--check", "layer1,fc", "--ticks", "act,grad"])
    assert (args.tick, args.hooks, args.images) == (["layer1", "fc"], ["forward", "tensor"], ["a.png"])
    assert capsys.readouterr().err.splitlines() == [
        "hookscope: warning: --check is now --tick; the old name still works, for now.",
        "hookscope: warning: --ticks is now --hooks; the old name still works, for now.",
    ]
    with pytest.raises(SystemExit) as refused:
        export.parse_args(["--hooks", "weights"])
    assert refused.value.code == 2 and f"hook words are {words_text()}; got 'weights'" in capsys.readouterr().err


def test_the_default_export_writes_the_files_the_windows_export_run_writes(tmp_path, capsys):
    """hookscope export's default hooks are the window's Act and Grad (forward and tensor hooks), so it writes what
    File > Export run writes for them (tests/ui/test_export_ui.py): activations.npz and gradients.npz, their
    pictures beside them, and the words in the manifest."""
    image = tmp_path / "in.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert (
        main(["export", "--weights", "none", "--image", str(image), "--layers", "conv1,layer1", "--out", str(out)]) == 0
    )
    assert capsys.readouterr().err.count("warning") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hook_kinds"] == ["act", "grad"]
    assert manifest["archives"] == {"act": "activations.npz", "grad": "gradients.npz"}
    assert {r["kind"]: r["method"] for r in manifest["modules"]["conv1"]["records"]} == {
        "act": "register_forward_hook",
        "grad": "Tensor.register_hook",
    }
    assert sorted(p.name for p in out.glob("*.npz")) == ["activations.npz", "gradients.npz"]
    assert sorted(p.name for p in (out / "png").iterdir()) == ["activations", "gradients"]
    with np.load(out / "gradients.npz") as gradients:
        assert sorted(gradients.files) == ["conv1", "layer1"] and np.abs(gradients["conv1"]).sum() > 0


@pytest.mark.parametrize("name", ["cli_all_kinds.hookscope.json", "window.hookscope.json"])
def test_a_session_saved_before_the_vocabulary_opens_and_saves_in_words(tmp_path, name):
    old = json.loads((BEFORE / name).read_text())
    session, problems = load_session(BEFORE / name)
    assert not any("Hook kind" in line or "panel" in line for line in problems), problems  # (its image moved)
    assert session.hooks == [(path, kind) for path, kind in old["hooks"]]  # the kinds, as they were saved
    default, panels, panel_problems = session_panel_settings(session)
    assert panel_problems == [] and set(panels) == {(entry[0], entry[1]) for entry in old["ui"]["panels"]}

    session.ui = {**session.ui, **panels_ui(default, panels)}  # what the window saves
    save_session(session, tmp_path / name)
    new = json.loads((tmp_path / name).read_text())
    assert new["hooks"] == [[path, word_of(kind)] for path, kind in old["hooks"]]
    assert new["ui"]["panels"] == [[entry[0], word_of(entry[1]), *entry[2:]] for entry in old["ui"]["panels"]]
    reopened, _ = load_session(tmp_path / name)
    assert reopened.hooks == session.hooks and session_panel_settings(reopened)[1] == panels


def test_an_export_manifest_written_before_the_vocabulary_reads_through_it():
    manifest = json.loads((BEFORE / "export_manifest.json").read_text())
    assert set(manifest["hook_kinds"]) == set(OLD_ARCHIVES)
    assert archives_of(manifest) == OLD_ARCHIVES  # gradients.npz was grad_out's: the manifest says so
    for module in manifest["modules"].values():
        for record in module["records"]:
            assert kind_of(record["kind"]) in KINDS
    # what is written now reads the same way: by the words
    words = {"hook_kinds": [word_of(kind) for kind in KINDS], "archives": {word_of(k): ARCHIVES[k] for k in KINDS}}
    assert archives_of(words) == ARCHIVES and archives_of(words)["tensor"] == "gradients.npz"
    for terms in TERMS:
        assert kind_of(terms.word) == kind_of(terms.kind) == terms.kind
    assert kind_of("weights") is None and kind_of("gradients.npz") is None  # an archive's name alone says no kind


def test_the_words_are_checked_once_each_in_the_order_given():
    assert kinds_in_order_given(["grad", "act", "GRAD", " in "]) == ("tensor", "forward", "pre")
    assert kinds_in_order_given(["backward", "grad_out"]) == ("backward",)


def test_a_panels_export_suggests_a_name_in_the_vocabulary():
    from hookscope.core.outputs.panel_export import panel_file_stem

    assert panel_file_stem("layer1.0.conv1", "tensor") == "layer1.0.conv1_gradients"
    assert panel_file_stem("encoder/0", "forward") == "encoder__0_activations"
    assert panel_file_stem("", "grad_input") == "model_input_gradients"


ROOT = Path(__file__).resolve().parents[2]
OLD_IN_DOCS = re.compile(
    r"--hooks[ =][\w,]*\b(?:forward|pre|backward|tensor|grad_input)\b|--ticks\b|(?<!format )--check\b(?!-)"
    r"|tensor_gradients|png/(?:forward|backward|tensor|pre|grad_input)/|check=\["
)


def test_the_guide_and_readme_say_the_words():
    """The pages use the words (the measurement log is history, as it was measured); the generated reference's
    table says them once, with the old word of each."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    old = [
        f"{page.name}: {match.group()}"
        for page in pages
        if page.name != "performance-log.md"
        for match in OLD_IN_DOCS.finditer(page.read_text(encoding="utf-8"))
    ]
    assert old == []

"""Every failure says what happened, in one line, with the right exit (the engine and the command line):

- a trusted ``build()`` that raises ``SystemExit(3)`` is an error of the model file (exit 2), not an exit of Hookscope;
- a model whose forward raises, or whose own in-place operation breaks autograd, is "the model raised during its
  forward (backward) pass", not "unexpected error" (which stays for Hookscope's own bugs, e.g. in a hook);
- ``--weights evil.pt`` refuses in Hookscope's words (no PyTorch warning first, no advice to set weights_only=False);
- NaN or inf in the weights or the output is a warning line and the manifest's ``non_finite``.

Real model files (written here), real torchvision models with ``weights=None``, the real ``hookscope`` entry point.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torchvision
from cli_output import message_lines
from model_files import MODELS

from hookscope.cli import main
from hookscope.core.engine.blame import ModelRaised
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry, Recorder
from hookscope.core.engine.numeric import NumericReport, non_finite_weights
from hookscope.core.engine.run import run_image
from hookscope.core.models.source import ModelSource, open_model

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")


@pytest.fixture
def model_py(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODELS)
    return path


def export(model_py: Path, factory: str, out: Path, *extra: str) -> int:
    return main(["export", "--model-file", f"{model_py}:{factory}", "--trust", "--image", SAMPLE, "--layers",
                 "conv,fc", "--out", str(out), *extra])  # fmt: skip


def error_lines(err: str) -> list[str]:
    return message_lines(err)  # progress lines aside: the error is one line of its own


# ---- (a) SystemExit in build() -----------------------------------------------------------------------------
def test_build_that_raises_system_exit_is_a_one_line_error_with_exit_2(model_py, tmp_path, capsys) -> None:
    assert export(model_py, "exits", tmp_path / "out") == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith("hookscope: error: The model file ") and "raised SystemExit(3)" in lines[0]
    assert "while building the model in exits()" in lines[0]


def test_a_pickle_that_calls_sys_exit_is_a_model_error(tmp_path, capsys) -> None:
    class Exits:
        def __reduce__(self):
            return (sys.exit, (5,))

    path = tmp_path / "exits.pt"
    torch.save({"model": Exits()}, path)
    code = main(["export", "--model-file", str(path), "--trust", "--image", SAMPLE, "--out", str(tmp_path / "o")])
    assert code == 2
    lines = error_lines(capsys.readouterr().err)
    assert lines == [f"hookscope: error: Unpickling '{path}' raised SystemExit(5)."]


# ---- (b) the model raised ----------------------------------------------------------------------------------
def test_a_forward_that_raises_is_the_models_failure(model_py, tmp_path, capsys) -> None:
    assert export(model_py, "raises", tmp_path / "out") == 2
    lines = error_lines(capsys.readouterr().err)
    assert lines == ["hookscope: error: The model raised during its forward pass: ValueError: shapes do not match in "
                     "my model"]  # fmt: skip


def test_sys_exit_in_forward_does_not_end_hookscope(model_py, tmp_path, capsys) -> None:
    assert export(model_py, "exits_in_forward", tmp_path / "out") == 2
    assert error_lines(capsys.readouterr().err) == [
        "hookscope: error: The model raised during its forward pass: SystemExit(4)"
    ]


def test_an_in_place_op_that_breaks_autograd_is_the_models_failure_in_the_backward_pass(
    model_py, tmp_path, capsys
) -> None:
    assert export(model_py, "inplace", tmp_path / "out") == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1
    assert lines[0].startswith(
        "hookscope: error: The model raised during its backward pass: RuntimeError: one of the "
        "variables needed for gradient computation has been modified by an inplace operation"
    )
    assert "in-place operation in the model's own code" in lines[0] and "anomaly detection" not in lines[0]


def test_capture_run_raises_model_raised_with_the_phase(model_py) -> None:
    for factory, phase, cause in (("raises", "forward", "ValueError"), ("inplace", "backward", "RuntimeError")):
        loaded = open_model(ModelSource(file=f"{model_py}:{factory}", trust=True))
        with HookRegistry(loaded.module) as registry:
            registry.add("conv", "forward")
            registry.add("conv", "backward")
            with pytest.raises(ModelRaised) as raised:
                run_image(loaded, registry, SAMPLE)
            assert (raised.value.phase, raised.value.cause) == (phase, cause)
            assert registry.handles()  # the registry is intact: the next run can go on


def test_a_bug_in_one_of_hookscopes_hooks_is_still_an_unexpected_error(monkeypatch, tmp_path, capsys) -> None:
    """The blame goes to the model only when the exception came from its code, not from a hook of ours."""

    def broken_keep(self, *args, **kwargs):
        raise KeyError("a bug in Hookscope")

    monkeypatch.setattr(Recorder, "keep", broken_keep)
    code = main(["export", "--model", "resnet18", "--image", SAMPLE, "--layers", "layer1", "--out", str(tmp_path)])
    assert code == 1
    assert "unexpected error: KeyError" in capsys.readouterr().err

    model = torchvision.models.resnet18(weights=None).eval()
    with HookRegistry(model) as registry:
        registry.add("layer1", "forward")
        with pytest.raises(KeyError):
            capture_run(model, registry, torch.rand(1, 3, 64, 64))


def test_a_torchvision_model_given_the_wrong_input_is_the_models_failure() -> None:
    model = torchvision.models.resnet18(weights=None).eval()
    with HookRegistry(model) as registry:
        registry.add("layer1", "forward")
        with pytest.raises(ModelRaised, match="forward pass: RuntimeError: .*channels"):
            capture_run(model, registry, torch.rand(1, 5, 64, 64))


# ---- (e) a weights file that would run code ----------------------------------------------------------------
class _Evil:
    def __reduce__(self):
        return (os.system, ("echo PWNED",))


@pytest.fixture
def evil(tmp_path: Path) -> Path:
    """A plain pickle (protocol 4): torch.load warns about it before refusing."""
    path = tmp_path / "evil.pt"
    with open(path, "wb") as handle:
        pickle.dump({"fc.weight": _Evil()}, handle, protocol=4)
    return path


def test_weights_that_would_run_code_are_refused_in_our_words_without_pytorchs_warning(evil, tmp_path) -> None:
    """In a fresh process, as a user runs it: stderr is exactly one line."""
    done = subprocess.run(
        [sys.executable, "-m", "hookscope", "export", "--weights", str(evil), "--image", SAMPLE, "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"hookscope: error: '{evil}' is not a plain weights file: it holds pickled Python objects "
                           "(posix.system)") or "(nt.system)" in line  # fmt: skip
    assert "would run code from the file" in line and "--model-file PATH --trust" in line
    assert "weights_only" not in line and "Warning" not in done.stderr and "PWNED" not in done.stdout


def test_no_pytorch_warning_is_raised_on_the_way(evil, tmp_path, capsys) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["export", "--weights", str(evil), "--image", SAMPLE, "--out", str(tmp_path)]) == 2
    assert [str(w.message) for w in caught] == []
    assert "weights_only=False" not in capsys.readouterr().err


def test_a_file_that_is_not_a_pickle_is_not_explained_with_pytorchs_advice(tmp_path, capsys) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"this is not a weights file at all\n" * 10)
    assert main(["export", "--weights", str(path), "--image", SAMPLE, "--out", str(tmp_path / "o")]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "weights_only" not in lines[0] and "\x1b[" not in lines[0]
    assert lines[0].startswith(f"hookscope: error: '{path}' is not a weights file that can be loaded safely")


# ---- (f) NaN and inf ---------------------------------------------------------------------------------------
def test_nan_weights_are_a_warning_line_and_a_manifest_field(model_py, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert export(model_py, "nan_weights", out) == 0  # the export did what it was asked: NaN included
    lines = error_lines(capsys.readouterr().err)
    warning = [line for line in lines if line.startswith("hookscope: warning: ")]
    assert len(warning) == 1, lines
    assert "the model's output holds NaN" in warning[0]
    assert "its weights hold NaN or inf (fc.weight: NaN in 1 of 40 values)" in warning[0]
    assert "the first capture with NaN or inf is fc (act)" in warning[0]
    described = json.loads((out / "manifest.json").read_text())["non_finite"]
    assert described["weights"] == [{"name": "fc.weight", "nan": 1, "inf": 0, "values": 40}]
    assert described["output"]["nan"] >= 1 and described["output"]["values"] == 10
    assert described["records"][0]["name"] == "fc (act)"


def test_inf_from_finite_weights_says_the_weights_are_finite(model_py, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert export(model_py, "overflow", out) == 0
    warning = [line for line in error_lines(capsys.readouterr().err) if "warning" in line]
    assert len(warning) == 1 and "the model's output holds" in warning[0]
    assert "its weights are finite" in warning[0]
    described = json.loads((out / "manifest.json").read_text())["non_finite"]
    assert described["weights"] == [] and described["output"] is not None


def test_a_finite_run_says_nothing_and_writes_null(model_py, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert export(model_py, "fine", out) == 0
    assert "warning" not in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["non_finite"] is None


def test_the_batch_export_warns_once(model_py, tmp_path, capsys) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("a.png", "b.png"):
        (folder / name).write_bytes(Path(SAMPLE).read_bytes())
    code = main(["export", "--model-file", f"{model_py}:nan_weights", "--trust", "--images", str(folder),
                 "--layers", "fc", "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1 and warning[0].startswith("hookscope: warning: 2 of 2 images gave NaN or inf")


def test_weights_check_is_kept_until_a_parameter_changes() -> None:
    model = torchvision.models.resnet18(weights=None)
    assert non_finite_weights(model) == []
    with torch.no_grad():
        model.layer1[0].conv1.weight[0, 0, 0, 0] = float("inf")
    found = non_finite_weights(model)
    assert [(f.name, f.nan, f.inf) for f in found] == [("layer1.0.conv1.weight", 0, 1)]


def test_the_report_reads_back_from_the_manifest() -> None:
    report = NumericReport.from_description(None)
    assert report.clean and report.line() == ""
    described = {"weights": [], "output": {"name": "output", "nan": 3, "inf": 0, "values": 3}, "input_grad": None,
                 "records": []}  # fmt: skip
    assert NumericReport.from_description(described).describe() == described


def test_a_huge_but_finite_tensor_is_not_reported() -> None:
    """The sum of huge finite values overflows; the exact count then finds nothing."""
    from hookscope.core.engine.numeric import count_non_finite

    assert count_non_finite("x", torch.full((10,), 3e38)) is None
    assert count_non_finite("x", torch.tensor([1.0, float("nan")])).nan == 1

"""Hostile input: models and where they come from. A generated standalone script checks its --device as the app
does; a Hub download that stalls is one progress line and one error line, and what came is kept for the resume
(after Ctrl-C too); a library's warning reaches the user in Hookscope's words, once; a window closed during a
download prints nothing at exit.

A real Hugging Face Hub on 127.0.0.1 (tests/hub_server.py) with the real huggingface_hub client, real scripts run as
a user runs them, a real Qt application for the window's worker. And issue 23's cases: sizes and counts that cannot
fit are refused before they are allocated, a model's own failure is worded as export words it, hostile module names
never become code in a generated script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hostile import ENV, ROOT, SAMPLE, ctrl_c_as_from_a_terminal, error_lines, one_error, run_bounded, write_images
from model_files import MODELS

from hookscope.cli import main
from tests.hub_server import HubServer, make_clip, make_vit, use_hub
from tests.loopback import serving


# ---- the generated script's device ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("script")
    path = folder / "run.py"
    assert main(["export", "--weights", "none", "--image", SAMPLE, "--layers", "layer1", "--out", str(folder / "out"),
                 "--no-png", "--script", str(path)]) == 0  # fmt: skip
    return path


@pytest.mark.parametrize("device", ["cuda:9", "cuda", "mps", "tpu"])
def test_the_script_checks_its_device_as_the_app_does(script, device) -> None:
    """Issue 46: a generated script run with --device cuda:9 (or cuda without a GPU) was a 20-line traceback."""
    from hookscope.core.engine.devices import available_devices

    if (device if device != "cuda" else "cuda:0") in available_devices():
        pytest.skip(f"this machine has {device}")
    done = subprocess.run([sys.executable, str(script), "--device", device], capture_output=True, text=True, env=ENV,
                          timeout=300)  # fmt: skip
    assert done.returncode == 2
    assert one_error(done.stderr) == (f"run.py: error: device {device!r} is not available on this machine; "
                                      f"available: {', '.join(available_devices())}")  # fmt: skip


# ---- the Hub: a stalled download, Ctrl-C, a library's warning ----------------------------------------------------
@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hub")
    make_vit(folder / "tiny" / "vit")
    make_clip(folder / "tiny" / "clip")
    return folder


WEIGHTS = "tiny/vit/model.safetensors"


@pytest.fixture
def stalled_hub(repos, tmp_path, monkeypatch):
    """The Hub serving ``repos``, the ViT's weights stalling half way (an open connection, nothing more), and an
    empty Hugging Face cache, for this process and the commands it starts."""
    with serving(HubServer(repos, stall=(WEIGHTS,))) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        yield server
        server.unstall.set()


def partial_sizes(home: Path) -> list[int]:
    return [p.stat().st_size for p in (home / "hf").rglob("*.incomplete")]


def download(*extra: str) -> subprocess.Popen:
    """``hookscope download``; its output as bytes, so that a bar redrawn in place (``\r``) stays one line."""
    return subprocess.Popen([sys.executable, "-m", "hookscope", "download", "--model", "hf:tiny/vit", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ),
                            preexec_fn=ctrl_c_as_from_a_terminal)  # fmt: skip


def screen_lines(err: bytes) -> list[str]:
    """The lines a terminal shows: each line as its last redraw."""
    return [line.split("\r")[-1] for line in err.decode().split("\n") if line.split("\r")[-1].strip()]


def test_a_stalled_hub_download_is_one_progress_line_one_error_and_keeps_what_came(stalled_hub, repos,
                                                                                  tmp_path) -> None:  # fmt: skip
    """Issue 46: 14 of huggingface_hub's "timed out" / "Trying to resume download..." lines before the error, and the
    part that came (less than one 64 kB chunk) lost."""
    started = time.monotonic()
    process = download("--timeout", "3")
    out, err = process.communicate(timeout=120)
    assert process.returncode == 2
    assert time.monotonic() - started < 60  # one wait of --timeout, not six of huggingface_hub's 10 s
    lines = screen_lines(err)
    assert lines[0].startswith("hookscope: downloading hf:tiny/vit from ")
    assert lines[1].startswith("hf:tiny/vit [") and " 50% " in lines[1]  # the bar, one line redrawn: what came
    assert lines[2] == ("hookscope: error: The download of model.safetensors of hf:tiny/vit broke off (timed out); "
                        "what came is kept and the next try resumes it.")  # fmt: skip
    assert len(lines) == 3, lines
    size = (repos / WEIGHTS).stat().st_size
    assert partial_sizes(tmp_path) == [size // 2]  # every byte that came


def test_ctrl_c_during_a_stalled_hub_download_keeps_what_came(stalled_hub, repos, tmp_path) -> None:
    """Issue 46: the partial file was left at 0 bytes."""
    process = download("--timeout", "60")
    assert process.stderr.readline().startswith(b"hookscope: downloading hf:tiny/vit from ")
    time.sleep(1.5)  # the half that comes has come; the connection stalls
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert screen_lines(err)[-1] == "hookscope: interrupted" and b"Traceback" not in err
    assert partial_sizes(tmp_path) == [(repos / WEIGHTS).stat().st_size // 2]


def test_a_library_warning_reaches_the_user_in_hookscopes_words(repos, tmp_path, monkeypatch) -> None:
    """Issue 46: export --model hf:ORG/CLIP --target similar:IMG printed torch's "UserWarning: For backward hooks to
    be called..." twice, with its file, line and source."""
    with serving(HubServer(repos)) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        done = subprocess.run([sys.executable, "-m", "hookscope", "export", "--model", "hf:tiny/clip", "--image",
                               SAMPLE, "--target", f"similar:{ROOT / 'resources' / 'coffee.png'}", "--out",
                               str(tmp_path / "out"), "--no-png"], capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ), timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Warning:" not in done.stderr and "return inner()" not in done.stderr
    said = [line for line in done.stderr.splitlines() if "warning" in line.lower() and str(tmp_path) not in line]
    assert all(line.startswith("hookscope: warning") for line in said) and len(said) == len(set(said))


def test_a_library_warning_is_one_worded_line_said_once(tmp_path, capsys) -> None:
    """torch's own warning (a full backward hook on a module whose output is a dict), raised on every run."""
    model = tmp_path / "model.py"
    model.write_text(
        textwrap.dedent("""
        import torch
        from torch import nn


        class Dict(nn.Module):
            def forward(self, x):
                return {"y": x}


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)
                self.inner = Dict()
                self.inner.register_full_backward_hook(lambda *a: None)  # torch warns: its output is no tensor
                self.fc = nn.Linear(4, 10)

            def forward(self, x):
                return self.fc(self.inner(self.conv(x))["y"].mean((2, 3)))


        def build():
            return Net()
    """)
    )
    code = main(["export", "--model-file", f"{model}:build", "--trust", "--image", SAMPLE, "--layers", "conv",
                 "--out", str(tmp_path / "out"), "--no-png"])  # fmt: skip
    assert code == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "backward hooks" in line]
    assert said == ["hookscope: warning from torch: For backward hooks to be called, module output should be a Tensor "
                    "or a tuple of Tensors but received <class 'dict'>"]  # fmt: skip


# ---- the window closed during a download ------------------------------------------------------------------------
CLOSED_DURING_A_DOWNLOAD = """
import os, time
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtWidgets import QApplication
from hookscope.ui.state.worker import PoolWorker, start_worker, wait_for_workers

app = QApplication([])
worker = PoolWorker(time.sleep, 1.5)  # a download still running when the window closes
worker.finished.connect(lambda: None)
start_worker(worker)
time.sleep(0.2)
wait_for_workers(300)  # the window waits its while, then closes: its objects go, the download runs on
del worker
del app
"""


def test_closing_the_window_during_a_download_prints_nothing_at_exit() -> None:
    """Issue 46: "Error calling Python override of QRunnable::run(): ... self.finished.emit() RuntimeError: Signal
    source has been deleted" at exit."""
    done = subprocess.run([sys.executable, "-c", CLOSED_DURING_A_DOWNLOAD], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=120)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")


# ==== from issue 23 (hostile input, round three): visualize, lessons, sizes, the generated script ====
@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_images(tmp_path_factory.mktemp("images"))


# ---- --steps 0 ---------------------------------------------------------------------------------------------
def test_visualize_refuses_zero_steps(tmp_path, capsys) -> None:
    out = tmp_path / "dream.png"
    code = main(["visualize", "--weights", "none", "--layer", "layer1", "--steps", "0", "--size", "32", "--out",
                 str(out)])  # fmt: skip
    assert code == 2
    assert one_error(capsys.readouterr().err) == "hookscope: error: --steps must be at least 1, not 0."
    assert not out.exists()


# ---- sizes and counts that cannot fit ---------------------------------------------------------------------
@pytest.mark.parametrize("option, value, what", [("--size", "100000", "one image"),
                                                 ("--images", "100000", "images of 64x64 pixels")])  # fmt: skip
def test_visualize_refuses_what_cannot_fit_before_allocating_it(tmp_path, option, value, what) -> None:
    out = tmp_path / "dream.png"
    args = ["visualize", "--weights", "none", "--layer", "layer1", "--steps", "2", "--size", "64", "--out", str(out)]
    code, err, peak_gb = run_bounded([*args, option, value])
    assert code == 2, err
    line = one_error(err)
    assert line.startswith(f"hookscope: error: {option} {value} needs at least ") and f"of memory for {what}" in line
    fits = int(line.rsplit(f"at most {option} ", 1)[1].split(" would fit")[0])
    assert 1 <= fits < int(value)
    assert peak_gb < 3 and not out.exists()


@pytest.mark.parametrize("extra, option", [(("--size", "100000"), "--size"),
                                           (("--size", "4000", "--batch-size", "64"), "--batch-size")])  # fmt: skip
def test_scan_refuses_what_cannot_fit_before_reading_an_image(images, tmp_path, extra, option) -> None:
    from hookscope.core.engine.memory_fit import available_memory

    out = tmp_path / "out"
    many = tmp_path / "many"  # 64 images, so that a batch of 64 is a batch of 64
    many.mkdir()
    for index in range(64):
        (many / f"{index}.png").write_bytes((images / f"photo{index % 5}.png").read_bytes())
    if option == "--batch-size" and available_memory() > 60e9:  # ResNet-18 needs about 80 GB for it
        pytest.skip("this machine may have memory for a batch of 64 images of 4000 pixels")
    args = ["scan", "--weights", "none", "--images", str(many), "--layers", "layer1", "--out", str(out), *extra]
    code, err, peak_gb = run_bounded(args)
    assert code == 2, err
    line = one_error(err)
    assert line.startswith(f"hookscope: error: {option} ") and "of memory for " in line and "would fit" in line
    assert peak_gb < 3 and not out.exists()


def test_what_would_fit_is_the_largest_value_that_does() -> None:
    from hookscope.core.common.errors import HookscopeError
    from hookscope.core.engine.memory_fit import largest_fitting, refuse_unless_fits

    def need(n: int) -> float:
        return 1000.0 * n * n

    assert largest_fitting(need, 16, 10_000, 1e9) == 1000 and largest_fitting(need, 16, 10_000, 1e5) is None
    refuse_unless_fits("one image", 1000, need, 16, int(1e9), "--size")  # fits exactly: no error
    refuse_unless_fits("one image", 10**9, need, 16, None, "--size")  # nothing known: no refusal
    with pytest.raises(HookscopeError, match=r"^--size 1001 needs at least 1.0 GB of memory for one image, more "
                                             r"than the 1.0 GB available; at most --size 1000 would fit\.$"):  # fmt: skip
        refuse_unless_fits("one image", 1001, need, 16, int(1e9), "--size")
    with pytest.raises(HookscopeError, match="not even --size 16 would fit"):
        refuse_unless_fits("one image", 20, need, 16, 1000, "--size")


# ---- a model that raises in visualize and lessons; a NaN objective --------------------------------------


@pytest.fixture
def model_py(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODELS)
    return path


FORWARD = "hookscope: error: The model raised during its forward pass: ValueError: shapes do not match in my model"
BACKWARD = "hookscope: error: The model raised during its backward pass: RuntimeError: one of the variables needed"


@pytest.mark.parametrize("factory, expected", [("raises", FORWARD), ("inplace", BACKWARD)])
def test_visualize_words_the_models_own_failure_as_export_does(model_py, tmp_path, capsys, factory,
                                                               expected) -> None:  # fmt: skip
    out = tmp_path / "dream.png"
    code = main(["visualize", "--model-file", f"{model_py}:{factory}", "--trust", "--layer", "conv", "--steps", "3",
                 "--size", "32", "--out", str(out)])  # fmt: skip
    assert code == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith(expected)
    assert not out.exists()


@pytest.mark.parametrize("factory, expected", [("raises", FORWARD), ("inplace", BACKWARD)])
def test_lessons_word_the_models_own_failure_as_export_does(model_py, capsys, factory, expected) -> None:
    code = main(["lessons", "--run-all", "--model-file", f"{model_py}:{factory}", "--trust"])
    captured = capsys.readouterr()
    assert code == 2
    assert one_error(captured.err).startswith(expected)
    assert captured.out == ""  # no lesson ran half-way


def test_a_nan_objective_is_a_warning_naming_the_first_module_that_went_non_finite(model_py, tmp_path,
                                                                                   capsys) -> None:  # fmt: skip
    out = tmp_path / "dream.png"
    code = main(["visualize", "--model-file", f"{model_py}:poisoned", "--trust", "--layer", "conv2", "--steps", "3",
                 "--size", "32", "--out", str(out)])  # fmt: skip
    assert code == 0
    warnings = [line for line in error_lines(capsys.readouterr().err) if "warning" in line]
    assert warnings == ["hookscope: warning: the objective is not a finite number (nan); the first module whose "
                        "output held NaN or inf is 'boom'."]  # fmt: skip


# ---- the generated script -----------------------------------------------------------------------------
HOSTILE = '''
from torch import nn

NAMES = ('a"b', "c'd\\nopen({marker!r}, 'w')", 'e"""f\\\\')


class Hostile(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(NAMES[0], nn.Conv2d(3, 4, 3))
        self.add_module(NAMES[1], nn.ReLU())
        self.add_module(NAMES[2], nn.Linear(4, 10))

    def forward(self, x):
        y = self._modules[NAMES[1]](self._modules[NAMES[0]](x))
        return self._modules[NAMES[2]](y.mean((2, 3)))


def build():
    return Hostile()

'''


@pytest.fixture
def hostile_script(tmp_path) -> tuple[Path, Path, Path]:
    """A script written by export --script for a trusted model whose module names hold quotes, a newline with code
    after it, and a backslash; (the script, the model file, the file the injected code would create)."""
    marker = tmp_path / "injected"
    model = tmp_path / 'my "model".py'
    model.write_text(HOSTILE.format(marker=str(marker)))
    script = tmp_path / "run.py"
    code = main(["export", "--model-file", f"{model}:build", "--trust", "--image", SAMPLE, "--out",
                 str(tmp_path / "out"), "--no-png", "--hooks", "forward,pre,backward,tensor,grad_input",
                 "--edit", 'scale:a"b:0.5', "--script", str(script)])  # fmt: skip
    assert code == 0
    return script, model, marker


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=ENV, timeout=300)


def test_hostile_module_names_never_become_code(hostile_script, tmp_path) -> None:
    import ast

    script, _model, marker = hostile_script
    ast.parse(script.read_text())  # the script parses
    done = run_script(script, "--save", str(tmp_path / "captures.npz"))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()  # the newline in a name did not start code
    keys = set(np.load(tmp_path / "captures.npz").files)
    names = ('a"b', f"c'd\nopen({str(marker)!r}, 'w')", 'e"""f\\')
    assert {f"activations/{name}" for name in names} <= keys


def test_the_snippets_of_hostile_names_parse() -> None:
    import ast

    from torch import nn

    from hookscope.core.engine.hooks import HookRegistry
    from hookscope.core.engine.interventions import parse_edit
    from hookscope.core.teaching.snippets import edit_snippet, hook_snippet, module_expression

    for name in ('a"b', "c'd\nimport os", 'e"""f\\', "x\x00y"):
        ast.parse(module_expression(name))
        model = nn.Sequential()
        model.add_module(name, nn.Conv2d(3, 4, 3))
        with HookRegistry(model) as registry:
            for kind in ("forward", "pre", "backward", "tensor", "grad_input"):
                ast.parse(hook_snippet(registry.add(name, kind)))
        ast.parse(edit_snippet(parse_edit(f"zero:{name}:0")))


@pytest.mark.parametrize("damage", ["missing folder", "unreadable image", "deleted model file"])
def test_the_script_says_what_is_wrong_in_one_line(hostile_script, tmp_path, damage) -> None:
    script, model, _marker = hostile_script
    args: list[str] = []
    if damage == "missing folder":
        args = ["--save", str(tmp_path / "missing" / "captures.npz")]
    elif damage == "unreadable image":
        args = ["--image", str(model)]
    else:
        model.unlink()
    done = run_script(script, *args)
    assert done.returncode == 2
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("run.py: error: ") and "Traceback" not in done.stderr, lines
    expected = {
        "missing folder": f"the folder {str(tmp_path / 'missing')!r} does not exist",
        "unreadable image": f"cannot read the image {str(model)!r}",
        "deleted model file": f"cannot build the model: No such file or directory: {str(model)!r}",
    }[damage]
    assert expected in lines[0]
    assert not (tmp_path / "missing").exists()


def test_the_lessons_model_code_for_a_hostile_file_name_parses_and_builds_it(hostile_script) -> None:
    """A guard (this passed before issue 23 too: the file name was already repr'd, and a factory's name must be an
    identifier to be opened at all)."""
    import ast

    import torch

    from hookscope.core.models.source import ModelSource, open_model
    from hookscope.core.teaching.lessons.networks import model_code_for

    _script, model, marker = hostile_script  # the model file is named my "model".py
    code = model_code_for(open_model(ModelSource(name="resnet18", file=f"{model}:build", trust=True)))
    ast.parse(code)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102  (the code the lesson shows, run as a user would)
    assert isinstance(namespace["model"], torch.nn.Module) and not marker.exists()


def test_measuring_what_fits_leaves_the_model_as_it_was() -> None:
    import torch
    import torchvision

    from hookscope.core.engine.memory_fit import activation_bytes

    model = torchvision.models.resnet18(weights=None).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    measured = activation_bytes(model, 3, "layer1")
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats untouched
    # ResNet-18 at 64 pixels, float32: conv1's output is the largest (64 x 32 x 32 values per 64 x 64 pixels)
    assert measured.largest == 64 * 32 * 32 * 4 / (64 * 64) and 0 < measured.upto < measured.total
    assert measured.shapes == {"layer1": (1, 64, 16, 16)}
    assert not any(m._forward_hooks for m in model.modules())

"""``hookscope`` in Jupyter, for real: notebooks executed cell by cell in a real IPython kernel (nbclient and
ipykernel, this environment's Python), and what the kernel sent back is checked as a front end would show it.

The notebook defines its model class in a cell (nothing to pickle, no file), captures a tensor and a photograph,
and shows the capture and one record: the outputs must hold ``image/png`` and ``text/html`` data that decode to real
pictures, and a last cell prints the model's hook dicts, which must be as the notebook left them (its own hook kept,
none of Hookscope's). Run again from a user's project that has its own ``app`` package, with the kernel working
there: ``import app`` is the user's, ``import hookscope`` works.

A kernel takes a few seconds to start, and each test starts one.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.core.common.resources import sample_image

nbformat = pytest.importorskip("nbformat", reason="the notebook tests: pip install -e '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests: pip install -e '.[test]'")
pytest.importorskip("ipykernel", reason="the notebook tests: pip install -e '.[test]'")

KERNEL = "hookscope-test"

HOOK_DICTS = """\
def hook_sizes(model):
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return {path or "(model)": [len(getattr(m, n)) for n in names] for path, m in model.named_modules()}
"""

CELLS = [
    # 0: what the kernel imports, and from where
    "import json, sys\n"
    "import torch\n"
    "from torch import nn\n"
    "import hookscope\n"
    "print('hookscope from', hookscope.__file__)",
    # 1: the caller's own model class, defined here
    "class TinyNet(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.conv = nn.Conv2d(3, 8, 3, padding=1)\n"
    "        self.bn = nn.BatchNorm2d(8)\n"
    "        self.mix = nn.Conv2d(8, 8, 3, padding=1)\n"
    "        self.pool = nn.AdaptiveAvgPool2d(1)\n"
    "        self.fc = nn.Linear(8, 5)\n"
    "\n"
    "    def forward(self, x):\n"
    "        return self.fc(self.pool(self.mix(self.bn(self.conv(x)).relu()).relu()).flatten(1))\n"
    "\n"
    "torch.manual_seed(0)\n"
    "model = TinyNet().train()\n"
    "seen = []\n"
    "handle = model.conv.register_forward_hook(lambda m, i, o: seen.append(o.shape))  # the notebook's own hook\n"
    + HOOK_DICTS
    + "before = hook_sizes(model)",
    # 2: a tensor, fed as given; the capture shown (HTML: every record; PNG: the first)
    "cap = hookscope.capture(model, torch.rand(3, 40, 40), hooks={'conv': ['act', 'grad'], 'fc': 'in'})\ncap",
    # 3: one record shown alone
    "cap.record('conv', 'act')",
    # 4: the photograph, from the kernel's working folder
    "photo = hookscope.capture(model, 'chelsea.png', hooks={'conv': ['act', 'grad']})\n"
    "print(photo.input.shape, photo.objective)\n"
    "photo.record('conv', 'act')",
    # 5: what the model is left with
    "print('HOOKS', json.dumps({'before': before, 'after': hook_sizes(model), 'training': model.training,\n"
    "                           'own_hook_ran': len(seen)}))",
]


def _kernel_spec(folder: Path) -> Path:
    """A kernel spec that runs this environment's Python (not whatever ``python3`` kernel Jupyter finds first)."""
    spec = folder / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    return folder


def run_notebook(cells: list[str], cwd: Path, tmp_path: Path, env: dict[str, str] | None = None, timeout: int = 180):
    """Execute ``cells`` in a fresh kernel working in ``cwd``; the executed notebook."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    scratch = tmp_path / "jupyter"
    specs = _kernel_spec(scratch / "kernels")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    kernel_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a user's kernel: the installed package
    kernel_env.update({"IPYTHONDIR": str(scratch / "ipython"), "MPLBACKEND": "agg", **(env or {})})
    manager = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
    client = nbclient.NotebookClient(
        notebook, km=manager, timeout=timeout, startup_timeout=120, resources={"metadata": {"path": str(cwd)}}
    )
    return client.execute(env=kernel_env)


def _outputs(cell) -> list[dict]:
    return [output for output in cell.outputs if output.output_type in ("display_data", "execute_result")]


def _stdout(cell) -> str:
    return "".join(output.text for output in cell.outputs if output.output_type == "stream" and output.name == "stdout")


def _picture(data: str | bytes, least: int = 64) -> np.ndarray:
    """A PNG (base64, as a notebook stores it) as an RGB array; fails unless it is a real picture, not blank, at
    least ``least`` pixels on each side."""
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(raw)) as image:
        image.load()
        assert image.format == "PNG"
        picture = np.asarray(image.convert("RGB"))
    assert picture.shape[0] >= least and picture.shape[1] >= least, picture.shape  # enlarged for the eye
    assert len(np.unique(picture.reshape(-1, 3), axis=0)) >= 4, "a flat picture"
    assert picture.std() > 10, "a blank picture"
    return picture


def _check_shown_pictures(notebook) -> None:
    cells = notebook.cells
    for cell in cells:
        errors = [output for output in cell.outputs if output.output_type == "error"]
        assert not errors, (cell.source, errors)
    # The capture: HTML with one picture per record (conv act, conv grad, fc in), and a PNG of the first record.
    (shown,) = _outputs(cells[2])
    assert {"image/png", "text/html", "text/plain"} <= set(shown.data)
    html = shown.data["text/html"]
    assert "TinyNet" in html and "conv: Activations (1, 8, 40, 40)" in html and "fc: Inputs (1, 8)" in html
    figures = dict(re.findall(r'<figcaption>([^<]+)</figcaption><img src="data:image/png;base64,([^"]+)"', html))
    assert sorted(figures) == [
        "conv: Activations (1, 8, 40, 40)", "conv: Gradients (1, 8, 40, 40)", "fc: Inputs (1, 8)"
    ]  # fmt: skip
    first = _picture(figures["conv: Activations (1, 8, 40, 40)"])
    _picture(figures["conv: Gradients (1, 8, 40, 40)"])
    strip = _picture(figures["fc: Inputs (1, 8)"], least=8)  # one row of 8 values, enlarged: a strip
    assert strip.shape[1] >= 256
    assert np.array_equal(_picture(shown.data["image/png"]), first)  # the PNG: the first record's
    # One record, alone: a PNG (and its repr as text), the same picture as in the capture's HTML.
    (record,) = _outputs(cells[3])
    assert "image/png" in record.data and "CapturedRecord conv: Activations" in record.data["text/plain"]
    assert np.array_equal(_picture(record.data["image/png"]), first)
    # The photograph: preprocessed (ImageNet's statistics at 224 for a model that names no size), a real picture.
    assert "torch.Size([1, 3, 224, 224])" in _stdout(cells[4])
    (photo,) = _outputs(cells[4])
    cat = _picture(photo.data["image/png"])
    assert cat.shape[1] >= 224 * 2  # 8 tiles of 224 pixels... at least two across
    # What the model was left with: its own hook, none of Hookscope's, its mode.
    line = next(line for line in _stdout(cells[5]).splitlines() if line.startswith("HOOKS "))
    hooks = json.loads(line[len("HOOKS ") :])
    assert hooks["after"] == hooks["before"]
    assert hooks["after"]["conv"] == [1, 0, 0, 0]  # the notebook's own forward hook, still there
    assert all(sizes == [0, 0, 0, 0] for name, sizes in hooks["after"].items() if name != "conv")
    assert hooks["training"] is True  # lent in train mode, given back so
    assert hooks["own_hook_ran"] >= 2  # it ran during both captures (twice each today: the survey runs the model too)


def test_a_notebook_shows_captures_as_pictures_and_leaves_no_hook(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(sample_image(), work / "chelsea.png")
    notebook = run_notebook(CELLS, work, tmp_path)
    _check_shown_pictures(notebook)


def test_a_notebook_in_a_project_with_its_own_app_package(tmp_path) -> None:
    """A user's project with an ``app`` package of its own (Hookscope's code lives in app/ in this repository, but
    installs only ``hookscope``): the kernel works in the project, ``import app`` is the user's module, and the
    same notebook runs."""
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("WHO = 'the user'\n")
    shutil.copy(sample_image(), project / "chelsea.png")
    cells = [
        "import os, app\nprint('APP', app.WHO, app.__file__, os.getcwd())",
        *CELLS,
        "import hookscope.core.outputs.capture as defining\nprint('APP-AGAIN', app.WHO, 'hookscope' in sys.modules)",
    ]
    notebook = run_notebook(cells, project, tmp_path)
    first = _stdout(notebook.cells[0]).split()
    assert first == ["APP", "the", "user", str(project / "app" / "__init__.py"), str(project)]
    assert "hookscope from" in _stdout(notebook.cells[1])
    assert Path(_stdout(notebook.cells[1]).split()[-1]).parent.name == "hookscope"
    assert _stdout(notebook.cells[-1]).split() == ["APP-AGAIN", "the", "user", "True"]
    notebook.cells = notebook.cells[1:-1]
    _check_shown_pictures(notebook)


# --- the viewer in a notebook, on a real X server ----------------------------------------------------------------

VIEWER_CELLS = [
    # 0: the model, the caller's own hook, the viewer; the cell returns at once (the run goes on in the window)
    "import json, time\n"
    "import torch\n"
    "from torch import nn\n"
    "import hookscope\n" + CELLS[1] + "\nstarted = time.monotonic()\n"
    "viewer = hookscope.Viewer(model, images=['chelsea.png'], tick=['conv'])\n"
    "viewer.window.resize(1000, 700)\n"
    "viewer.window.move(0, 0)\n"
    "print('RETURNED', json.dumps({'seconds': time.monotonic() - started,\n"
    "                              'loop': str(get_ipython().active_eventloop)}))",
    # 1: (after the kernel sat idle while the test read the screen) what the window shows, from the API
    "shot = viewer.screenshot('inside.png')\n"
    "where = viewer.window.geometry()\n"
    "print('SHOWN', json.dumps({'shape': list(shot.shape), 'at': [where.x(), where.y()],\n"
    "                           'records': sorted(viewer.capture().activations)}))",
    # 2: closed: Hookscope's hooks off, the notebook's kept, the mode given back
    "viewer.close()\n"
    "print('HOOKS', json.dumps({'before': before, 'after': hook_sizes(model), 'training': model.training,\n"
    "                           'closed': viewer.closed}))",
]

GRAB = """\
import sys
from PySide6.QtGui import QGuiApplication
app = QGuiApplication([])
QGuiApplication.primaryScreen().grabWindow(0).save(sys.argv[1])
"""


def _grab_screen(display: str, path: Path) -> np.ndarray:
    """The X server's own pixels (its root window), read by a process of its own: what a person would see."""
    import subprocess

    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
    done = subprocess.run([sys.executable, "-c", GRAB, str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_a_viewer_in_a_notebook_lives_between_cells_on_a_real_screen(tmp_path) -> None:
    """``hookscope.Viewer`` in a Jupyter kernel whose Qt loop Hookscope integrates: the cell returns, and while the
    kernel waits for the next cell the window loads, runs and paints by itself. The X server's pixels, read from
    outside the kernel between cells, show the window with its panels, as ``viewer.screenshot()`` does after; closing
    it takes Hookscope's hooks off and leaves the notebook's."""
    import time

    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ui"))
    try:
        from test_real_screen import x_server
    finally:
        sys.path.pop(0)
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb is needed (Debian: apt-get install xvfb; .ci/run installs it)")

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(sample_image(), work / "chelsea.png")
    scratch = tmp_path / "jupyter"
    specs = _kernel_spec(scratch / "kernels")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in VIEWER_CELLS])
    with x_server(1280, 800, window_manager=False) as display:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QT_SCALE_FACTOR")}
        env.update({"DISPLAY": display, "QT_QPA_PLATFORM": "xcb", "HOME": str(tmp_path),
                    "XDG_CONFIG_HOME": str(tmp_path / "config"), "IPYTHONDIR": str(scratch / "ipython")})  # fmt: skip
        manager = AsyncKernelManager(
            kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)])
        )
        client = nbclient.NotebookClient(
            notebook, km=manager, timeout=300, startup_timeout=120, resources={"metadata": {"path": str(work)}}
        )
        with client.setup_kernel(env=env):
            cells = notebook.cells
            client.execute_cell(cells[0], 0)
            # The kernel is idle now: only its integrated Qt loop can map, run and paint the window. Read the
            # screen until it has settled on something other than the empty root.
            screen, deadline = None, time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(1.0)
                grabbed = _grab_screen(display, tmp_path / "screen.png")
                if screen is not None and np.array_equal(grabbed, screen) and grabbed.std() > 20:
                    break
                screen = grabbed
            client.execute_cell(cells[1], 1)
            client.execute_cell(cells[2], 2)
    for cell in notebook.cells:
        errors = [output for output in cell.outputs if output.output_type == "error"]
        assert not errors, (cell.source, errors)
    returned = json.loads(_stdout(notebook.cells[0]).split("RETURNED ", 1)[1])
    assert returned["loop"].startswith("qt"), returned  # the kernel runs Qt's loop between cells
    assert returned["seconds"] < 30, returned  # the cell returned: it did not wait for the window
    shown = json.loads(_stdout(notebook.cells[1]).split("SHOWN ", 1)[1])
    assert shown["records"] == ["conv"] and shown["at"] == [0, 0]
    height, width = shown["shape"][:2]
    inside = np.asarray(Image.open(work / "inside.png").convert("RGB"))
    assert screen is not None
    outside = screen[:height, :width]
    assert outside.shape == inside.shape
    same = (np.abs(outside.astype(int) - inside.astype(int)).max(axis=2) <= 3).mean()
    assert same > 0.9, f"the screen between cells and viewer.screenshot() differ in {1 - same:.0%} of pixels"
    assert outside.std() > 20  # the window, not an empty screen
    hooks = json.loads(_stdout(notebook.cells[2]).split("HOOKS ", 1)[1])
    assert hooks["closed"] is True and hooks["training"] is True
    assert hooks["after"] == hooks["before"] and hooks["after"]["conv"] == [1, 0, 0, 0]

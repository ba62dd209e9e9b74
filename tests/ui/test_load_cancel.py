"""A model load that never ends must not take the window hostage (issue 13, item 4a).

Real ``model.py`` files whose ``build()`` (or ``forward``) waits for a release file: Cancel returns to the previous
model and its results at once, another model can be chosen and images run meanwhile, and the window closes in under
2 s; a real process with such a worker ends. Every test releases its stuck thread at the end, so no thread leaks
(``nothing_left_behind`` checks).
"""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import RUN_TIMEOUT_MS, photo

from hookscope.core.models.source import ModelSource, open_model
from hookscope.ui.features.load_cancel import CANCEL_ACTION, LoadCancelFeature
from hookscope.ui.state.requests import ImageSource
from hookscope.ui.state.worker import CLOSE_WAIT_MS, active_threads, wait_for_workers

ROOT = Path(__file__).resolve().parents[2]
STUCK_BUILD = """
import time
from pathlib import Path

from torch import nn

RELEASE = Path(__file__).with_name("release")


def build():
    while not RELEASE.exists():  # a build() that never returns, until the test lets it
        time.sleep(0.02)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
"""
STUCK_FORWARD = """
import time
from pathlib import Path

from torch import nn

RELEASE = Path(__file__).with_name("release")


class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        RELEASE.with_name("inside").touch()  # what a test waits for: the forward pass has begun
        while not RELEASE.exists():  # a forward pass that never ends, until the test lets it
            time.sleep(0.02)
        return self.conv(x).mean(dim=(2, 3))


def build():
    return Stuck()
"""


def _stuck_file(folder: Path, code: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(code)
    return f"{folder / 'model.py'}:build"


@pytest.fixture
def release(tmp_path: Path):
    """The folder for the stuck model files; at the end, their threads are let go and waited for."""
    folder = tmp_path / "stuck"
    yield folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "release").write_text("go")
    assert wait_for_workers(30_000), "the released thread did not finish"


def _pool_active() -> int:
    return active_threads()


def test_cancel_returns_to_the_previous_model_and_its_results_at_once(workspace, host, qtbot, release, tmp_path):
    feature = LoadCancelFeature(workspace, host)
    spec = _stuck_file(release, STUCK_BUILD)
    before = (workspace.loaded, workspace.registry, workspace.last, workspace.ticked_pairs())
    statuses = []
    workspace.status.connect(lambda text, _ms: statuses.append(text))
    assert not feature.showing
    workspace.load_model_with("model.py:build", lambda: open_model(ModelSource(file=spec, trust=True)))
    runner = workspace.scheduler.runner
    qtbot.waitUntil(lambda: feature.showing, timeout=10_000)  # the Cancel row comes up while build() hangs
    qtbot.waitUntil(lambda: runner.running_job is not None and runner.running_job.label == "load", timeout=10_000)
    assert "Loading model.py:build" in feature.label.text() and "Cancel keeps resnet18" in feature.label.text()
    assert workspace.loading and _pool_active() == 1

    start = time.perf_counter()
    with qtbot.waitSignal(workspace.load_cancelled, timeout=1000) as cancelled:
        feature.cancel_button.click()
    assert time.perf_counter() - start < 0.5
    assert cancelled.args == ["model.py:build"]
    assert not workspace.loading and not feature.showing and not workspace.scheduler.busy
    assert (workspace.loaded, workspace.registry, workspace.last, workspace.ticked_pairs()) == before
    assert statuses[-1] == "Loading model.py:build was cancelled; still showing resnet18."
    assert _pool_active() == 1  # build() still hangs, in the background

    # The window goes on with the previous model: a new image runs through it, the hooks record.
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as ran:
        workspace.request_image(ImageSource.from_path(photo(tmp_path / "new.png", 5)))
    outcome = ran.args[0]
    assert outcome.image.name == "new.png" and workspace.loaded is before[0]
    assert [r.key for r in outcome.result.records] == ["layer1.0.conv1", "layer1.0.conv1"]
    qtbot.waitUntil(lambda: _pool_active() == 1, timeout=10_000)  # the run's thread ends; build() still hangs
    assert not host.trigger(CANCEL_ACTION)  # nothing left to cancel
    assert host.statuses[-1] == "No model is being loaded."


def test_the_cancel_action_and_choosing_another_model_while_build_hangs(workspace, host, qtbot, release):
    feature = LoadCancelFeature(workspace, host)
    spec = _stuck_file(release, STUCK_BUILD)
    source = ModelSource(file=spec, trust=True)
    old = workspace.loaded
    workspace.load_model_with("model.py:build", lambda: open_model(source))
    runner = workspace.scheduler.runner
    # The load itself must be running (not the workspace's first run still finishing ahead of it in the queue).
    qtbot.waitUntil(
        lambda: _pool_active() == 1 and runner.running_job is not None and runner.running_job.label == "load",
        timeout=10_000,
    )
    with qtbot.waitSignal(workspace.load_cancelled, timeout=1000):
        assert host.trigger(CANCEL_ACTION) is True
    assert workspace.loaded is old

    # Opened again and, without Cancel, another model chosen: the stuck load is superseded and left behind.
    workspace.load_model_with("model.py:build", lambda: open_model(source))
    qtbot.waitUntil(lambda: _pool_active() == 2, timeout=10_000)  # two build()s hang now
    with qtbot.waitSignal(workspace.model_changed, timeout=RUN_TIMEOUT_MS) as changed:
        workspace.set_model("resnet18", "none")
    assert changed.args[0].loaded is workspace.loaded is not old
    assert workspace.scheduler.runner.abandoned == 2
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        pass  # the new model's first run
    assert not feature.showing


def test_the_window_closes_in_under_two_seconds_while_a_run_hangs(make_window, qtbot, release):
    window = make_window()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    spec = _stuck_file(release, STUCK_FORWARD)
    with qtbot.waitSignal(window.workspace.model_changed, timeout=RUN_TIMEOUT_MS):
        window.features["model_files"].open(spec, trust=True)
    runner = window.workspace.scheduler.runner
    qtbot.waitUntil(lambda: runner.running_job is not None and runner.running_job.label == "run", timeout=10_000)
    qtbot.waitUntil(lambda: (release / "inside").exists(), timeout=10_000)  # inside the stuck forward pass
    assert _pool_active() == 1
    faulthandler.dump_traceback_later(60, exit=True)  # before the fix close() waited for ever: fail, not hang
    try:
        start = time.perf_counter()
        window.close()
        elapsed = time.perf_counter() - start
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert elapsed < 2.0, f"closing took {elapsed:.2f} s"
    assert elapsed >= CLOSE_WAIT_MS / 1000 * 0.9  # it did wait its bounded time for the worker first
    assert not window.workspace.registry.handles()  # every hook removed all the same


EXIT_PROBE = """
import sys
import time

import torch  # noqa: F401  (before Qt)
from PySide6.QtCore import QTimer

from hookscope.ui.app import application, end_despite_stuck_workers
from hookscope.ui.main_window import MainWindow

app = application(offscreen=True)
window = MainWindow(weights="none", remember=False)
window.show_dialogs = False
window.show()
started = []


def close():
    start = time.perf_counter()
    window.close()
    print(f"closed in {time.perf_counter() - start:.2f} s", flush=True)


def on_first_run(*_):
    if not started:
        started.append(1)
        window.features["model_files"].open(sys.argv[1], trust=True)
        QTimer.singleShot(1000, close)


window.workspace.run_applied.connect(on_first_run)
code = app.exec()
print(f"loading still: {window.workspace.loading}", flush=True)
sys.exit(end_despite_stuck_workers(code))
"""


def test_a_process_whose_build_never_returns_still_ends(tmp_path):
    """The real exit path in a real process: Qt's thread pool would wait for the stuck thread at exit for ever."""
    spec = _stuck_file(tmp_path / "stuck", STUCK_BUILD)  # never released: the process must end regardless
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(EXIT_PROBE))
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "HOOKSCOPE_SETTINGS_DIR": str(tmp_path / "settings"),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, str(probe), spec], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    closed = float(lines[0].split()[2])
    assert closed < 2.0 and lines[1] == "loading still: True"
    assert "did not finish; ending without waiting for it" in done.stderr

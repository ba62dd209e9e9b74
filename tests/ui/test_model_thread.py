"""The live model always runs on one thread, kept for the process's life (``worker.model_pool``): its runs, and the
side tasks that use it (exclusive), so PyTorch's CPU operations have one OpenMP thread team; other side work runs
on the global pool. And the app sets libgomp's spin before torch is imported, keeping a value the user set."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from conftest import RUN_TIMEOUT_MS

from hookscope.ui.state.worker import model_pool

ROOT = Path(__file__).resolve().parents[2]


def test_runs_and_exclusive_tasks_run_on_the_one_kept_model_thread(workspace, qtbot) -> None:
    model = workspace.loaded.module
    ran_on: list[int] = []
    # the test's own plain hook, not the app's: which thread runs the model's forward
    handle = model.register_forward_hook(lambda *_: ran_on.append(threading.get_native_id()))
    try:
        for _ in range(3):
            with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
                workspace.run_again()
        exclusive = workspace.submit("where", threading.get_native_id, exclusive=True)
        side = workspace.submit("where", threading.get_native_id)
        found: dict[str, int] = {}
        exclusive.finished.connect(lambda value: found.update(exclusive=value))
        side.finished.connect(lambda value: found.update(side=value))
        qtbot.waitUntil(lambda: exclusive.done and side.done, timeout=RUN_TIMEOUT_MS)
    finally:
        handle.remove()
    assert len(ran_on) >= 3 and len(set(ran_on)) == 1, ran_on  # every run's forward on the same thread
    model_thread = ran_on[0]
    assert model_thread != threading.get_native_id()  # never the GUI thread
    assert found["exclusive"] == model_thread
    assert found["side"] != model_thread  # the rest beside it, on the global pool
    pool = model_pool()
    assert pool.maxThreadCount() == 1 and pool.expiryTimeout() == -1


def test_importing_the_app_sets_libgomps_spin_before_torch_and_keeps_the_users() -> None:
    code = "import os, hookscope, torch; print(os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    ours = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert ours.stdout.strip() == "30000"
    theirs = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "GOMP_SPINCOUNT": "1234"},
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert theirs.stdout.strip() == "1234"

"""The process ends cleanly after the module tree was scrolled (issue 43).

The crash it guards against: the tree's source model was the window's child, made before the docks, so the window
deleted it first; the filter proxy then dropped its index mapping without telling the view, and when the Modules
dock went next, its restyling clamped the tree's scroll bar, whose ``valueChanged`` made the view read its rows
through the proxy (``QTreeView::verticalScrollbarValueChanged`` -> ``QSortFilterProxyModel::mapToSource``): freed
memory, a segmentation fault at exit. Only after a scroll, because the bar emits only when its value changes.

A real window in a real process, closed as a person closes it: a crash fails the assertion instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROBE = """
import faulthandler
import sys

faulthandler.enable()  # a crash writes where it happened to stderr, which the test shows

import torch  # noqa: F401  (before Qt, as in the app)
from PySide6.QtCore import QTimer

from hookscope.ui.app import application, end_despite_stuck_workers
from hookscope.ui.main_window import MainWindow

app = application(offscreen=True)
window = MainWindow(weights="none", remember=False)
window.show_dialogs = False
window.show()


def scroll_and_close():
    tree = window.modules.view.tree
    tree.expandAll()
    bar = tree.verticalScrollBar()
    bar.setValue(bar.maximum())
    print(f"scrolled to {bar.value()} of {bar.maximum()}", flush=True)
    window.close()  # the last window: app.exec() returns, and the process ends as the app's does


window.run_finished.connect(lambda *_: QTimer.singleShot(0, scroll_and_close))
QTimer.singleShot(60_000, app.quit)  # never hang the test
code = end_despite_stuck_workers(app.exec())
print("exec returned", flush=True)
sys.exit(code)
"""


def test_the_process_ends_cleanly_after_the_module_tree_was_scrolled(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(PROBE))
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "HOOKSCOPE_SETTINGS_DIR": str(tmp_path / "settings"),
    }
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120, env=env)
    lines = done.stdout.splitlines()
    assert lines and lines[0].startswith("scrolled to "), done.stdout + done.stderr[-2000:]
    value, maximum = (int(word) for word in lines[0].split()[2::2])
    assert 0 < value == maximum  # the tree was scrolled (the bar's value changed)
    assert "exec returned" in lines  # the window closed and the event loop ended
    assert done.returncode == 0, f"the process ended with {done.returncode}:\n{done.stderr[-3000:]}"

"""pytest-qt fixtures for the window: offscreen, settings in a temporary folder, no thread outliving a test."""

from __future__ import annotations

import gc
import hashlib
import http.server
import io
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt is imported (tests/conftest.py does it too)

import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402,F401  (torch before Qt, as in the app)
import tqdm  # noqa: E402
import weights_server  # noqa: E402
from loopback import serving  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6.QtCore import QCoreApplication, QEvent  # noqa: E402
from PySide6.QtWidgets import QApplication, QLayout, QLayoutItem, QSpacerItem, QWidget, QWidgetItem  # noqa: E402
from shiboken6 import Shiboken  # noqa: E402

from hookscope.core.models.weights import WEIGHTS_URL_ENV  # noqa: E402
from hookscope.system.allocator import keep_freed_memory  # noqa: E402
from hookscope.ui.main_window import MainWindow  # noqa: E402
from hookscope.ui.state.settings import SETTINGS_DIR_ENV  # noqa: E402
from hookscope.ui.state.worker import active_threads, wait_for_workers  # noqa: E402

RUN_TIMEOUT_MS = 120_000

# glibc's malloc as the app sets it for every command, the window too (``hookscope.cli.dispatch``), before any
# thread has an arena of its own: the window's memory is measured as a user's window uses it (tests/ui/test_memory.py).
keep_freed_memory()


@pytest.fixture(autouse=True)
def private_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Recent files and window layout go to a temporary INI file, never the user's settings."""
    folder = tmp_path_factory.mktemp("settings")
    monkeypatch.setenv(SETTINGS_DIR_ENV, str(folder))
    return folder


THREAD_GRACE_MS = 10_000
# tqdm (a progress bar of huggingface_hub or transformers) starts a monitor thread for the rest of the process the
# first time a bar is made: off, so that it is not taken for a thread the test left behind.
tqdm.tqdm.monitor_interval = 0


def _visible_windows() -> list[QWidget]:
    """Top-level widgets on screen (windows, dialogs, menus, floating docks), tooltips aside (Qt's own, they go by
    themselves)."""
    return [w for w in QApplication.topLevelWidgets() if w.isVisible() and w.metaObject().className() != "QTipLabel"]


def _python_threads() -> set[threading.Thread]:
    """Threads started from Python that are alive. A pool thread that ran Python code is listed by ``threading``
    as a ``_DummyThread`` for good, alive or not: the thread pool is asked about those."""
    return {t for t in threading.enumerate() if t.is_alive() and not isinstance(t, threading._DummyThread)}


@pytest.fixture(autouse=True)
def nothing_left_behind(qapp) -> Iterator[None]:
    """Fail a test that leaves something running or showing after it (as napari's fixtures do): a worker on the
    thread pool, a Python thread it started, a window, dialog or menu still on screen.

    Widgets a test hands to ``qtbot.addWidget`` are closed before this looks (pytest-qt closes them first). A closing
    window waits only a bounded time for its workers (``CLOSE_WAIT_MS``: it must close in under 2 s whatever the
    worker does), so a run may still be stopping when the test ends: threads get ``THREAD_GRACE_MS`` to end. One
    still running after that is stuck or leaked."""
    windows_before = set(_visible_windows())
    threads_before = _python_threads()
    yield
    wait_for_workers(THREAD_GRACE_MS)
    active = active_threads()
    assert active == 0, f"{active} worker thread(s) still running {THREAD_GRACE_MS / 1000:.0f} s after the test"
    deadline = time.monotonic() + THREAD_GRACE_MS / 1000
    left = _python_threads() - threads_before
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = {t for t in left if t.is_alive()}
    assert not left, (
        f"thread(s) still running {THREAD_GRACE_MS / 1000:.0f} s after the test: {sorted(t.name for t in left)}"
    )
    QApplication.processEvents()
    shown = [w for w in _visible_windows() if w not in windows_before]
    for widget in shown:
        widget.hide()  # not into the next test (hidden: a message box may refuse close())
    assert not shown, "left on screen after the test: " + ", ".join(
        f"{type(w).__name__} {w.objectName() or w.windowTitle()!r}" for w in shown
    )


def stale_layout_items() -> list[str]:
    """Python wrappers over layout items (the ``QWidgetItem`` of a widget in a layout, the ``QSpacerItem`` of a
    stretch) that no layout of any widget holds any more, and items that came back through a wrapper of another
    kind; one line each (issue 48, ``hookscope/ui/widgets/disposal.py``).

    Such an item is no QObject: when Qt frees it, PySide is not told, and its wrapper stays in PySide's table under
    the freed address, to be handed out for the next object Qt makes there. The live items are read from every
    widget's layouts (``itemAt``, which gives them wrappers owned by their layouts: call this last in a test), and
    each must be the kind its wrapper says; a wrapper Python made and owns (a spacer not yet in a layout) is not
    Qt's to free. Reading a stale wrapper's address never touches the freed object."""
    # Earlier tests' closed windows first: walked here, their items would get wrappers, and the full collection that
    # frees those windows later (the GUI collector's, long after) crashed in the wrappers' teardown (a segfault in
    # the whole run after test_panels_follow_the_screen; the app itself never wraps an item: disposal.py's rule).
    gc.collect()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    live: dict[int, QLayoutItem] = {}
    # Held to the end: a wrapper PySide made here and then let go of takes those of its children with it (a
    # widget's, its layout's; the layout's, its items'), and they would read as invalid.
    widgets = QApplication.allWidgets()
    held: list[QLayout] = []
    for widget in widgets:
        top = widget.layout()
        if top is None:
            continue
        for layout in (top, *top.findChildren(QLayout)):
            held.append(layout)
            for index in range(layout.count()):
                item = layout.itemAt(index)
                if item is not None:
                    live[Shiboken.getCppPointer(item)[0]] = item
    problems = []
    for address, item in live.items():
        if not Shiboken.isValid(item):
            problems.append(f"{type(item).__name__} at {address:#x}: held by a layout, its wrapper is invalid")
        elif isinstance(item, QSpacerItem) != (item.spacerItem() is not None) or isinstance(item, QWidgetItem) != (
            item.widget() is not None and item.layout() is None
        ):
            problems.append(f"{type(item).__name__} at {address:#x}: the wrapper of another kind of item")
    for wrapper in Shiboken.getAllValidWrappers():
        if not isinstance(wrapper, QLayoutItem) or isinstance(wrapper, QLayout) or Shiboken.ownedByPython(wrapper):
            continue
        address = Shiboken.getCppPointer(wrapper)[0]
        if address not in live:
            problems.append(f"{type(wrapper).__name__} at {address:#x}: no layout holds it, its wrapper stays")
    return problems


@contextmanager
def no_run_asked(space) -> Iterator[None]:
    """Assert that what the block does asks for no run and no load: the workspace's generation, which every request
    bumps at once (before its debounce), is what it was. Instead of waiting a while and finding the results on
    screen unchanged, which passes as well when the wait was too short."""
    before = space.generation
    yield
    assert space.generation == before, f"a run or load was asked for (generation {before} -> {space.generation})"


@pytest.fixture
def make_window(qtbot) -> Iterator[Callable[..., MainWindow]]:
    """Build real windows (untrained weights: no download), closed again at the end of the test."""
    windows: list[MainWindow] = []

    def make(**options) -> MainWindow:
        options.setdefault("weights", "none")
        window = MainWindow(**options)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()


@pytest.fixture
def window(make_window, qtbot) -> MainWindow:
    """The default start (ResNet-18, sample image, two layers ticked) with its first run on screen."""
    win = make_window()
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    return win


def shown_picture(window: MainWindow, panel, qtbot):
    """``panel``'s picture of the run on screen, as a person gets it: scrolled into view (a run makes pictures
    only for the panels in view and a page around them; the others get theirs when they scroll in)."""
    area = window.panel_area
    if panel.ident not in area.docks:
        area.ensureWidgetVisible(panel)
    qtbot.waitUntil(lambda: panel.ident not in area.stale and not window.workspace.preparing, timeout=20_000)
    return panel.picture


def every_picture(window: MainWindow, qtbot) -> dict:
    """Every panel's picture of the run on screen, each panel scrolled into view in turn (``shown_picture``)."""
    return {ident: shown_picture(window, panel, qtbot) for ident, panel in list(window.panel_area.panels.items())}


def photo(path: Path, seed: int, size: tuple[int, int] = (320, 240)) -> Path:
    """A real PNG with content that differs by ``seed``."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : size[1], 0 : size[0]]
    base = np.stack([xx * (seed + 1) % 256, yy * 2 % 256, (xx + yy * seed) % 256], axis=-1).astype(np.float64)
    pixels = np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture
def photos(tmp_path: Path) -> list[Path]:
    return [photo(tmp_path / f"photo{n}.png", n) for n in range(3)]


@pytest.fixture
def workspace(qtbot) -> Iterator:
    """A workspace over ResNet-18 (random weights) with the sample image's first run done, and no window."""
    from hookscope.ui.state.workspace import Workspace

    space = Workspace(weights="none", ticks=["layer1.0.conv1"])
    space.attach_view(lambda: (300, 300))
    with qtbot.waitSignal(space.run_applied, timeout=RUN_TIMEOUT_MS):
        space.start("resnet18", None)
    yield space
    space.shutdown()


@pytest.fixture
def host(qtbot):
    """A fake host that records what a feature contributes (tests/ui/fakes.py)."""
    from fakes import FakeHost

    fake = FakeHost()
    qtbot.addWidget(fake.parent)
    return fake


# ---- a real HTTP server on 127.0.0.1 for weight downloads (tests/ui/weights_server.py) ---------------------------


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), weights_server.WeightsHandler)
    httpd.files = {}
    with serving(httpd):
        yield httpd


@pytest.fixture
def served(server, hub, monkeypatch):
    """SMALL's default weights address renamed to the hash of a state_dict made here (seed 4), on the server."""
    torch.manual_seed(4)
    buffer = io.BytesIO()
    torch.save(torchvision.models.get_model(weights_server.SMALL, weights=None).state_dict(), buffer)
    body = buffer.getvalue()
    name = f"{weights_server.SMALL}-{hashlib.sha256(body).hexdigest()[:8]}.pth"
    weights = torchvision.models.get_model_weights(weights_server.SMALL).DEFAULT
    monkeypatch.setattr(weights.value, "url", f"https://download.pytorch.org/models/{name}")
    monkeypatch.setenv(WEIGHTS_URL_ENV, server.base + "/mirror/")
    server.files[f"/mirror/{name}"] = ("good", body)
    return name, body

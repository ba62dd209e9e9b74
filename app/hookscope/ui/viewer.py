"""``hookscope.Viewer`` and ``hookscope.run``: the Hookscope window on a model the caller holds in Python.

::

    viewer = hookscope.Viewer(model, images=["cat.jpg"], tick=["layer1", "layer4"])
    hookscope.run()          # a script: blocks until every viewer window is closed
    # IPython / Jupyter: Viewer() returns at once, the Qt event loop runs between cells

The window is the one ``hookscope`` opens, on that very ``nn.Module`` (a class defined in a notebook is fine):
nothing is copied, pickled or asked. It is adopted as any model load is (``Workspace.start_held``: on the model's
thread, in eval mode), runs go through the workspace's scheduler (the GUI thread never runs the model), and ticks
through the API are the workspace's methods, as a click's are. Closing the window, by ``close()`` or by hand,
removes every hook Hookscope put on the model (its registry), leaves the caller's own hooks where they are, and
gives the model back as it was lent: the training mode of every module and the device of every parameter and
buffer (``hookscope.core.engine.lending``).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtGui import QGuiApplication
from torch import nn

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.common.vocabulary import COLUMN_ORDER, KINDS, WORD_OF_KIND
from hookscope.core.engine.lending import LentModel
from hookscope.core.models.held import held_model
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.capture import DEFAULT_WORDS, Capture, hook_pairs
from hookscope.ui.app import Window, make_window, viewer_application
from hookscope.ui.qimages import qimage_array
from hookscope.ui.state.requests import ImageSource
from hookscope.ui.state.worker import CLOSE_WAIT_MS, model_pool
from hookscope.ui.state.workspace import HeldStart, Workspace
from hookscope.ui.widgets.disposal import dispose

__all__ = ["Viewer", "run"]

WAIT_S = 300.0  # how long capture() and the API's ticks wait for a load or a run (a big model on a CPU)
Words = str | Iterable[str]

_open: list[Viewer] = []  # viewers whose window is open: kept alive here (a collected window would vanish)
_run_loops: list[QEventLoop] = []  # run()'s loops, ended when the last viewer closes
_pil_count = itertools.count(1)


class Viewer:
    """The Hookscope window on ``model``, an ``nn.Module`` you hold (the very object: nothing is copied).

    ``images``: files or PIL images (the first is shown; when it is a file, the files form the image list, stepped
    with Page Up / Page Down); none: the bundled sample photograph. ``tick``: the modules ticked first, names
    (Act and Grad on each, as the window's ``--tick``) or a mapping of names to the tree's words
    (``{"layer1": ["act", "grad"], "fc": ["in"]}``; the words are ``hookscope.HOOK_WORDS``); None: two telling
    layers. ``preprocess``: a ``hookscope.Preprocess`` or torchvision weights (their class names come along), None
    for ImageNet's statistics at the model's input size; ``categories``: the class names; ``device``: "cpu",
    "cuda", "cuda:1", "mps" (the CPU, with a message, when it is not there).

    In IPython and Jupyter the Qt event loop is integrated (``%gui qt``) and the window lives between cells; in a
    script, call ``hookscope.run()``. ``capture()`` and ``screenshot()`` run the event loop themselves while they
    wait. Closing the window removes every hook Hookscope put on the model, keeps yours, and gives the model back
    in the training mode and on the device it was lent in.
    """

    def __init__(
        self,
        model: nn.Module,
        images: Sequence[str | os.PathLike | Image.Image] | str | os.PathLike | Image.Image = (),
        tick: Mapping[str, Words] | Iterable[str] | str | None = None,
        *,
        preprocess: Preprocess | Any = None,
        categories: Sequence[str] | None = None,
        device: str = "cpu",
        check: Mapping[str, Words] | Iterable[str] | str | None = None,
    ) -> None:
        if check is not None:  # the name before one vocabulary ("tick", as the window and its --tick say)
            _renamed("Viewer(check=...)", "Viewer(tick=...)")
            tick = check if tick is None else tick
        loaded = held_model(model, preprocess=preprocess, categories=categories)
        self.model = loaded.module
        self.loaded: LoadedModel = loaded
        self._paths = [name for name, _ in loaded.module.named_modules()]
        pairs = tuple(hook_pairs(tick, self._paths, loaded)) if tick is not None else None  # type: ignore[arg-type]
        if isinstance(images, (str, os.PathLike, Image.Image, torch.Tensor)):
            images = [images]
        sources = [image_source(image) for image in images]
        first = sources[0] if sources else None
        queue = tuple(s.path for s in sources if s.path) if first is not None and first.path else ()
        viewer_application()
        integrate_ipython()
        self._lent = LentModel.of(loaded.module)  # before the window puts it in eval mode
        self._closed = False
        self._failure = ""  # the newest run's or load's error, if it failed
        window = make_window(device=device, remember=False, held=HeldStart(loaded, first, pairs, queue))
        window.closed.connect(self._on_closed)
        window.workspace.failed.connect(lambda failure: setattr(self, "_failure", failure.message))
        window.workspace.run_applied.connect(lambda *_: setattr(self, "_failure", ""))
        self._window: Window | None = window
        _open.append(self)
        window.show()

    # ---- the window -----------------------------------------------------------------------------------------
    @property
    def window(self) -> Window:
        """The Hookscope main window (a ``QMainWindow``); ``HookscopeError`` once it is closed."""
        if self._window is None:
            raise HookscopeError("This viewer's window is closed; make a new hookscope.Viewer.")
        return self._window

    @property
    def workspace(self) -> Workspace:
        """The window's state: the loaded model, its hook registry, the image, the last run's outcome."""
        return self.window.workspace

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.workspace.ticked_pairs())} hooks"
        return f"<hookscope.Viewer of {self.loaded.name}: {state}>"

    # ---- ticks ----------------------------------------------------------------------------------------------
    def tick(self, name: str, words: Words = DEFAULT_WORDS) -> None:
        """Tick module ``name`` in the tree's ``words`` columns (``act``, ``grad``, ``in``, ``grad_in``), as a click
        would: the hooks go on the model now, the tree and the panels follow, a run is asked for.
        ``HookscopeError`` for a name the model does not have or a word that is none."""
        pairs = hook_pairs({name: words}, self._paths, self.loaded)
        self._wait(lambda: self.workspace.registry is not None, "Loading the model")
        self.workspace.set_ticked(pairs, True)

    def untick(self, name: str, words: Words | None = None) -> None:
        """Untick module ``name`` in ``words``' columns (None: every column); its hooks come off the model now."""
        if name not in self._paths:
            raise HookscopeError(f"The model has no module named '{name}'.", module_path=name)
        pairs = (
            [(name, kind) for kind in KINDS] if words is None else hook_pairs({name: words}, self._paths, self.loaded)
        )
        self._wait(lambda: self.workspace.registry is not None, "Loading the model")
        self.workspace.set_ticked(pairs, False)

    def ticked(self) -> dict[str, list[str]]:
        """The ticked modules and their columns, in the tree's words: ``{"layer1": ["act", "grad"]}``."""
        ticked = self.workspace.ticked_pairs()
        out: dict[str, list[str]] = {}
        for path in self._paths:
            kinds = [kind for kind in COLUMN_ORDER if (path, kind) in ticked]
            if kinds:
                out[path] = [WORD_OF_KIND.get(kind, kind) for kind in kinds]
        return out

    # the names before one vocabulary ("tick" in code and in the window alike): still there, with a warning
    def check(self, name: str, words: Words = DEFAULT_WORDS) -> None:
        _renamed("Viewer.check", "Viewer.tick")
        self.tick(name, words)

    def uncheck(self, name: str, words: Words | None = None) -> None:
        _renamed("Viewer.uncheck", "Viewer.untick")
        self.untick(name, words)

    def checked(self) -> dict[str, list[str]]:
        _renamed("Viewer.checked", "Viewer.ticked")
        return self.ticked()

    # ---- images ---------------------------------------------------------------------------------------------
    def open(self, image: str | os.PathLike | Image.Image) -> None:
        """Show ``image`` (a file, read now: ``ImageError`` names it; or a PIL image) through the ticked hooks; a file
        of the image list becomes the list's current one, as stepping to it would."""
        source = image_source(image)
        space = self.workspace
        listed = space.image_list
        if source.path in listed and listed.index(source.path) != space.image_index:
            space.select_image(listed.index(source.path))
        else:
            space.request_image(source)

    # ---- what it shows --------------------------------------------------------------------------------------
    def capture(self, timeout: float = WAIT_S) -> Capture:
        """What the panels show now, as a ``hookscope.Capture``: the last run the window applied, after the run
        asked for (a tick, an image) is done; ``HookscopeError`` when none came within ``timeout`` seconds or the
        first run failed. The arrays are those ``hookscope.capture`` gives for the same image and hooks."""
        space = self.workspace
        self._wait(lambda: not space.busy and space.loaded is not None, "The window's run", timeout)
        outcome = space.last
        if outcome is None:
            raise HookscopeError(self._failure or "The window has shown no run yet.")
        kinds = {record.kind for record in outcome.result.records}
        image = outcome.image.path or outcome.image.name
        return Capture(outcome.result, space.loaded or self.loaded, image, tuple(k for k in COLUMN_ORDER if k in kinds))

    def screenshot(self, path: str | os.PathLike | None = None, timeout: float = WAIT_S) -> np.ndarray:
        """The window's pixels as the screen shows them, uint8 (height, width, 4) RGBA, once the run asked for is
        on screen; also written to ``path`` (PNG) when given. On a display, the screen's own pixels under the
        window (``QScreen.grabWindow``: what is over it is in the picture too); offscreen, the window's rendering
        (``QWidget.grab``)."""
        window = self.window
        space = window.workspace
        self._wait(lambda: not space.busy and not space.preparing, "The window's run", timeout, strict=False)
        pump(150)  # the paints the run asked for
        if QGuiApplication.platformName() in ("offscreen", "minimal"):
            pixmap = window.grab()
        else:
            screen = window.screen()
            where, origin = window.geometry(), screen.geometry().topLeft()
            pixmap = screen.grabWindow(0, where.x() - origin.x(), where.y() - origin.y(), where.width(), where.height())
        pixels = qimage_array(pixmap.toImage())
        if path is not None:
            Image.fromarray(pixels).save(os.fspath(path))
        return pixels

    # ---- closing --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the window: every hook Hookscope put on the model comes off, the model is given back as lent."""
        if self._window is not None and not self._closed:
            self._window.close()

    def _on_closed(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A run cancelled by the close may still be stopping: it moves nothing after the model is given back.
        model_pool().waitForDone(CLOSE_WAIT_MS)
        self._lent.give_back()
        window, self._window = self._window, None
        if window is not None:
            dispose(window)  # with its workspace and registry: nothing of the window holds the model
        if self in _open:
            _open.remove(self)
        if not _open:
            for loop in _run_loops:
                loop.quit()

    # ---- waiting --------------------------------------------------------------------------------------------
    def _wait(self, done: Callable[[], bool], what: str, timeout: float = WAIT_S, strict: bool = True) -> None:
        """Run the event loop until ``done()``; a closed window, a failed load or the timeout is an error (only
        the closed window when not ``strict``)."""
        deadline = time.monotonic() + timeout
        while not done():
            if self._closed:
                raise HookscopeError("This viewer's window is closed; make a new hookscope.Viewer.")
            space = self.window.workspace
            if space.loaded is None and not space.loading and self._failure:
                raise HookscopeError(self._failure)  # the model could not be adopted
            if time.monotonic() > deadline:
                if strict:
                    raise HookscopeError(f"{what} did not finish within {timeout:.0f} s.")
                return
            pump(20)


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"{old} is now {new}; the old name still works, for now.", FutureWarning, stacklevel=3)


def run() -> None:
    """Show the viewers until every viewer window is closed (a script's last line). In IPython or Jupyter, where the
    Qt event loop is integrated, it returns at once; with no viewer open it returns at once too."""
    if ipython_loop_running() or not _open:
        return
    loop = QEventLoop()
    _run_loops.append(loop)
    interrupt = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL) if interrupt else None  # Ctrl+C in the terminal ends it
    try:
        loop.exec()
    finally:
        _run_loops.remove(loop)
        if interrupt:
            signal.signal(signal.SIGINT, previous)


# ---- helpers ----------------------------------------------------------------------------------------------------


def image_source(image: object) -> ImageSource:
    """An image as the window takes it: a file (read now, so that a bad one is an ``ImageError`` naming it) or a
    PIL image (a copy: what the caller does to theirs later does not change what the window shows)."""
    if isinstance(image, (str, os.PathLike)):
        path = os.fspath(image)
        return ImageSource(os.path.basename(path.rstrip("/\\")) or path, path, read_image(path))
    if isinstance(image, Image.Image):
        return ImageSource(f"PIL image {next(_pil_count)}", None, image.copy())
    if isinstance(image, torch.Tensor):
        raise ImageError(
            "The viewer shows image files and PIL images; a tensor, fed to the model as it is, goes through "
            "hookscope.capture(model, tensor, hooks=...)."
        )
    raise ImageError(f"An image is a file path or a PIL image; got {type(image).__name__}.")


def _ipython_shell() -> Any:
    module = sys.modules.get("IPython")
    if module is None:
        return None
    try:
        return module.get_ipython()
    except Exception:  # noqa: BLE001  (an IPython without a shell)
        return None


def ipython_loop_running() -> bool:
    """Whether an IPython shell runs the Qt event loop between its prompts (``%gui qt``). IPython calls the loop
    "qt" or by version ("qt6")."""
    shell = _ipython_shell()
    return shell is not None and str(getattr(shell, "active_eventloop", "") or "").startswith("qt")


def integrate_ipython() -> bool:
    """In IPython or Jupyter, run the Qt event loop between cells (``shell.enable_gui("qt")``, as napari does), so
    that the window lives while the prompt waits; returns whether it runs. Outside IPython, nothing."""
    shell = _ipython_shell()
    if shell is None:
        return False
    if not ipython_loop_running():
        os.environ.setdefault("QT_API", "pyside6")  # ipykernel picks its Qt binding by it
        try:
            shell.enable_gui("qt")
        except Exception as error:  # noqa: BLE001  (a shell without a Qt loop: the window waits for hookscope.run())
            warnings.warn(
                f"Could not run the Qt event loop in this shell ({error}); call hookscope.run() to show the window.",
                stacklevel=3,
            )
            return False
        if not ipython_loop_running():  # e.g. IPython's --simple-prompt, which has no event loop hook
            warnings.warn("This shell runs no Qt event loop; call hookscope.run() to show the window.", stacklevel=3)
            return False
    return True


def pump(ms: int) -> None:
    """Run the event loop for ``ms`` (a loop of its own: a worker's results and the paints come meanwhile)."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()

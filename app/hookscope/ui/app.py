"""Starting the window: interactively, for one screenshot (``--screenshot``), or as an end-to-end self-test.

The command line (``hookscope.cli``) calls ``run_gui``; user errors in the arguments raise ``HookscopeError`` in the
headless modes, so the command line prints them as one line, and show as a dialog in the interactive window.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
import types
from typing import Any, cast

import torch  # noqa: F401  (torch before Qt: a known DLL clash on Windows otherwise)
from PySide6.QtCore import QEventLoop, QMessageLogContext, QTimer, QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

from hookscope.core.common.errors import HookscopeError, ModelError
from hookscope.core.common.vocabulary import (
    COLUMN_ORDER,
    HOOK_WORDS,
    SHOWN_AS,
    deprecation_line,
    kinds_of_words,
    old_spellings,
)
from hookscope.core.engine.devices import resolve_device
from hookscope.core.models.catalogue import DEFAULT_MODEL, catalogue
from hookscope.core.models.images import read_image
from hookscope.system.startup import (
    close_splash,
    cursor_library_bundled,
    display_problem,
    qt_fatal_summary,
    report_startup_error,
)
from hookscope.ui.dialogs.about import app_icon
from hookscope.ui.main_window import MainWindow
from hookscope.ui.state.settings import settings_folder
from hookscope.ui.state.worker import active_threads, wait_for_workers
from hookscope.ui.state.workspace import TICK_KINDS
from hookscope.ui.theme import apply_theme, configure_pyqtgraph
from hookscope.ui.widgets.disposal import dispose

SELF_TEST_REPORT_ENV = "HOOKSCOPE_SELF_TEST_REPORT"
RUN_TIMEOUT_S = 300
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
SCREENSHOT_SIZE = (1560, 980)


Window = MainWindow  # for type hints in the benchmarks, which make windows through ``make_window``


def make_window(*args: Any, **options: Any) -> MainWindow:
    """A main window (the one place outside the shell that knows its class)."""
    return MainWindow(*args, **options)


def _no_display() -> bool:
    return sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


_PLATFORM_NOTES: list[str] = []  # what Qt said about its platform plugin, for the error log if it gives up


def _quiet_offscreen_noise(kind: QtMsgType, context: QMessageLogContext, message: str) -> None:
    """The offscreen platform warns on every dock resize; everything else Qt says still reaches stderr. When Qt
    gives up before the window (no usable platform plugin: it aborts right after this), the reason goes to the
    error log and a message box, in one readable sentence (hookscope.system.startup)."""
    if "does not support propagateSizeHints" in message:
        return
    if kind == QtMsgType.QtFatalMsg:
        report_startup_error(qt_fatal_summary(message, _PLATFORM_NOTES), "\n".join([*_PLATFORM_NOTES, message]))
        return
    category = getattr(context, "category", None)  # a field PySide's type stubs leave out
    if str(category or "").startswith("qt.qpa"):
        _PLATFORM_NOTES.append(message)
        if "xcb-cursor0 or libxcb-cursor0 is needed" in message and cursor_library_bundled():
            return  # Qt says this whenever xcb fails; this installation has the library, so it is not the cause
    if sys.stderr is not None:
        sys.stderr.write(message + "\n")


def application(offscreen: bool = False) -> QApplication:
    """The one QApplication (reused when one exists, as under pytest-qt), themed for Hookscope."""
    existing = cast("QApplication | None", QApplication.instance())  # a QApplication: this one, or pytest-qt's
    if existing is None:
        if offscreen:
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        qInstallMessageHandler(_quiet_offscreen_noise)
        existing = QApplication([sys.argv[0] if sys.argv else "hookscope"])
        existing.setApplicationName("Hookscope")
        existing.setOrganizationName("Hookscope")
        existing.setWindowIcon(app_icon())
        existing.setApplicationDisplayName("Hookscope")
    configure_pyqtgraph()
    apply_theme(existing)
    return existing


def viewer_application() -> QApplication:
    """The QApplication for a window made from Python (``hookscope.Viewer``): offscreen where there is no display
    (a notebook on a server: its ``capture()`` and ``screenshot()`` still work)."""
    return application(offscreen=_no_display())


def _check_model(model: str | None) -> str:
    name = model or DEFAULT_MODEL
    if name not in catalogue(include_timm=True):  # timm's models too, when timm is installed
        close = [n for n in catalogue() if name.lower() in n][:6]
        hint = f"; did you mean one of: {', '.join(close)}?" if close else "; see the model list in the window."
        raise ModelError(f"Unknown model '{name}'{hint}")
    return name


def wait_for_run(window: MainWindow, timeout_s: float = RUN_TIMEOUT_S) -> str | None:
    """Run the event loop until the window finishes a run; returns the error text if one came first."""
    loop = QEventLoop()
    outcome: dict[str, str] = {}

    def failed(message: str) -> None:
        outcome["error"] = message
        loop.quit()

    def timed_out() -> None:
        outcome["error"] = f"no run finished within {timeout_s:.0f} s"
        loop.quit()

    window.run_finished.connect(loop.quit)
    window.error_shown.connect(failed)
    timer = QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(timed_out)
    timer.start(int(timeout_s * 1000))
    loop.exec()
    timer.stop()
    window.run_finished.disconnect(loop.quit)
    window.error_shown.disconnect(failed)
    return outcome.get("error")


def settle(ms: int = 300) -> None:
    """Let pending paints and layout happen before grabbing pixels."""
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def _close(window: MainWindow) -> None:
    window.close()
    dispose(window)
    QApplication.processEvents()


def parse_size(text: str) -> tuple[int, int]:
    """``1366x768`` as (width, height); a clear error for anything else."""
    width, sep, height = text.lower().partition("x")
    if (
        not sep
        or not width.isdigit()
        or not height.isdigit()
        or not (320 <= int(width) <= 8192)
        or not (240 <= int(height) <= 8192)
    ):
        raise HookscopeError(f"--size takes WIDTHxHEIGHT in pixels, e.g. 1366x768 (not '{text}').")
    return int(width), int(height)


def parse_ticks(text: str) -> tuple[str, ...]:
    """The window's ``--hooks``: the words export's ``--hooks`` takes (``HOOK_WORDS``; the old spellings with a
    warning line), as the kinds the tree's columns tick, in their order (``grad_out`` is ticked as Grad)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    try:
        kinds = kinds_of_words(names)
    except HookscopeError:
        raise HookscopeError(f"--hooks takes a list of {', '.join(HOOK_WORDS)} (not '{text}').") from None
    if old := old_spellings(names):
        print(f"hookscope: warning: --hooks: {deprecation_line(old)}", file=sys.stderr)
    shown = {SHOWN_AS.get(kind, kind) for kind in kinds}
    return tuple(kind for kind in COLUMN_ORDER if kind in shown)


def take_screenshot(
    out: str,
    image: str | None,
    model: str | None,
    weights: str,
    device: str,
    check: list[str] | None,
    size: tuple[int, int] = SCREENSHOT_SIZE,
    ticks: tuple[str, ...] = TICK_KINDS,
) -> int:
    """Open the real window at ``size``, tick ``check`` (the ``ticks`` columns) as a click would, wait, save."""
    name = _check_model(model)
    resolve_device(device)
    if image is not None:
        read_image(image)  # a clear one-line error now, not a timeout later
    application(offscreen=_no_display())
    window = make_window(name, weights, device, image, ticks=check, remember=False, tick_kinds=ticks)
    window.show_dialogs = False
    window.resize(*size)
    window.show()
    try:
        error = wait_for_run(window)
        missing = window.workspace.missing_ticks
        if missing:
            raise HookscopeError(f"{name} has no module named {', '.join(map(repr, missing))}.")
        if error:
            raise HookscopeError(error)
        settle()
        while window.workspace.preparing:  # panels in view whose pictures the run left to make
            settle(50)
        folder = os.path.dirname(os.path.abspath(out))
        os.makedirs(folder, exist_ok=True)
        if not window.save_screenshot(out):
            raise HookscopeError(f"Could not write the screenshot to '{out}'.")
    finally:
        _close(window)
    print(f"hookscope: screenshot of the window saved to {out}")
    return 0


def _leftover_hooks(module: torch.nn.Module) -> list[str]:
    return [
        f"{path or '(model)'}.{attribute}"
        for path, sub in module.named_modules()
        for attribute in HOOK_DICTS
        if getattr(sub, attribute, None)
    ]


def run_self_test() -> int:
    """Start offscreen on the built-in default, run end to end, check panels and hook removal, report one line."""
    start = time.perf_counter()
    application(offscreen=True)
    window = MainWindow(DEFAULT_MODEL, "default", "cpu", None, None, remember=False)
    window.show_dialogs = False
    window.resize(*SCREENSHOT_SIZE)
    window.show()
    problems: list[str] = []
    summary = ""
    try:
        error = wait_for_run(window)
        if error:
            problems.append(f"the first run failed: {error}")
        else:
            space = window.workspace
            loaded = space.loaded
            ticked = space.ticked_pairs()
            filled = [p for p in window.panel_area.panels.values() if p.picture is not None]
            empty = sorted(
                f"{kind}:{path}" for path, kind in ticked if not any(p.path == path and p.kind == kind for p in filled)
            )
            if not ticked:
                problems.append("no module was ticked")
            if empty:
                problems.append(f"panels left empty: {', '.join(empty)}")
            for panel in filled:
                picture = panel.picture
                assert picture is not None  # filled
                image = picture.arrangement.image
                if picture.channels.kind == "maps" and (image is None or not image.size or not image.any()):
                    problems.append(f"panel {panel.key} ({panel.kind}) shows a blank mosaic")
            if space.last is None or not space.last.result.top5:
                problems.append("no predictions were shown")
            timings = dict(window.last_timings)
            space.untick_all()
            error = wait_for_run(window)
            if error:
                problems.append(f"the run after unticking failed: {error}")
            if space.registry is not None and space.registry.handles():
                problems.append(f"the registry still holds {len(space.registry.handles())} hooks")
            left = _leftover_hooks(loaded.module) if loaded is not None else ["no model"]
            if left:
                problems.append(f"hooks left on the model: {', '.join(left[:5])}")
            if window.panel_area.panels:
                problems.append(f"{len(window.panel_area.panels)} panels left after unticking")
            if loaded is not None and timings:
                summary = (
                    f"{loaded.name} ({'pretrained' if loaded.pretrained else 'untrained'}), {len(filled)} panels "
                    f"filled, forward {timings['forward_ms']:.0f} ms, backward {timings['backward_ms']:.0f} ms, "
                    f"render {timings['prepare_ms'] + timings['apply_ms']:.0f} ms, every hook removed"
                )
    finally:
        _close(window)
    if active_threads():
        problems.append("a worker thread was still running after the window closed")
    elapsed = time.perf_counter() - start
    if problems:
        line = f"hookscope self-test: FAILED: {'; '.join(problems)}"
    else:
        line = f"hookscope self-test: ok: {summary} ({elapsed:.1f} s)"
    print(line)
    report = os.environ.get(SELF_TEST_REPORT_ENV)
    if report:
        with open(report, "w", encoding="utf-8") as handle:
            handle.write(line + "\n")
    return 1 if problems else 0


def run_gui(
    image: str | None,
    model: str | None,
    weights: str,
    device: str,
    screenshot: str | None,
    check: list[str] | None,
    self_test: bool,
    size: str | None = None,
    ticks: str | None = None,
    more_images: list[str] | None = None,
) -> int:
    """The ``hookscope`` window (``image`` shown, ``more_images`` waiting in the image list). Returns the process
    exit status."""
    if self_test:
        return run_self_test()
    kinds = parse_ticks(ticks) if ticks else TICK_KINDS
    if screenshot:
        return take_screenshot(
            screenshot, image, model, weights, device, check, parse_size(size) if size else SCREENSHOT_SIZE, kinds
        )
    problem = display_problem()
    if problem:  # QApplication would abort here with a misleading message and no window to show it in
        return report_startup_error(problem)
    app = application()
    problems = []
    try:
        name = _check_model(model)
    except HookscopeError as error:
        name, problems = DEFAULT_MODEL, [str(error)]
    window = MainWindow(name, weights, device, image, ticks=check, tick_kinds=kinds)
    if image is not None and more_images:
        window.workspace.open_paths([image, *more_images])  # the first is shown, the rest wait in the list
    if size:
        window.resize(*parse_size(size))
    window.show()
    close_splash()  # the window is up: the bootloader's splash (a bundle) goes
    if problems:
        QTimer.singleShot(0, lambda: window.show_error(problems[0]))
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl+C in the terminal ends the app
    install_error_dialog(window)
    return end_despite_stuck_workers(app.exec())


def end_despite_stuck_workers(code: int, wait_ms: int = 300) -> int:
    """The exit status, once every worker has finished; or the end of the process, now, when one has not.

    A worker stuck in user code (a trusted model.py whose build() never returns) cannot be killed, and Qt's thread
    pool waits for its threads when the process ends, so the process would never end. By now the window has closed
    (within 2 s) and written its settings, so the process ends without waiting for such a worker.
    """
    if active_threads() == 0 or wait_for_workers(wait_ms):
        return code
    if sys.stderr is not None:
        sys.stderr.write(
            "hookscope: a background task (a model still loading?) did not finish; ending without waiting for it\n"
        )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def install_error_dialog(window: MainWindow) -> None:
    """Unexpected errors in a windowed app (no console) become a dialog and a log file, not a silent exit."""
    log = settings_folder() / "hookscope-errors.log"

    def hook(kind: type[BaseException], error: BaseException, tb: types.TracebackType | None) -> None:
        text = "".join(traceback.format_exception(kind, error, tb))
        with contextlib.suppress(OSError):
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        if sys.stderr is not None:
            sys.stderr.write(text)
        window.show_error(f"Unexpected error: {kind.__name__}: {error} (details in {log})")

    sys.excepthook = hook

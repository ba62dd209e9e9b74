"""Hostile input: signals. Ctrl-C and SIGTERM at any moment of every command (while its modules load, while a model
builds, while frames play) end it with one line and exit 130 or 143, and the process is gone within 2 s of that line,
whatever the model's own code does (a ``build()`` that never returns, one that catches the stop's exception, a
thread of its own that would hold a normal exit).

Real ``hookscope`` processes, real signals, real torchvision models (weights=None), real model files.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostile import ENV, ROOT, SAMPLE, ctrl_c_as_from_a_terminal, error_lines, hookscope_process, write_images

STOP_LINES = {signal.SIGINT: (130, "hookscope: interrupted"), signal.SIGTERM: (143, "hookscope: stopped (SIGTERM)")}
GONE_WITHIN_S = 2.0  # a stopped command's process ends this soon after its line
STOP_DEADLINE_S = 10.0  # hookscope.system.termination's: a stop nothing answered ends the process this soon

MODELS = """
import threading
import time

from torch import nn


def _thread_that_holds_the_exit():
    threading.Thread(target=time.sleep, args=(3600,), name="model's own").start()  # not a daemon


def build():
    while True:  # a pure-Python loop: only a signal handler gets in
        pass


def loops():
    _thread_that_holds_the_exit()
    while True:
        pass


def swallows():
    while True:
        try:
            while True:
                pass
        except BaseException:  # the stop's exception too
            pass


def small_with_a_thread():
    _thread_that_holds_the_exit()
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_images(tmp_path_factory.mktemp("images"))


@pytest.fixture
def model_py(tmp_path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODELS)
    return path


class Watched:
    """A process's stderr read line by line on a thread, each line with the time it came."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            with self._changed:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, start: str, timeout: float = 120) -> float:
        """When the first line starting with ``start`` came (fails the test after ``timeout`` s without it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [when for when, line in self.lines if line.startswith(start)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    self.process.kill()  # a process that never says it stopped is not left running
                    pytest.fail(f"no line starting {start!r}; stderr: {self.text()!r}")
                self._changed.wait(min(left, 0.5))

    def end(self, timeout: float = 60) -> float:
        """When the process ended (killed and the test failed after ``timeout`` s)."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"still running {timeout} s after the signal; stderr: {self.text()!r}")
        ended = time.monotonic()
        self._reader.join(10)
        self.process.stdout.close()
        return ended

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def stop_and_time(process: subprocess.Popen, watched: Watched, stop: int, line: str) -> tuple[int, float]:
    """Send ``stop``; (the exit status, seconds from the stop line to the end of the process)."""
    process.send_signal(stop)
    said = watched.wait_for(line, timeout=60)
    ended = watched.end()
    return process.returncode, ended - said


# ---- a build() that never returns: named, and ended by Ctrl-C and SIGTERM ------------------------------------
# Each factory once in the default run, on export (Ctrl-C) or scan (SIGTERM), both stops taken: the rest of export and
# scan, and lessons and visualize (the same path), with -m slow.
DEFAULT_BUILD_CASES = {("export", "build"), ("scan", "loops"), ("export", "swallows")}
BUILD_CASES = [
    pytest.param(command, stop, factory, marks=() if (command, factory) in DEFAULT_BUILD_CASES else pytest.mark.slow)
    for command, stop in (("export", signal.SIGINT), ("scan", signal.SIGTERM), ("lessons", signal.SIGINT),
                          ("visualize", signal.SIGTERM))
    for factory in ("build", "loops", "swallows")
]  # fmt: skip


@pytest.mark.parametrize("command, stop, factory", BUILD_CASES)
def test_a_build_that_never_returns_is_named_and_ends_on_ctrl_c_and_sigterm(images, model_py, tmp_path, command, stop,
                                                                             factory) -> None:  # fmt: skip
    """``loops`` leaves a thread that would hold a normal exit for an hour (issue 46: "stopped (SIGTERM)" and still
    alive 5 s later); ``swallows`` catches the stop's exception and loops on: the stop's deadline ends it."""
    spec = ["--model-file", f"{model_py}:{factory}", "--trust"]
    out = tmp_path / "out"
    args = {
        "export": ["export", *spec, "--image", SAMPLE, "--out", str(out)],
        "scan": ["scan", *spec, "--images", str(images), "--layers", "all", "--out", str(out)],
        "lessons": ["lessons", "--run-all", *spec],
        "visualize": ["visualize", *spec, "--layer", "x", "--out", str(tmp_path / "dream.png")],
    }[command]
    process = hookscope_process(*args)
    watched = Watched(process)
    note = f"hookscope: still building the model with {factory}() from '{model_py}'; Ctrl-C stops it."
    watched.wait_for(note)  # the note comes 2 s into the build
    sent = time.monotonic()
    status, lingered = stop_and_time(process, watched, stop, STOP_LINES[stop][1])
    assert (status, error_lines(watched.text())) == (STOP_LINES[stop][0], [note, STOP_LINES[stop][1]])
    assert lingered < GONE_WITHIN_S
    said = watched.wait_for(STOP_LINES[stop][1])
    assert said - sent < (STOP_DEADLINE_S + 5 if factory == "swallows" else 10)  # swallowed: the deadline's line
    assert not out.exists() and not (tmp_path / "dream.png").exists()


# ---- live: said stopped, and gone ----------------------------------------------------------------------------
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_live_looping_unpaced_ends_within_2_s_of_saying_it_stopped(model_py, tmp_path, stop) -> None:
    """Issue 46: 'live ... --frames 10**12 --loop --unpaced', SIGTERM: said stopped, exited 7.7 s later. Here the
    model file leaves a thread of its own behind, which held the exit for ever."""
    sys.path.insert(0, str(ROOT / "tests"))
    from video_files import write_video

    video = write_video(tmp_path / "clip.avi")
    process = hookscope_process("live", "--video", str(video), "--model-file", f"{model_py}:small_with_a_thread",
                                "--trust", "--layers", "0", "--loop", "--unpaced", "--frames", str(10**12))  # fmt: skip
    watched = Watched(process)
    watched.wait_for("hookscope: playing")
    time.sleep(1.0)
    status, lingered = stop_and_time(process, watched, stop, "hookscope: live stopped after ")
    assert status == STOP_LINES[stop][0]
    assert lingered < GONE_WITHIN_S, watched.text()
    assert "Traceback" not in watched.text()


# ---- Ctrl-C at any moment: while the modules load, and after ---------------------------------------------------
# The command as ``python -m hookscope`` runs it, its __main__ read and compiled before the line that says it started:
# what comes before that line (the interpreter's start, runpy finding the module) is Python's, not the command's.
LAUNCH = (
    "import sys\nimport hookscope\n"
    "path = hookscope.__path__[0] + '/__main__.py'\ncode = compile(open(path).read(), path, 'exec')\n"
    "sys.argv = ['hookscope', *sys.argv[1:]]\nsys.stderr.write('started\\n'); sys.stderr.flush()\n"
    "exec(code, {'__name__': '__main__'})\n"
)


def ctrl_c_after(delay: float, *args: str) -> tuple[int, str]:
    """Run the command, Ctrl-C ``delay`` s after its first line started; the exit status and stderr."""
    process = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
                               preexec_fn=ctrl_c_as_from_a_terminal)  # fmt: skip
    assert process.stderr.readline() == "started\n"
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    try:
        err = process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running 60 s after Ctrl-C: {args}")
    return process.returncode, err


@pytest.mark.parametrize(
    "delay", [0.0, 0.1, 0.4, *(pytest.param(d, marks=pytest.mark.slow) for d in (0.01, 0.03, 0.06, 0.2))]
)
def test_ctrl_c_while_the_command_line_loads_is_one_line_and_130(tmp_path, delay) -> None:
    """Issue 46: visualize interrupted in its first moments printed a raw KeyboardInterrupt traceback."""
    status, err = ctrl_c_after(delay, "visualize", "--weights", "none", "--layer", "layer1", "--steps", "2",
                               "--size", "32", "--out", str(tmp_path / "dream.png"))  # fmt: skip
    if status == 0:  # finished before the signal came (not on this machine's load): nothing to check
        pytest.skip("the command finished first")
    frames = [line for line in err.splitlines() if line.startswith('  File "')]
    if status == -signal.SIGINT and all('File "<string>"' in f or '__main__.py", line 0,' in f for f in frames):
        pytest.skip("the signal came before the command's first line (in this test's launcher)")
    assert (status, err.strip().splitlines()[-1:]) == (130, ["hookscope: interrupted"]), err
    assert "Traceback" not in err and err.count("hookscope: interrupted") == 1


COMMANDS = {
    "export": ["export", "--weights", "none", "--image", SAMPLE, "--layers", "layer1", "--out", "{tmp}/out"],
    "scan": ["scan", "--weights", "none", "--images", "{images}", "--layers", "layer1", "--size", "32", "--out",
             "{tmp}/scan"],
    "visualize": ["visualize", "--weights", "none", "--layer", "layer1", "--size", "32", "--out", "{tmp}/d.png"],
    "lessons": ["lessons", "--run-all", "--weights", "none"],
    "bench": ["bench", "--weights", "none", "--layers", "layer1", "--repeat", "50", "--size", "64"],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("delay", [0.5, pytest.param(3.0, marks=pytest.mark.slow)])  # later moments: -m slow
def test_ctrl_c_at_any_moment_of_every_command_is_130_and_one_line(images, tmp_path, command, delay) -> None:
    args = [a.format(tmp=tmp_path, images=images) for a in COMMANDS[command]]
    status, err = ctrl_c_after(delay, *args)
    if status == 0:
        pytest.skip("the command finished first")
    assert status == 130, err
    assert "Traceback" not in err and "unexpected error" not in err
    stops = [line for line in error_lines(err) if line.startswith("hookscope: ") and ("interrupted" in line
             or "stopped" in line or "stopping" in line)]  # fmt: skip
    assert len([s for s in stops if "stopping after" not in s]) == 1, err


HELD = """
import os, signal, sys
from hookscope.system.termination import stops_deferred
try:
    with stops_deferred():
        os.kill(os.getpid(), signal.{name})
        print("still inside", flush=True)  # the signal did not interrupt the block
    print("not raised", flush=True)
except KeyboardInterrupt as stop:
    print("raised after", type(stop).__name__, flush=True)
"""


@pytest.mark.parametrize(("name", "raised"), [("SIGINT", "KeyboardInterrupt"), ("SIGTERM", "Terminated")])
def test_a_signal_during_a_held_block_is_raised_when_it_ends(name, raised) -> None:
    """CI, stop 50: Ctrl-C while torch loaded raised KeyboardInterrupt inside a Python call from pybind11, which can
    not unwind through C++: "terminate called after throwing ... pybind11::error_already_set", status -6. The
    command line now loads torch with the stop held, and raises it once the import is done."""
    done = subprocess.run([sys.executable, "-c", HELD.format(name=name)], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=60)  # fmt: skip
    assert done.stdout.splitlines() == ["still inside", f"raised after {raised}"], done.stderr

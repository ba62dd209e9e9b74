"""One way to run background work (issue 24, item 2): ``Workspace.submit(label, work, exclusive=...)`` and its Task.

A task says how it goes by its own signals; a generator's yields are its progress; exclusive tasks (they use the live
model) never run beside a run, wait for the run in flight, hold a run asked for meanwhile, and run one after another
in the order submitted, none dropped; a waiting task can be cancelled; closing the window during a long job returns
within its stated 2 s."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import RUN_TIMEOUT_MS

from hookscope.ui.state.tasks import Task


def _ended(task: Task, qtbot) -> None:
    qtbot.waitUntil(lambda: task.done, timeout=RUN_TIMEOUT_MS)


def test_a_task_says_what_it_returned_and_a_generator_its_progress(workspace, qtbot) -> None:
    said: list[tuple[str, object]] = []

    def count():
        yield from range(3)
        return "counted"

    task = workspace.submit("count", count)
    for name in ("started", "progressed", "finished", "failed", "ended"):
        getattr(task, name).connect(lambda *args, name=name: said.append((name, *args)))
    with qtbot.waitSignal(task.ended, timeout=RUN_TIMEOUT_MS):
        pass
    assert said == [("started",), ("progressed", 0), ("progressed", 1), ("progressed", 2), ("finished", "counted"),
                    ("ended",)]  # fmt: skip
    assert task.done and not task.running and task.label == "count" and not task.exclusive

    def fail() -> None:
        raise ValueError("no good")

    failed = workspace.submit("fail", fail)
    with qtbot.waitSignal(failed.failed, timeout=RUN_TIMEOUT_MS) as blocker:
        pass
    assert isinstance(blocker.args[0], ValueError) and str(blocker.args[0]) == "no good"
    _ended(failed, qtbot)


def test_a_cancelled_generator_stops_at_its_next_yield(workspace, qtbot) -> None:
    go = threading.Event()
    steps: list[int] = []

    def slow():
        for n in range(1000):
            go.wait(5)
            steps.append(n)
            yield n

    task = workspace.submit("slow", slow)
    finished: list[object] = []
    task.finished.connect(finished.append)
    qtbot.waitUntil(lambda: task.running, timeout=RUN_TIMEOUT_MS)
    task.cancel()
    go.set()
    _ended(task, qtbot)
    assert len(steps) <= 2 and finished == []  # no result: it was stopped


def test_exclusive_tasks_wait_for_the_run_and_take_turns_none_dropped(workspace, qtbot) -> None:
    """Asked for during a run: they wait for it; then they run one after another in the order submitted (the
    runner's single waiting slot would have kept one), never beside a run."""
    runner = workspace.scheduler.runner
    order: list[str] = []
    beside_a_run: list[bool] = []

    def job(name: str):
        def work() -> str:
            beside_a_run.append(runner.running_job is not None)  # a plain attribute: read from the worker
            order.append(name)
            time.sleep(0.05)
            return name

        return work

    applied: list[int] = []
    workspace.run_applied.connect(lambda outcome: applied.append(len(order)))
    workspace.run_again()
    assert workspace.busy
    tasks = [workspace.submit(f"job {n}", job(f"job {n}"), exclusive=True) for n in range(3)]
    assert all(task.waiting for task in tasks)  # the run asked for goes first
    for task in tasks:
        _ended(task, qtbot)
    assert applied[:1] == [0]  # the run was on screen before any of them started
    assert order == ["job 0", "job 1", "job 2"] and beside_a_run == [False] * 3


def test_a_run_asked_for_during_an_exclusive_task_waits_for_it(workspace, qtbot) -> None:
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def hold_the_model() -> None:
        inside.set()
        release.wait(30)

    task = workspace.submit("hold", hold_the_model, exclusive=True)
    qtbot.waitUntil(inside.is_set, timeout=RUN_TIMEOUT_MS)
    before = workspace.applied_generations
    workspace.run_again()
    qtbot.waitUntil(lambda: workspace.scheduler.runner.busy, timeout=5_000)  # asked for, and waiting in the slot
    seen.append(workspace.scheduler.runner.running_job is None)
    assert workspace.busy and workspace.applied_generations == before
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        release.set()
    assert task.done and seen == [True]


def test_a_waiting_task_cancelled_never_starts_and_the_next_one_does(workspace, qtbot) -> None:
    workspace.run_again()
    started: list[str] = []
    first = workspace.submit("first", lambda: started.append("first"), exclusive=True)
    second = workspace.submit("second", lambda: started.append("second"), exclusive=True)
    with qtbot.waitSignal(first.ended, timeout=1000):
        first.cancel()
    _ended(second, qtbot)
    assert started == ["second"] and first.done and first.cancelled


@pytest.mark.parametrize("exclusive", [False, True], ids=["beside-the-runs", "exclusive"])
def test_closing_during_a_long_job_returns_within_2_s(make_window, qtbot, exclusive: bool) -> None:
    """A job that does not look at any cancel flag (a stuck scan batch, a slow export): the window closes within
    its stated 2 s all the same, and a job still waiting behind it never starts."""
    window = make_window()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_TIMEOUT_MS):
        pass
    inside, release = threading.Event(), threading.Event()
    started: list[str] = []

    def long_job() -> None:
        inside.set()
        release.wait(60)

    try:
        window.workspace.submit("long", long_job, exclusive=exclusive)
        behind = window.workspace.submit("behind", lambda: started.append("behind"), exclusive=True)
        qtbot.waitUntil(inside.is_set, timeout=RUN_TIMEOUT_MS)
        start = time.perf_counter()
        window.close()
        took = time.perf_counter() - start
        assert took < 2.5, f"closing took {took:.1f} s"
        if exclusive:  # it waited behind the long one: cancelled by the close, never started
            assert behind.done and behind.cancelled and not started
    finally:
        release.set()  # the stuck thread ends, so nothing is left behind

"""The window's live bench runs end to end and prints each of issue 26's window figures (a real window, offscreen,
a real video it writes, ResNet-18 with random weights)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from hookscope.ui.bench_live import bare_ms
from hookscope.ui.state.worker import model_pool

pytest.importorskip("cv2")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_live_prints_the_ratio_the_stall_and_the_memory() -> None:
    done = subprocess.run([sys.executable, "-m", "hookscope.ui.bench_live", "--frames", "4", "--bare-runs", "1",
                           "--layers", "layer1,layer4"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("resnet18 on cpu, 2 modules ticked for Act and Grad (forward and tensor hooks; 4 "
                               "records, 4 panels), window 1366x768; source ")  # fmt: skip
    assert any(line.startswith("processed 4 frames in ") for line in lines)
    # the model alone, over both phases and each phase's own (the machine may drift between them)
    assert any(" runs): " in line and " before the frames, " in line for line in lines if line.startswith("processed"))
    assert any(line.startswith("processed / model alone: ") and line.endswith("(target >= 0.85)") for line in lines)
    assert any(line.startswith("longest event-loop stall while the video played (4 frames more, the stall timer on): ")
               for line in lines)  # fmt: skip
    assert any(line.startswith("resident memory over 4 frames: ") for line in lines)


@pytest.mark.slow
def test_bench_live_says_when_its_video_held_the_model_back() -> None:
    """A video written at 5 fps: the model waits for every frame, and the bench says the ratio measures the source,
    naming the option that writes a faster one."""
    done = subprocess.run([sys.executable, "-m", "hookscope.ui.bench_live", "--frames", "4", "--bare-runs", "1",
                           "--layers", "layer1", "--clip-fps", "5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "(320x240 at 5 fps, 300 frames), at its own rate, looped" in lines[0]
    notes = [line for line in lines if line.startswith("note: the source delivered ")]
    assert len(notes) == 1, done.stdout
    assert "fewer than the model alone takes" in notes[0]
    assert notes[0].endswith(
        "; a video faster than the model (--clip-fps 60) gives frames as fast as the model takes them"
    )


def test_the_model_alone_runs_on_the_thread_the_window_keeps_for_the_model(qapp) -> None:
    """``bare_ms`` waits for its runs without ending the model's pool thread (``QThreadPool.waitForDone`` would: every
    phase then started a new thread, with a new OpenMP team): the runs before it, its own and those after it share
    one thread."""

    def model_thread() -> int:
        """The native id of the thread a job on the model's pool runs on."""
        found: list[int] = []
        ran = threading.Event()
        model_pool().start(lambda: (found.append(threading.get_native_id()), ran.set()))
        assert ran.wait(10)
        return found[0]

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
    x = torch.randn(1, 3, 8, 8)
    threads = [model_thread()]
    for _ in range(2):
        times = bare_ms(model, x, 2)
        assert len(times) == 2 and min(times) > 0
        threads.append(model_thread())
    assert len(set(threads)) == 1, threads


def test_the_written_clip_leaves_opencv_quiet_for_a_file_that_is_not_a_video(tmp_path) -> None:
    """``write_clip`` loads OpenCV as the app does (its FFmpeg silenced): a file that is not a video, opened later in
    the same process (the benches and ``real_screen.py`` do), is one line of ours, with nothing of FFmpeg's on stderr.
    Written with OpenCV imported straight away, FFmpeg printed 'moov atom not found' there."""
    notes = tmp_path / "notes.mp4"
    notes.write_text("notes, not a video\n" * 40)
    script = (
        "import sys; from pathlib import Path\n"
        "from hookscope.ui.bench_live import write_clip\n"
        "from hookscope.core.live.video import VideoError, open_video\n"
        "clip = write_clip(Path(sys.argv[1]))\n"
        "with open_video(clip) as source: print(source.info.describe().split(' (')[1])\n"
        "try: open_video(sys.argv[2])\n"
        "except VideoError as error: print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(notes)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "320x240 at 30 fps, 300 frames)",
        f"Cannot read '{notes}': it is not a video file FFmpeg can open (not a video, truncated before its index, or "
        "damaged).",
    ]
    assert "moov" not in done.stderr and "mov,mp4" not in done.stderr, done.stderr

"""Hostile input: video. ``export --video`` writes every frame whole or not at all (a hidden folder renamed at the
end), a rerun replaces what an earlier run left half-written, SIGTERM ends it as Ctrl-C does (exit 143, the frames
finished kept) and a full disk is one line naming the disk and what was kept; ``live --record`` onto a disk that
fills up says how many pictures the file kept and exits 2; ``--frames ''`` is refused.

Real video files (OpenCV's writer), a real small tmpfs for a full disk (root only), real signals.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hostile import ROOT, hookscope_process, mounted_disk, one_error

from hookscope.cli import main
from hookscope.core.live.video import VideoError, open_video

sys.path.insert(0, str(ROOT / "tests"))
from video_files import write_video  # noqa: E402


@pytest.fixture
def small_disk(tmp_path):
    """A real tmpfs of a chosen size: ``small_disk(bytes)`` mounts (or resizes) it and gives its folder."""
    yield from mounted_disk(tmp_path)


SMALL = """
from torch import nn


def small():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
"""


@pytest.fixture
def clip(tmp_path) -> Path:
    return write_video(tmp_path / "clip.avi")


@pytest.fixture
def small_model(tmp_path) -> list[str]:
    path = tmp_path / "model.py"
    path.write_text(SMALL)
    return ["--model-file", f"{path}:small", "--trust"]


def frame_folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def test_an_empty_frame_range_is_refused(clip, tmp_path, capsys) -> None:
    """Issue 46: --frames '' exported frame 0."""
    with pytest.raises(SystemExit) as ended:
        main(["export", "--weights", "none", "--video", str(clip), "--frames", "", "--out", str(tmp_path / "out")])
    assert ended.value.code == 2
    assert "argument --frames: frames are A:B" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # SIGTERM on live is checked in the default run (test_sigterm_stops_live_with_one_line)
def test_sigterm_ends_export_video_keeping_whole_frames_only(clip, tmp_path) -> None:
    """Issue 46: SIGTERM had no handler (exit -15, no word) and Ctrl-C left frame-000011/ with arrays and no
    manifest."""
    out = tmp_path / "out"
    process = hookscope_process(
        "export", "--weights", "none", "--video", str(clip), "--frames", "0:", "--out", str(out)
    )  # fmt: skip  (every layer, PNGs: seconds a frame, mostly writing)
    first = process.stdout.readline()
    assert first.startswith("frame 0 ("), first + process.stderr.read()
    time.sleep(0.5)  # into the writing of a later frame
    process.send_signal(signal.SIGTERM)
    out_text, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    line = one_error(err)
    written = frame_folders(out)
    assert written and all(not name.startswith(".") for name in written)  # nothing half-written, hidden or not
    assert all((out / name / "manifest.json").is_file() for name in written)
    last = len(written) - 1
    kept = "frame 0 is" if last == 0 else f"frames 0-{last} are"
    assert line == (f"hookscope: stopped (SIGTERM); {kept} written whole in '{out}'; the frame being written was not "
                    "kept.")  # fmt: skip
    assert written == [f"frame-{i:06d}" for i in range(last + 1)]


def test_a_rerun_replaces_a_half_written_frame_and_what_a_killed_run_left(clip, tmp_path, small_model) -> None:
    out = tmp_path / "out"
    broken = out / "frame-000001"  # an earlier version's frame stopped half way: arrays of other hooks, no manifest
    broken.mkdir(parents=True)
    np.save(broken / "input.npy", np.zeros(3))
    np.savez(broken / "gradients.npz", x=np.zeros(3))
    hidden = out / ".frame-000002.partial"  # a run killed outright (SIGKILL) in the middle of frame 2
    hidden.mkdir()
    (hidden / "input.npy").write_bytes(b"half")
    code = main(["export", *small_model, "--video", str(clip), "--frames", "0:3", "--layers", "0", "--hooks", "act",
                 "--no-png", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert frame_folders(out) == ["frame-000000", "frame-000001", "frame-000002"]
    files = {name: sorted(p.name for p in (out / name).iterdir()) for name in frame_folders(out)}
    assert files["frame-000001"] == files["frame-000000"] == files["frame-000002"]  # no stale gradients.npz
    assert json.loads((broken / "manifest.json").read_text())["video"]["frame"] == 1
    assert np.load(broken / "input.npy").shape != (3,)


def test_a_full_disk_during_export_video_is_one_line_naming_the_disk_and_what_was_kept(clip, small_disk, small_model,
                                                                                       capsys) -> None:  # fmt: skip
    """Issue 46: "unexpected error: OSError: 150528 requested and 2016 written"."""
    disk = small_disk(3 << 20)  # a frame (input 3x224x224 float32, the activations) is about 1.4 MB
    out = disk / "out"
    code = main(["export", *small_model, "--video", str(clip), "--frames", "0:", "--layers", "0", "--hooks", "act",
                 "--no-png", "--out", str(out)])  # fmt: skip
    assert code == 2
    line = one_error(capsys.readouterr().err)
    written = frame_folders(out)
    assert written and all((out / name / "manifest.json").is_file() for name in written)  # no hidden part left
    failed = len(written)
    kept = "frame 0 is" if failed == 1 else f"frames 0-{failed - 1} are"
    assert line.startswith(f"hookscope: error: Cannot write frame {failed} into '{out}': the disk {disk} is full (")
    assert line.endswith(f"free); {kept} written whole in '{out}', frame {failed} was not kept.")


def test_live_record_onto_a_disk_that_fills_up_says_what_was_kept_and_exits_2(clip, small_disk, small_model) -> None:
    """Issue 46: 'recorded 40 pictures ... -> x.avi' while only 8 frames could be read back."""
    disk = small_disk(32 * 1024)  # 40 pictures (the input and the panel, 452x224, flat colours, MJPG) need 54 kB
    record = disk / "seen.avi"
    process = hookscope_process("live", "--video", str(clip), *small_model, "--layers", "0", "--frames", "40",
                                "--loop", "--unpaced", "--record", str(record))  # fmt: skip
    out, err = process.communicate(timeout=300)
    assert process.returncode == 2, err
    assert "recorded " not in out
    line = one_error("\n".join(line for line in err.splitlines() if not line.startswith("hookscope: playing ")))
    readable = 0
    with open_video(record) as seen:  # its header still announces every picture written: it says it is truncated
        with pytest.raises(VideoError, match="truncated"):
            while seen.read() is not None:
                readable += 1
    assert readable > 0
    assert line.startswith(
        f"hookscope: error: Cannot record to '{record}': the disk {disk} is full; {readable} of the "
    )
    written = int(line.split(f"{readable} of the ")[1].split(" ")[0])
    assert readable < written <= 40

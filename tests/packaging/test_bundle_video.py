"""The installer includes OpenCV (issue 26, item 6): both build scripts install the 'live' extra, the spec refuses
to build without it, and the built bundle plays a video written by the build environment (build.sh's plan, printed
with --print-commands: nothing is installed or built here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def planned(*args: str) -> list[str]:
    done = subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), "--print-commands", *args],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


def test_build_sh_installs_opencv_and_plays_a_video_with_the_bundle_after_its_self_test() -> None:
    lines = planned()
    assert "build/venv-cpu/bin/python -m pip install --quiet .\\[live\\] pyinstaller\\>=6.10\\,\\<7" in lines
    write = lines.index("build/venv-cpu/bin/python packaging/bundle_checks.py write-video build/check-video.avi")
    play = next(
        i for i, line in enumerate(lines) if "dist/hookscope/hookscope live --video build/check-video.avi" in line
    )
    assert lines[play].startswith("env -i ") and "PATH=/nonexistent" in lines[play]
    self_test = next(i for i, line in enumerate(lines) if line.endswith("--self-test"))
    assert self_test < write < play


def test_the_windows_script_installs_opencv_and_plays_a_video_too() -> None:
    text = (ROOT / "packaging" / "build-windows.ps1").read_text()
    assert '"install", ".[live]", "pyinstaller>=6.10,<7"' in text
    assert '"write-video", "build\\check-video.avi"' in text and '@("live", "--video", "build\\check-video.avi"' in text


def test_the_spec_names_cv2_and_refuses_to_build_without_it() -> None:
    spec = (ROOT / "packaging" / "hookscope.spec").read_text()
    assert '"cv2"]' in spec and 'importlib.util.find_spec("cv2") is None' in spec


def test_write_video_gives_a_video_the_reader_plays(tmp_path) -> None:
    pytest.importorskip("cv2")
    from hookscope.core.live.video import open_video

    out = tmp_path / "build" / "check-video.avi"
    done = subprocess.run([sys.executable, str(ROOT / "packaging" / "bundle_checks.py"), "write-video", str(out)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == f"wrote {out}", done.stderr
    with open_video(out) as video:
        assert (video.info.width, video.info.height, video.info.frame_count, video.info.fps) == (160, 120, 8, 10.0)
        frames = list(iter(video.read, None))
    assert len(frames) == 8 and not np_equal(frames[0].rgb, frames[1].rgb)  # the stripes move


def np_equal(a, b) -> bool:
    import numpy as np

    return bool(np.array_equal(a, b))

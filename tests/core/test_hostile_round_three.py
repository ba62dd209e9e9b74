"""Issue 23: hostile input, round three. The new commands (scan, visualize, lessons, generated scripts) and sessions
with scans refuse cleanly: one line in Hookscope's words, exit 2 for the user's mistake, no traceback, no hang,
bounded memory, nothing half-written claimed as done, nothing left behind.

Real torchvision models (weights=None), real files, the real ``hookscope`` entry point; a full disk is a real small
tmpfs (mounted here when running as root, skipped otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import load_for_cli, main
from app.core.batch import find_images
from app.core.scan import CHECKPOINT_FILE, ScanSettings, scan_images

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "resources" / "chelsea.png")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def one_error(err: str) -> str:
    """The one line of an error on stderr (progress lines redrawn with \\r are not lines of their own)."""
    lines = [line.split("\r")[-1] for line in error_lines(err)]
    lines = [line for line in lines if line.strip() and not line.startswith(("scan: ", "receptive fields: "))]
    assert len(lines) == 1, lines
    assert "Traceback" not in err and "unexpected error" not in err
    return lines[0]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for index in range(5):
        pixels = np.random.default_rng(index).integers(0, 256, size=(40 + index, 50, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"photo{index}.png")
    return folder


def scan_args(images: Path, out: Path, *extra: str) -> list[str]:
    return ["scan", "--weights", "none", "--images", str(images), "--layers", "layer1", "--size", "32",
            "--batch-size", "2", "--top", "2", "--out", str(out), *extra]  # fmt: skip


# ---- --steps 0 ---------------------------------------------------------------------------------------------
def test_visualize_refuses_zero_steps(tmp_path, capsys) -> None:
    out = tmp_path / "dream.png"
    code = main(["visualize", "--weights", "none", "--layer", "layer1", "--steps", "0", "--size", "32", "--out",
                 str(out)])  # fmt: skip
    assert code == 2
    assert one_error(capsys.readouterr().err) == "hookscope: error: --steps must be at least 1, not 0."
    assert not out.exists()


# ---- 3: a damaged checkpoint -------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["[1, 2]", "null", '"a string"', '{"fingerprint": [1]}', "{}"])
def test_resume_over_a_checkpoint_that_is_not_a_scan_is_one_line(images, tmp_path, capsys, damage) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "scan.partial.json").write_text(damage)
    assert main(scan_args(images, out, "--resume")) == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith("hookscope: error: ") and str(out) in line
    assert "start again without resuming" in line
    assert not (out / "scan.json").exists()


@pytest.mark.parametrize("field, value", [("modules", [1]), ("modules", {"layer1": None}), ("next_batch", "x"),
                                          ("top_shape", None), ("processed", 10**18)])  # fmt: skip
def test_resume_over_a_checkpoint_with_its_own_fingerprint_but_damaged_parts(images, tmp_path, capsys, field,
                                                                             value) -> None:  # fmt: skip
    out = tmp_path / "out"
    # a real checkpoint: the scan stopped after its first batch (Ctrl-C's path, through run_scan's cancelled)
    loaded = load_for_cli(argparse.Namespace(model="resnet18", weights="none", seed=0, model_file=None))
    loaded.preprocess = replace(loaded.preprocess, crop=32, resize=32 * 256 // 224)
    found = []
    scan_images(loaded, find_images(images), ScanSettings(("layer1",), top=2, batch_size=2), root=images,
                out_dir=out, progress=lambda p: found.append(p), cancelled=lambda: len(found) >= 2)  # fmt: skip
    checkpoint = json.loads((out / CHECKPOINT_FILE).read_text())
    if field == "top_shape":
        checkpoint["modules"]["layer1"]["top"]["score"] = [[1.0]]
    else:
        checkpoint[field] = value
    (out / CHECKPOINT_FILE).write_text(json.dumps(checkpoint))
    capsys.readouterr()
    assert main(scan_args(images, out, "--resume")) == 2
    line = one_error(capsys.readouterr().err)
    assert "checkpoint" in line and "is damaged" in line and "start again without resuming" in line


# ---- 4: a full disk during a scan --------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A real tmpfs of a chosen size (``resize(bytes)``), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()

    def resize(size: int) -> Path:
        option = f"remount,size={size}" if os.path.ismount(where) else f"size={size}"
        command = ["mount", "-o", option, str(where)] if os.path.ismount(where) else ["mount", "-t", "tmpfs", "-o",
                                                                                        option, "tmpfs", str(where)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        return where

    yield resize
    if os.path.ismount(where):
        subprocess.run(["umount", str(where)], check=True)


def _scan_document(path: Path) -> dict:
    data = json.loads(path.read_text())
    data["scan"].pop("scan_s"), data["scan"].pop("boxes_s")
    return data


def _pages(size: int) -> int:
    return -(-size // 4096)


def test_a_full_disk_keeps_the_finished_scan_in_its_checkpoint_and_resume_writes_it(images, tmp_path, small_disk,
                                                                                    capsys) -> None:  # fmt: skip
    reference = tmp_path / "reference"
    assert main(scan_args(images, reference)) == 0
    scan_size = (reference / "scan.json").stat().st_size
    stopped = tmp_path / "stopped"  # the size of the finished scan's checkpoint (kept: no scan.json written here)
    loaded = load_for_cli(argparse.Namespace(model="resnet18", weights="none", seed=0, model_file=None))
    loaded.preprocess = replace(loaded.preprocess, crop=32, resize=32 * 256 // 224)
    scan_images(loaded, find_images(images), ScanSettings(("layer1",), top=2, batch_size=2), root=images,
                out_dir=stopped)  # fmt: skip
    checkpoint_size = (stopped / CHECKPOINT_FILE).stat().st_size
    capsys.readouterr()
    # room for the checkpoint, not for the checkpoint and scan.json side by side
    pages = _pages(checkpoint_size) + _pages(scan_size) // 2
    assert _pages(checkpoint_size) < pages < _pages(checkpoint_size) + _pages(scan_size)
    disk = small_disk(pages * 4096)
    out = disk / "out"

    assert main(scan_args(images, out)) == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"hookscope: error: Cannot write '{out / 'scan.json'}': No space left on device.")
    assert f"kept in '{out / CHECKPOINT_FILE}'" in line and "--resume" in line
    assert sorted(p.name for p in out.iterdir()) == [CHECKPOINT_FILE]  # no scan.json, no temporary file

    small_disk(4 << 20)  # room made
    assert main(scan_args(images, out, "--resume")) == 0
    assert sorted(p.name for p in out.iterdir()) == ["scan.json"]
    assert _scan_document(out / "scan.json")["modules"] == _scan_document(reference / "scan.json")["modules"]


def test_a_checkpoint_that_does_not_fit_is_one_line_and_leaves_nothing(images, small_disk, capsys) -> None:
    out = small_disk(8192) / "out"  # the folder fits, the checkpoint does not
    assert main(scan_args(images, out)) == 2
    line = one_error(capsys.readouterr().err)
    assert line == (f"hookscope: error: Cannot write the scan's checkpoint '{out / CHECKPOINT_FILE}': No space "
                    "left on device.")  # fmt: skip
    assert list(out.iterdir()) == []

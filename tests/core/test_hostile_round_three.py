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

"""Hostile input: files. What a command writes is never one of the files it reads (the same file after links:
a symbolic link, a hard link), and is refused in one line before anything runs; the generated script refuses to save
over its image. A damaged scan checkpoint or scan.json is one line; a full disk during a scan keeps the finished scan in
its checkpoint (issue 23's cases; a full disk during a video export: tests/core/test_hostile_video.py).

Real files, real links, the real ``hookscope`` entry point; nothing is mocked.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hostile import ENV, ROOT, SAMPLE, mounted_disk, one_error, write_images

from hookscope.cli import main
from hookscope.cli.common import load_for_cli
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.results import CHECKPOINT_FILE, ScanSettings
from hookscope.core.scan.run import scan_images

sys.path.insert(0, str(ROOT / "tests"))
from video_files import write_video  # noqa: E402


@pytest.fixture
def small_disk(tmp_path):
    """A real tmpfs of a chosen size: ``small_disk(bytes)`` mounts (or resizes) it and gives its folder."""
    yield from mounted_disk(tmp_path)


@pytest.fixture
def clip(tmp_path) -> Path:
    return write_video(tmp_path / "clip.avi")


def linked(original: Path, how: str) -> Path:
    """``original`` itself, or another name for it: a symbolic link or a hard link beside it."""
    if how == "same name":
        return original
    other = original.with_name(f"other-{how.replace(' ', '-')}{original.suffix}")
    (os.symlink if how == "symbolic link" else os.link)(original, other)
    return other


@pytest.mark.parametrize("how", ["same name", "symbolic link", "hard link"])
def test_live_refuses_to_record_over_the_video_it_plays(clip, capsys, how) -> None:
    """Issue 46: 'live --video clip.avi --record clip.avi' overwrote the input with the recording, without a word."""
    before = clip.read_bytes()
    record = linked(clip, how)
    code = main(["live", "--video", str(clip), "--weights", "none", "--layers", "layer1", "--frames", "2",
                 "--unpaced", "--record", str(record)])  # fmt: skip
    assert code == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith(f"hookscope: error: --record '{record}' is the file --video reads")
    assert line.endswith("writing there would destroy it; give another name.")
    assert clip.read_bytes() == before


def test_export_refuses_a_script_over_its_image_and_an_out_folder_over_its_video(clip, tmp_path, capsys) -> None:
    image = tmp_path / "cat.png"
    shutil.copy(SAMPLE, image)
    before = image.read_bytes()
    code = main(["export", "--weights", "none", "--image", str(image), "--layers", "layer1", "--out",
                 str(tmp_path / "out"), "--script", str(linked(image, "symbolic link"))])  # fmt: skip
    assert code == 2
    assert "is the file --image reads" in one_error(capsys.readouterr().err)
    assert image.read_bytes() == before and not (tmp_path / "out").exists()
    code = main(["export", "--weights", "none", "--video", str(clip), "--frames", "0:1", "--out", str(clip)])
    assert code == 2
    assert one_error(capsys.readouterr().err).startswith(f"hookscope: error: --out '{clip}' is the file --video reads")


def test_visualize_and_scan_refuse_an_output_that_is_their_weights_or_model_file(tmp_path, capsys) -> None:
    import torch
    import torchvision

    weights = tmp_path / "weights.png"  # a picture name, so that visualize's own name check passes it
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    before = weights.read_bytes()
    code = main(["visualize", "--weights", str(weights), "--layer", "layer1", "--steps", "1", "--size", "32",
                 "--out", str(weights)])  # fmt: skip
    assert code == 2
    assert "--out '" in (line := one_error(capsys.readouterr().err)) and "is the file --weights reads" in line
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(SAMPLE, images / "cat.png")
    code = main(["scan", "--weights", str(weights), "--images", str(images), "--layers", "layer1", "--out",
                 str(linked(weights, "hard link"))])  # fmt: skip
    assert code == 2
    assert "is the file --weights reads" in one_error(capsys.readouterr().err)
    assert weights.read_bytes() == before


def test_the_generated_script_refuses_to_save_over_its_image(tmp_path) -> None:
    script = tmp_path / "run.py"
    assert main(["export", "--weights", "none", "--image", SAMPLE, "--layers", "layer1", "--out",
                 str(tmp_path / "out"), "--no-png", "--script", str(script)]) == 0  # fmt: skip
    image = tmp_path / "cat.npz"  # a name np.savez would keep as it is
    np.savez(image, a=np.zeros(1))
    before = image.read_bytes()
    done = subprocess.run([sys.executable, str(script), "--image", str(image), "--save", str(image)],
                          capture_output=True, text=True, env=ENV, timeout=300)  # fmt: skip
    assert done.returncode == 2
    assert one_error(done.stderr) == f"run.py: error: cannot save to {str(image)!r}: it is the image --image reads"
    assert image.read_bytes() == before


# ==== from issue 23 (hostile input, round three): the scan's checkpoint and scan.json, a full disk ====
@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_images(tmp_path_factory.mktemp("images"))


def scan_args(images: Path, out: Path, *extra: str) -> list[str]:
    return ["scan", "--weights", "none", "--images", str(images), "--layers", "layer1", "--size", "32",
            "--batch-size", "2", "--top", "2", "--out", str(out), *extra]  # fmt: skip


# ---- a damaged checkpoint -------------------------------------------------------------------------------
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


# ---- a full disk during a scan ----
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


# ---- a damaged or hostile scan.json (as a session's scan) ------------------------------------------------
@pytest.fixture(scope="module")
def scan_json(images, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("scan")
    assert main(scan_args(images, out, "--no-boxes")) == 0
    return json.loads((out / "scan.json").read_text())


def damaged(document: dict, damage: str) -> dict:
    data = json.loads(json.dumps(document))
    first = data["modules"]["layer1"]["top"][0][0]
    if damage == "channels 1e999":
        data["modules"]["layer1"]["channels"] = float("inf")  # json writes Infinity; 1e999 reads back as it
    elif damage == "channels 10**12":
        data["modules"]["layer1"]["channels"] = 10**12
    elif damage == "image 10**18":
        first["image"] = 10**18
    elif damage == "image -3":
        first["image"] = -3
    elif damage == "position outside":
        first["y"] = 10**9
    elif damage == "box inverted":
        first["box"] = [20, 20, 10, 10]
    elif damage == "stats short":
        data["modules"]["layer1"]["stats"]["mean"] = [0.0]
    elif damage == "images not names":
        data["images"] = [{"a": 1}]
    return data


@pytest.mark.parametrize("damage", ["channels 1e999", "channels 10**12", "image 10**18", "image -3",
                                    "position outside", "box inverted", "stats short", "images not names"])  # fmt: skip
def test_a_scan_json_with_numbers_or_indexes_out_of_range_is_one_error(scan_json, tmp_path, damage) -> None:
    from hookscope.core.common.errors import HookscopeError
    from hookscope.core.scan.results import read_scan

    file = tmp_path / "scan.json"
    file.write_text(json.dumps(damaged(scan_json, damage)).replace("Infinity", "1e999"))
    with pytest.raises(HookscopeError) as raised:
        read_scan(file)
    message = str(raised.value)
    assert message.startswith(f"'{file}' is not a Hookscope scan (") and "\n" not in message


def bounded_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a Python process of its own with at most 4 GB of data: what would read for ever fails there (a
    MemoryError, or the timeout), not the test process."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))

    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT,
                              timeout=timeout, preexec_fn=limit)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s: {code}")


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_scan_path_that_is_not_a_regular_file_is_not_read(tmp_path, kind) -> None:
    path = "/dev/zero"  # infinite: read whole, it took 19 GB before the kernel ended the process
    if kind == "fifo":
        path = str(tmp_path / "scan.json")
        os.mkfifo(path)  # no writer: opening it to read would wait for ever
    done = bounded_python("from hookscope.core.common.errors import HookscopeError\nfrom hookscope.core.scan.results import read_scan\n"
                          f"try:\n    read_scan({path!r})\nexcept HookscopeError as error:\n    print(error)")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == f"Cannot read the scan '{path}': it is not a file.\n"


def test_a_box_larger_than_the_image_is_clamped_to_it(scan_json, images, tmp_path) -> None:
    from hookscope.core.scan.results import PatchReader, ScanResult

    data = json.loads(json.dumps(scan_json))
    data["modules"]["layer1"]["top"][0][0]["box"] = [0, 0, 20000, 20000]
    result = ScanResult.from_json(data)
    entry = result.top("layer1", 0)[0]
    reader = PatchReader(result)
    whole = reader.patch(replace(entry, box=None))
    assert np.array_equal(reader.patch(entry), whole)  # the box clamped to the image is the whole image
    part = reader.patch(replace(entry, box=(-50, -50, 10, 10)))
    assert np.array_equal(part, reader.patch(replace(entry, box=(0, 0, 10, 10))))

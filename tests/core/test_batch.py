"""Batch runs over a folder: broken files skipped and reported, interrupted batches resumed without redoing work."""

import csv
import json
import os
import signal

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import Preprocess
from hookscope.core.outputs.batch import DONE_FILE, BatchProgress, find_images, folder_names, run_batch

LAYERS = ("conv1", "layer1.0.relu", "layer4", "fc")


@pytest.fixture(scope="module")
def small_resnet():
    """ResNet-18 fed 64-pixel crops: the real model, a fraction of the time."""
    loaded = load_model("resnet18", "none", seed=0)
    loaded.preprocess = Preprocess(resize=72, crop=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    return loaded


@pytest.fixture
def registry(small_resnet):
    with HookRegistry(small_resnet.module) as registry:
        for path in LAYERS:
            registry.add(path, "forward")
        registry.add("layer4", "backward")
        yield registry


def picture(path, seed, size=(90, 70)):
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def folder(tmp_path):
    """Five readable images (two in a subfolder), two broken ones, and files that are not images at all."""
    root = tmp_path / "photos"
    (root / "sub").mkdir(parents=True)
    (root / ".thumbnails").mkdir()
    picture(root / "a.png", 1)
    picture(root / "b.JPG", 2)
    picture(root / "c.jpg", 3)
    picture(root / "sub" / "d.png", 4)
    picture(root / "sub" / "a.png", 5)
    picture(root / ".thumbnails" / "x.png", 6)
    (root / "broken.png").write_bytes(b"this is not a PNG at all" * 10)
    (root / "empty.jpg").write_bytes(b"")
    (root / "notes.txt").write_text("not an image")
    return root


def rel(paths, root):
    return [p.relative_to(root).as_posix() for p in paths]


def test_find_images_sorted_with_or_without_subfolders(folder, tmp_path):
    assert rel(find_images(folder), folder) == ["a.png", "b.JPG", "broken.png", "c.jpg", "empty.jpg"]
    assert rel(find_images(folder, recursive=True), folder) == [
        "a.png", "b.JPG", "broken.png", "c.jpg", "empty.jpg", "sub/a.png", "sub/d.png",
    ]  # fmt: skip
    # the batch's own output inside the folder is never read back as input
    (folder / "out" / "a").mkdir(parents=True)
    picture(folder / "out" / "a" / "conv1.png", 7)
    assert "out/a/conv1.png" in rel(find_images(folder, recursive=True), folder)
    assert "out/a/conv1.png" not in rel(find_images(folder, recursive=True, exclude=folder / "out"), folder)
    np.save(folder / "out" / "a" / "input.npy", np.zeros(1))  # a (half-written) output folder is recognised
    assert "out/a/conv1.png" not in rel(find_images(folder, recursive=True), folder)
    assert folder_names([folder / "a.png", folder / "a.jpg", folder / "sub" / "a.png"], folder) == [
        "a.png", "a.jpg", "sub__a",
    ]  # fmt: skip


def read_summary(out):
    with open(out / "summary.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_batch_skips_two_broken_files_and_finishes_the_rest(small_resnet, registry, folder, tmp_path):
    out = tmp_path / "out"
    images = find_images(folder, recursive=True)
    seen: list[BatchProgress] = []
    report = run_batch(
        small_resnet, registry, images, out, root=folder, kinds=("forward", "backward"), png=True, progress=seen.append
    )
    assert sorted(report.done) == ["a.png", "b.JPG", "c.jpg", "sub/a.png", "sub/d.png"]
    assert [name for name, _ in report.skipped] == ["broken.png", "empty.jpg"]
    reasons = dict(report.skipped)
    assert (
        reasons["broken.png"]
        == f"Cannot read '{folder / 'broken.png'}': it is not an image file (or its format is not supported)."
    )
    assert reasons["empty.jpg"] == f"Cannot read '{folder / 'empty.jpg'}': the file is empty."
    assert not report.cancelled and report.resumed == []
    assert [p.handled for p in seen] == list(range(1, 8)) and seen[-1].total == 7 and seen[-1].skipped == 2

    # one subfolder per image, in the layout of `hookscope export`
    for name in ("a", "b", "c", "sub__a", "sub__d"):
        manifest = json.loads((out / name / "manifest.json").read_text())
        assert (out / name / DONE_FILE).is_file() and (out / name / "png" / "activations" / "conv1.png").is_file()
        assert manifest["hook_kinds"] == ["act", "grad_out"]
    assert json.loads((out / "sub__a" / "manifest.json").read_text())["image"] == str(folder / "sub" / "a.png")
    assert not (out / "broken").exists()

    rows = read_summary(out)
    assert [r["image"] for r in rows] == rel(images, folder)
    assert [r["status"] for r in rows] == ["done", "done", "skipped", "done", "skipped", "done", "done"]
    assert rows[2]["reason"] == reasons["broken.png"]
    keys = ["conv1", "layer1.0.relu", "layer1.0.relu#1", "layer4", "fc"]
    assert list(rows[0])[:9] == ["image", "status", "reason", "folder", "top1", "top2", "top3", "top4", "top5"]
    assert list(rows[0])[9:] == [f"mean {k}" for k in keys]
    for row in rows:
        if row["status"] != "done":
            continue
        tops = [row[f"top{k}"].split(":") for k in range(1, 6)]
        probabilities = [float(t[2]) for t in tops]
        names = small_resnet.categories  # an untrained resnet18 still names ImageNet's classes
        assert probabilities == sorted(probabilities, reverse=True) and all(t[1] == names[int(t[0])] for t in tops)
        with np.load(out / row["folder"] / "activations.npz") as archive:
            for key in keys:
                assert float(row[f"mean {key}"]) == pytest.approx(float(archive[key].astype(np.float64).mean()))


def test_an_interrupted_batch_resumes_without_redoing_finished_images(small_resnet, registry, folder, tmp_path):
    out = tmp_path / "out"
    images = [p for p in find_images(folder, recursive=True) if p.stem not in ("broken", "empty")]
    handled: list[str] = []
    report = run_batch(
        small_resnet, registry, images, out, root=folder, png=False,
        progress=lambda p: handled.append(p.image), cancelled=lambda: len(handled) >= 2,
    )  # fmt: skip
    assert report.cancelled and report.done == ["a.png", "b.JPG"]
    assert [r["status"] for r in read_summary(out)] == ["done", "done", "not run", "not run", "not run"]
    finished = {name: (out / name / "manifest.json").stat().st_mtime_ns for name in ("a", "b")}
    (out / "c").mkdir()  # a half-written folder, as a crash leaves it: no done.json
    (out / "c" / "activations.npz").write_bytes(b"partial")

    # interrupted by the user (Ctrl-C) during the next image: what was computed is still written
    def stop(progress):
        if progress.status == "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch(small_resnet, registry, images, out, root=folder, png=False, resume=True, progress=stop)
    assert (out / "c" / DONE_FILE).is_file() and not (out / "sub__a").exists()
    finished["c"] = (out / "c" / "manifest.json").stat().st_mtime_ns
    assert [r["status"] for r in read_summary(out)] == ["done", "done", "done", "not run", "not run"]

    statuses: list[str] = []
    report = run_batch(
        small_resnet, registry, images, out, root=folder, png=False, resume=True,
        progress=lambda p: statuses.append(p.status),
    )  # fmt: skip
    assert sorted(report.resumed) == ["a.png", "b.JPG", "c.jpg"] and report.done == ["sub/a.png", "sub/d.png"]
    assert statuses == ["resumed"] * 3 + ["done"] * 2
    for name, mtime in finished.items():
        assert (out / name / "manifest.json").stat().st_mtime_ns == mtime, name
    rows = read_summary(out)
    assert [r["status"] for r in rows] == ["done"] * 5 and all(r["top1"] and r["mean conv1"] for r in rows)
    assert np.load(out / "c" / "activations.npz")["conv1"].shape == (1, 64, 32, 32)


def test_resume_redoes_images_finished_with_other_settings(small_resnet, registry, folder, tmp_path):
    out = tmp_path / "out"
    images = [folder / "a.png", folder / "c.jpg"]
    run_batch(small_resnet, registry, images, out, root=folder, png=False)
    registry.add("layer2", "forward")
    report = run_batch(small_resnet, registry, images, out, root=folder, png=False, resume=True)
    assert report.resumed == [] and report.done == ["a.png", "c.jpg"]
    assert "layer2" in np.load(out / "a" / "activations.npz").files


# ---- the command line: a real process, as a user runs it (each start costs a few seconds of imports) -------
def hookscope(*args):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "hookscope", *args], cwd=root, capture_output=True, text=True, timeout=600
    )


def test_cli_batch_reports_broken_files_and_resumes(folder, tmp_path):
    out = tmp_path / "out"
    args = ("export", "--images", str(folder), "--layers", "conv1,layer4", "--no-png", "--out", str(out))
    done = hookscope(*args)
    assert done.returncode == 0, done.stderr
    assert "5 of 5 images" not in done.stdout and f"3 of 5 images written to {out}; 2 skipped" in done.stdout
    # stderr is not a terminal: the progress comes as plain lines (tests/core/test_cli_progress.py has the terminal)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    assert lines[-3].startswith("export: 5/5 images (100%), ") and lines[-3].endswith(", skipped 2"), lines
    assert "Traceback" not in done.stderr
    assert lines[-2:] == [
        f"hookscope: skipped: Cannot read '{folder / 'broken.png'}': it is not an image file (or its format is not supported).",
        f"hookscope: skipped: Cannot read '{folder / 'empty.jpg'}': the file is empty.",
    ]
    rows = read_summary(out)
    assert [(r["image"], r["status"]) for r in rows] == [
        ("a.png", "done"), ("b.JPG", "done"), ("broken.png", "skipped"), ("c.jpg", "done"), ("empty.jpg", "skipped"),
    ]  # fmt: skip
    assert list(rows[0])[9:] == ["mean conv1", "mean layer4"]
    stamps = {n: (out / n / "manifest.json").stat().st_mtime_ns for n in ("a", "b", "c")}

    again = hookscope(*args, "--recursive", "--resume")
    assert again.returncode == 0, again.stderr
    assert f"5 of 7 images written to {out}, 3 of them finished by an earlier run; 2 skipped" in again.stdout
    assert {n: (out / n / "manifest.json").stat().st_mtime_ns for n in stamps} == stamps
    assert [r["status"] for r in read_summary(out)].count("done") == 5


def test_cli_batch_exits_2_when_no_image_can_be_read(tmp_path, capsys):
    from hookscope.cli import main

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.png").write_bytes(b"junk")
    assert main(["export", "--images", str(tmp_path / "in"), "--layers", "fc", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "hookscope: error: None of the 1 images could be read."
    (tmp_path / "in" / "x.png").unlink()
    (tmp_path / "in" / "sub").mkdir()
    picture(tmp_path / "in" / "sub" / "y.png", 1)
    assert main(["export", "--images", str(tmp_path / "in"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"hookscope: error: There are no image files in '{tmp_path / 'in'}' (add --recursive to look in subfolders).\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "One of --image, --images, --session or --video is required."),
        (["--image", "a.png", "--frames", "0:4"], "--frames goes with --video FILE."),
        (["--image", "a.png", "--session", "s.json"], "--image and --session cannot be used together; choose one."),
        (["--image", "a.png", "--resume"], "--resume goes with --images DIR."),
        (
            ["--session", "s.json", "--edit", "zero:conv1:1"],
            "--edit cannot be combined with --session: the session names its own.",
        ),
    ],
)
def test_cli_export_needs_exactly_one_source(args, message, capsys):
    from hookscope.cli import main

    assert main(["export", *args]) == 2
    assert capsys.readouterr().err == f"hookscope: error: {message}\n"


@pytest.mark.slow  # a whole bench run (about 40 s on two cores): the default run stays under 15 minutes
def test_bench_batch_prints_both_throughputs_and_the_ratio(capsys):
    from hookscope.cli import main

    assert main(["bench", "--batch", "--images", "4", "--layers", "conv1,layer4"]) == 0
    out = capsys.readouterr().out
    assert "modules hooked (forward+backward): conv1, layer4" in out
    assert "resnet18, 4 images, 2 modules, PNGs off" in out and "bare " in out and "ratio " in out


def test_results_are_written_inline_when_the_writer_is_behind(small_resnet, registry, folder, tmp_path, monkeypatch):
    import hookscope.core.outputs.batch as batch

    monkeypatch.setattr(batch, "writes_behind", lambda device: True)  # as when the model leaves a core free
    monkeypatch.setattr(batch, "WRITE_BEHIND", 0)  # the writer thread never takes a job
    images = [folder / "a.png", folder / "c.jpg"]
    report = run_batch(small_resnet, registry, images, tmp_path / "out", root=folder, png=False)
    assert report.done == ["a.png", "c.jpg"]
    assert all((tmp_path / "out" / name / DONE_FILE).is_file() for name in ("a", "c"))


def test_an_unwritable_output_folder_is_one_line(small_resnet, registry, folder, tmp_path):
    from hookscope.core.common.errors import HookscopeError

    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(HookscopeError, match=r"^Cannot create the output folder '.*taken': File exists\.$"):
        run_batch(small_resnet, registry, [folder / "a.png"], tmp_path / "taken", root=folder)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one torch thread: no OpenMP team to start")
def test_reader_and_writer_start_no_second_openmp_team(small_resnet, registry, folder, tmp_path, monkeypatch):
    """A torch op in the reading or writing thread would start an OpenMP thread team there, which makes the model's
    own team sleep between operations (app/hookscope/core/outputs/batch.py): the batch adds its two threads and nothing else."""

    def threads():
        return len(os.listdir("/proc/self/task"))

    seen: list[int] = []

    def count(_progress):
        seen.append(threads())

    # full-size inputs: torch runs an operation on several threads only from 32768 values on
    monkeypatch.setattr(small_resnet, "preprocess", load_model("resnet18", "none", seed=0).preprocess)
    torch.ones(1 << 16).add_(1)  # an operation on this thread: the model's own team is up
    before = threads()
    images = [folder / name for name in ("a.png", "b.JPG", "c.jpg")] + [folder / "sub" / "d.png"]
    run_batch(small_resnet, registry, images, tmp_path / "out", root=folder, png=False, progress=count)
    assert max(seen) <= before + 2, (before, seen)


def test_writes_behind_only_when_the_model_leaves_a_core_free():
    from hookscope.core.outputs.batch import writes_behind

    threads = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        assert writes_behind("cuda:0") and writes_behind("mps")
        torch.set_num_threads(cores)
        assert not writes_behind("cpu")
        if cores > 1:
            torch.set_num_threads(cores - 1)
            assert writes_behind("cpu")
    finally:
        torch.set_num_threads(threads)


def listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("behind", [True, False], ids=["written behind", "written after each run"])
def test_both_ways_of_writing_give_the_same_files(small_resnet, registry, folder, tmp_path, monkeypatch, behind):
    import hookscope.core.outputs.batch as batch

    images = [folder / "a.png", folder / "b.JPG", folder / "c.jpg"]
    monkeypatch.setattr(batch, "writes_behind", lambda device: not behind)
    run_batch(small_resnet, registry, images, tmp_path / "other", root=folder, png=True)
    monkeypatch.setattr(batch, "writes_behind", lambda device: behind)
    report = run_batch(small_resnet, registry, images, tmp_path / "out", root=folder, png=True)
    assert report.done == ["a.png", "b.JPG", "c.jpg"]
    assert listing(tmp_path / "out") == listing(tmp_path / "other")
    written = listing(tmp_path / "out")
    assert "a/activations.npz" in written and "a/png/output_gradients/layer4.png" in written
    for name in ("a", "b", "c"):
        for archive in ("activations.npz", "output_gradients.npz"):
            with (
                np.load(tmp_path / "out" / name / archive) as ours,
                np.load(tmp_path / "other" / name / archive) as theirs,
            ):
                assert ours.files == theirs.files
                for key in ours.files:
                    np.testing.assert_array_equal(ours[key], theirs[key])


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="a file size limit (POSIX) stands in for a full disk")
@pytest.mark.parametrize("behind", [True, False], ids=["written behind", "written after each run"])
def test_a_write_that_fails_is_one_line_and_leaves_no_manifest(
    small_resnet, registry, folder, tmp_path, monkeypatch, behind
):
    """A full disk, as the file size limit makes it: the first image's activations cannot be written."""
    import resource

    import hookscope.core.outputs.batch as batch
    from hookscope.core.common.errors import HookscopeError

    monkeypatch.setattr(batch, "writes_behind", lambda device: behind)
    out = tmp_path / "out"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, limit[1]))  # conv1's 64x32x32 floats are 262 kB
    try:
        with pytest.raises(HookscopeError) as raised:
            run_batch(small_resnet, registry, [folder / "a.png", folder / "c.jpg"], out, root=folder, png=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert str(raised.value) == f"Cannot write the results of 'a.png' to '{out / 'a'}': File too large."
    assert (out / "a" / "input.npy").is_file()  # the folder is marked as an output, and claims nothing
    assert not (out / "a" / "manifest.json").exists() and not (out / "a" / DONE_FILE).exists()
    assert [r["status"] for r in read_summary(out)] == ["not run", "not run"]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="plain writes here: nothing is waited for")
@pytest.mark.parametrize("behind", [True, False], ids=["written behind", "written after each run"])
def test_an_image_whose_files_do_not_reach_the_disk_claims_nothing(
    small_resnet, registry, folder, tmp_path, monkeypatch, behind
):
    """done.json is written once the image's files are on disk: an I/O error found then (fdatasync stands in for a
    disk that fails after accepting the writes) is the image's one line, and it is not claimed."""
    import errno

    import hookscope.core.outputs.batch as batch
    from hookscope.core.common.errors import HookscopeError

    def failing(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(batch, "writes_behind", lambda device: behind)
    monkeypatch.setattr(os, "fdatasync", failing)
    out = tmp_path / "out"
    with pytest.raises(HookscopeError) as raised:
        run_batch(small_resnet, registry, [folder / "a.png", folder / "c.jpg"], out, root=folder, png=False)
    assert str(raised.value) == f"Cannot write the results of 'a.png' to '{out / 'a'}': Input/output error."
    assert (out / "a" / "activations.npz").is_file() and not (out / "a" / DONE_FILE).exists()
    assert [r["status"] for r in read_summary(out)] == ["not run", "not run"]

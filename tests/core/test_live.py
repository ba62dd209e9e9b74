"""A video through the hooked model (hookscope.core.live.runner, ``hookscope live``, ``hookscope export --video``): real
torchvision ResNet-18 (random weights), real video files written by the test, real processes for the command line."""

from __future__ import annotations

import copy
import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from video_files import frame_number, truncate, write_video

from hookscope.core.live.runner import (
    GRAD_CAM,
    BackgroundRecorder,
    SeenView,
    frame_input,
    live_run,
    model_alone_text,
    source_bound_text,
)
from hookscope.core.live.video import open_video
from hookscope.core.models.catalogue import load_model

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["layer1", "layer3"]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("videos")
    clip = write_video(folder / "clip.mp4", frames=12)
    return {"mp4": clip, "avi": write_video(folder / "clip.avi", frames=12),
            "fast": write_video(folder / "fast.avi", frames=30, fps=60.0),
            "slow": write_video(folder / "slow.avi", frames=12, fps=5.0),
            "cut": truncate(write_video(folder / "whole.avi", frames=30), folder / "cut.avi")}  # fmt: skip


@pytest.fixture
def loaded(resnet18_loaded):
    return copy.deepcopy(resnet18_loaded)  # this test's hooks can never reach another's model


def hook_and_collect(registry) -> None:
    for path in LAYERS:
        registry.add(path, "forward")
        registry.add(path, "backward")


def test_every_frame_runs_through_the_hooks_and_no_hook_is_left(loaded, videos, hook_counts):
    before = hook_counts(loaded.module)
    seen = []

    def keep(frame, result):
        seen.append((frame.index, frame_number(frame.rgb), {(r.path, r.kind): r.tensor.shape for r in result.records}))
        # the captures are of this frame: its preprocessed pixels are the run's input
        torch.testing.assert_close(result.input, frame_input(loaded, frame))

    source = open_video(videos["mp4"])
    report = live_run(loaded, source, hook_and_collect, frames=5, paced=False, bare_runs=2, on_result=keep)
    assert report.ended_by == "frames" and report.frames == 5 and report.hooks == 4
    # frame 0 is read first, for the model alone and the survey; the timed frames follow it, none dropped
    assert [index for index, _, _ in seen] == [1, 2, 3, 4, 5] == [number for _, number, _ in seen]
    assert seen[0][2] == {("layer1", "forward"): (1, 64, 56, 56), ("layer1", "backward"): (1, 64, 56, 56),
                          ("layer3", "forward"): (1, 256, 14, 14), ("layer3", "backward"): (1, 256, 14, 14)}  # fmt: skip
    assert report.dropped == 0 and len(report.bare_ms) == 4 and len(report.hooked_ms) == 5
    assert report.processed_fps > 0 and report.engine_fps > 0 and report.ratio > 0
    # the model alone, before the frames and after them: each phase's own runs
    assert report.bare_before == 2
    assert report.bare_phases == (report.bare_ms[:2], report.bare_ms[2:])
    alone_before, alone_after = (1000 / np.median(phase) for phase in report.bare_phases)
    assert (
        f"({alone_before:.2f} before the frames, {alone_after:.2f} after)" in model_alone_text(*report.bare_phases)[0]
    )
    assert source.closed
    assert hook_counts(loaded.module) == before


def test_while_frames_run_what_existed_before_is_out_of_the_collectors_full_passes(loaded, videos):
    # a full pass over every object in the process is 40-120 ms with the GIL held: not in the middle of the frames
    frozen = []
    source = open_video(videos["mp4"])
    live_run(loaded, source, hook_and_collect, frames=2, paced=False, bare_runs=1,
             on_result=lambda frame, result: frozen.append(gc.get_freeze_count()))  # fmt: skip
    assert len(frozen) == 2 and min(frozen) > 1000
    assert gc.get_freeze_count() == 0  # handed back when the run ends


def test_a_slow_model_drops_frames_and_works_on_the_newest(loaded, videos, hook_counts):
    """A frame every 17 ms, a model that takes at least 100 ms: it sees every sixth frame or fewer, always the
    newest one, never a backlog."""
    before = hook_counts(loaded.module)
    slow = loaded.module.register_forward_pre_hook(lambda module, args: time.sleep(0.1))  # a deliberately slow model
    indices = []
    try:
        report = live_run(loaded, open_video(videos["fast"]), hook_and_collect, frames=100, paced=True, bare_runs=1,
                          on_result=lambda frame, result: indices.append(frame.index))  # fmt: skip
    finally:
        slow.remove()
    assert report.ended_by == "end" and report.frames == len(indices) < 10
    assert indices == sorted(set(indices)) and indices[-1] == 29  # the last frame of the file is the last one run
    assert max(b - a for a, b in zip(indices, indices[1:])) >= 5  # frames were skipped, not queued
    assert report.dropped == 29 - len(indices) and report.read == 29  # frames 1-29 played while it ran
    assert hook_counts(loaded.module) == before


def test_a_truncated_file_keeps_what_was_run_and_says_so(loaded, videos, hook_counts):
    before = hook_counts(loaded.module)
    indices = []
    report = live_run(loaded, open_video(videos["cut"]), hook_and_collect, frames=100, paced=False, bare_runs=1,
                      on_result=lambda frame, result: indices.append(frame.index))  # fmt: skip
    assert report.ended_by == "error" and "truncated" in str(report.error)
    assert indices and indices == list(range(1, indices[-1] + 1)) and report.frames == len(indices)
    assert hook_counts(loaded.module) == before


# ---- the command line, run as a user would --------------------------------------------------------------------


def hookscope(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "hookscope", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env, **kwargs)  # fmt: skip


def test_live_prints_the_processed_rate_next_to_the_models_own(videos):
    done = hookscope("live", "--video", str(videos["avi"]), "--layers", ",".join(LAYERS), "--frames", "4",
                     "--unpaced", "--bare-runs", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"resnet18 on cpu, 4 hooks (forward+backward), input 224x224; source {videos['avi']} (64x48 "
        "at 25 fps, 12 frames), read as fast as the model takes them"
    )
    assert lines[1].startswith("processed 4 frames in ") and "dropped 0" in lines[1]
    assert "model alone (forward+backward, median of 4 runs)" in lines[1] and "processed/model " in lines[1]
    assert re.search(r"fps \([0-9.]+ before the frames, [0-9.]+ after\); processed/model ", lines[1]), lines[1]
    assert "Traceback" not in done.stderr
    assert "the source delivered" not in done.stderr  # unpaced: the model never waits for the file


def test_a_source_slower_than_the_model_is_said_to_bound_the_ratio(videos):
    """A 5 fps file played at its own rate: the model (tens of frames a second) waits for every frame, and the
    command says the ratio measures the source, with the bound the source sets and the option that lifts it."""
    done = hookscope("live", "--video", str(videos["slow"]), "--layers", "layer1", "--hooks", "forward",
                     "--frames", "4", "--bare-runs", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rates = re.search(r": ([0-9.]+) fps \(source delivered .* median of 4 runs\): ([0-9.]+) fps", done.stdout)
    assert rates, done.stdout
    processed, engine = float(rates[1]), float(rates[2])
    ratio = float(re.search(r"processed/model ([0-9.]+)", done.stdout)[1])  # type: ignore[index]
    notice = [line for line in done.stderr.splitlines() if "the source delivered" in line]
    assert len(notice) == 1, done.stderr
    bound = float(re.search(r"the ratio is at most ([0-9.]+) here", notice[0])[1])  # type: ignore[index]
    assert notice[0].startswith("hookscope: the source delivered ") and notice[0].endswith(
        "; --unpaced gives frames as fast as the model takes them"
    )
    # 4 frames are 3 of the source's intervals and one run: the processed rate reads a little above the source's
    assert processed < 8 < engine and bound < 0.6 and ratio < 0.6


def test_the_source_bound_is_said_only_when_the_source_held_the_model_back():
    # a source faster than the model, or frames all due before the model was free: nothing to say
    assert source_bound_text(20.0, 60.0, 25.0, "--unpaced") is None
    assert source_bound_text(20.0, 30.0, 30.0, "--unpaced") is None
    text = source_bound_text(24.5, 25.0, 50.0, "--unpaced")
    assert text == (
        "the source delivered 25.0 frames a second, fewer than the model alone takes (50.0): the processed rate "
        "cannot pass the source's, so the ratio is at most 0.50 here and measures the source as well as the "
        "overheads; --unpaced gives frames as fast as the model takes them"
    )
    text = source_bound_text(29.0, 30.0, 29.5)  # a camera: no option to name
    assert text == (
        "the source delivered 30.0 frames a second, about as many as the model alone takes (29.5): the model waits "
        "for a frame now and then, so the ratio measures the source as well as the overheads"
    )


def test_the_model_alone_is_named_with_each_phase_and_a_drift_is_said():
    text, notice = model_alone_text([40.0, 41.0, 40.0], [40.0, 40.5, 41.0])
    assert text == "model alone (forward+backward, median of 6 runs): 24.84 fps (25.00 before the frames, 24.69 after)"
    assert notice is None  # 1% apart: nothing to say
    text, notice = model_alone_text([40.0, 40.0, 40.0], [50.0, 50.0, 50.0])
    assert text.endswith("(25.00 before the frames, 20.00 after)")
    assert notice is not None and notice.startswith("the model alone ran 25% slower after the frames than before")
    assert model_alone_text([40.0, 40.0], [])[1] is None  # stopped before the second phase: no comparison
    assert model_alone_text([40.0, 40.0], []) == ("model alone (forward+backward, median of 2 runs): 25.00 fps", None)


@pytest.mark.parametrize("which", ["notes", "cut", pytest.param("camera", marks=pytest.mark.slow)])
def test_live_bad_input_is_one_line_and_exit_2(videos, tmp_path, which):
    if which == "notes":
        notes = tmp_path / "notes.mp4"
        notes.write_text("not a video\n" * 50)
        args = ["--video", str(notes)]
    elif which == "cut":
        args = ["--video", str(videos["cut"]), "--unpaced", "--bare-runs", "1"]
    else:
        if not sys.platform.startswith("linux") or any(Path("/dev").glob("video[0-9]*")):
            pytest.skip("this machine has a camera")
        args = ["--camera", "0"]
    done = hookscope("live", *args, "--layers", "layer4", "--frames", "100")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("hookscope: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    expected = {"notes": "not a video file FFmpeg can open", "cut": "truncated", "camera": "No camera found"}[which]
    assert expected in errors[0]
    if which == "cut":  # the frames before the damage were run, and said so
        assert "processed " in done.stdout
    else:
        assert done.stderr.count("\n") == 1


def test_live_lists_no_camera_in_one_line():
    if not sys.platform.startswith("linux") or any(Path("/dev").glob("video[0-9]*")):
        pytest.skip("this machine has a camera")
    done = hookscope("live", "--list-cameras")
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.strip().startswith("hookscope: No camera found") and done.stderr.count("\n") == 1


def test_sigterm_stops_live_with_one_line(videos):
    process = subprocess.Popen(
        [sys.executable, "-m", "hookscope", "live", "--video", str(videos["avi"]), "--layers", "layer1", "--loop",
         "--frames", "100000", "--bare-runs", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        started = ""
        while not started.startswith("hookscope: playing"):  # the timed part has begun: hooks on, the file playing
            started = process.stderr.readline()
            assert started, "live ended before playing"
        assert started.startswith(f"hookscope: playing {videos['avi']} through the hooks"), started
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == [err.strip()] and err.startswith("hookscope: live stopped after ") and "(SIGTERM)" in err
    assert "processed " in out and "; memory " in out  # what it did before the signal, and the memory it took


def test_export_video_writes_the_captures_of_a_frame_range(videos, tmp_path):
    out = tmp_path / "out"
    done = hookscope("export", "--video", str(videos["mp4"]), "--frames", "2:5", "--layers", "layer1",
                     "--out", str(out), "--no-png")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["frame-000002", "frame-000003", "frame-000004"]
    manifest = json.loads((out / "frame-000003" / "manifest.json").read_text())
    assert manifest["video"] == {"file": str(videos["mp4"]), "frame": 3, "time_s": pytest.approx(0.12)}
    # the input is exactly frame 3 of the file through the model's preprocessing
    with open_video(videos["mp4"]) as source:
        source.skip_to(3)
        frame = source.read()
    assert frame_number(frame.rgb) == 3
    expected = load_model("resnet18").preprocess.to_tensor(Image.fromarray(frame.rgb)).numpy()
    np.testing.assert_array_equal(np.load(out / "frame-000003" / "input.npy"), expected)
    assert np.load(out / "frame-000003" / "activations.npz")["layer1"].shape == (1, 64, 56, 56)


def test_export_video_of_a_truncated_file_writes_what_it_holds_and_exits_2(videos, tmp_path):
    out = tmp_path / "out"
    done = hookscope(
        "export",
        "--video",
        str(videos["cut"]),
        "--frames",
        "0:",
        "--layers",
        "layer4",
        "--weights",
        "none",
        "--out",
        str(out),
        "--no-png",
    )  # fmt: skip  (no line about weights)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "truncated" in done.stderr and "Traceback" not in done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written and all((out / name / "manifest.json").is_file() for name in written)


def test_live_records_what_was_seen_as_a_video(videos, tmp_path):
    out = tmp_path / "seen.avi"  # MJPG: a second lossy encoding that still keeps the frames' numbers apart
    done = hookscope("live", "--video", str(videos["avi"]), "--layers", "layer1,layer3", "--frames", "5",
                     "--unpaced", "--bare-runs", "1", "--record", str(out), "--record-layer", "layer3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"recorded 5 pictures (0.2 s at 25 fps) of layer3 (Activations) -> {out}" in done.stdout
    with open_video(out) as seen:
        # the input as the model sees it (224x224), a 4-pixel gap, layer3's 256 channels (16x16 tiles of 14x14,
        # 1-pixel gaps: 239x239) scaled to 224 high
        assert (seen.info.width, seen.info.height, seen.info.frame_count) == (224 + 4 + 224, 224, 5)
        numbers = [frame_number(frame.rgb[:, :224]) for frame in iter(seen.read, None)]
    assert numbers == [1, 2, 3, 4, 5]  # frame 0 is the model-alone runs' and the survey's; these are the timed ones


def test_live_record_refuses_a_bad_name_before_the_model(videos, tmp_path):
    done = hookscope("live", "--video", str(videos["mp4"]), "--layers", "layer1", "--record", str(tmp_path / "a.gif"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "give a .mp4 or .avi" in done.stderr


@pytest.mark.slow  # recording is checked in the default run (test_live_records_what_was_seen_as_a_video)
def test_live_records_grad_cam_beside_the_input(videos, tmp_path):
    out = tmp_path / "cam.mp4"
    done = hookscope("live", "--video", str(videos["avi"]), "--layers", "layer2", "--hooks", "forward,tensor",
                     "--frames", "3", "--unpaced", "--bare-runs", "1", "--record", str(out), "--record-cam")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"recorded 3 pictures (0.1 s at 25 fps) of Grad-CAM of layer2 -> {out}" in done.stdout
    with open_video(out) as seen:  # the input, a 4-pixel gap, the map over the input: the same size
        assert (seen.info.width, seen.info.height, seen.info.frame_count) == (224 + 4 + 224, 224, 3)
    refused = hookscope("live", "--video", str(videos["avi"]), "--layers", "layer2", "--hooks", "act",
                        "--record", str(out), "--record-cam")  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "--record-cam needs activations and gradients: --hooks act,grad (or act,grad_out)."
    )


@pytest.mark.slow  # recording is checked in the default run
def test_a_background_recorder_draws_and_writes_off_the_callers_thread(loaded, videos, tmp_path):
    results = []

    def hooks(registry) -> None:
        registry.add("layer2", "forward")
        registry.add("layer2", "tensor")

    report = live_run(loaded, open_video(videos["avi"]), hooks, frames=3, paced=False, bare_runs=1,
                      on_result=lambda frame, result: results.append((frame.index, result)))  # fmt: skip
    assert report.frames == 3
    shown = [loaded.preprocess.to_display(result.input) for _, result in results]
    # layer2: 128 channels of 28x28, a 347x318 mosaic scaled to 224 high (244 wide); its Grad-CAM: the input size
    for view, width in ((SeenView("layer2", "forward"), 224 + 4 + 244), (SeenView("layer2", GRAD_CAM), 224 + 4 + 224)):
        out = tmp_path / f"{view.kind}.avi"
        recorder = BackgroundRecorder(out, 10.0, view)
        assert all(recorder.add(index, picture, result) for (index, result), picture in zip(results, shown))
        assert recorder.close() == 3 and recorder.problem is None and recorder.error is None
        with open_video(out) as seen:  # odd widths are padded to even ones
            assert (seen.info.width, seen.info.height) == (width + width % 2, 224)
            pictures = [frame.rgb for frame in iter(seen.read, None)]
        assert [frame_number(picture[:, :224]) for picture in pictures] == [1, 2, 3]
    # a view the run does not have (unticked meanwhile) records the input alone, and says so
    recorder = BackgroundRecorder(tmp_path / "missing.avi", 10.0, SeenView("layer4", "forward"))
    recorder.add(results[0][0], shown[0], results[0][1])
    assert recorder.close() == 1 and "has no layer4 (Activations) to record" in recorder.problem


def test_live_plays_the_whole_file_by_default_and_measures_only_when_asked(videos):
    """``hookscope live --video FILE`` is a viewer: it plays every frame of the file through the hooks and says what
    it did; no silent runs of the model alone, no ratio, no "ended after N of the frames asked for" when no count
    was asked for. ``--measure`` is the benchmark."""
    done = hookscope("live", "--video", str(videos["avi"]), "--layers", "layer1", "--unpaced")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the whole file: frame 0 runs first, untimed (it surveys the model), then the other 11 are timed
    assert lines[1].startswith("processed 11 frames in ") and "dropped 0" in lines[1]
    assert "model alone" not in done.stdout and "processed/model" not in done.stdout
    assert "frames asked for" not in done.stderr and "Traceback" not in done.stderr
    measured = hookscope("live", "--video", str(videos["avi"]), "--layers", "layer1", "--unpaced", "--frames", "3",
                         "--measure")  # fmt: skip
    assert measured.returncode == 0, measured.stderr
    assert "model alone (forward+backward, median of 10 runs)" in measured.stdout  # 5 before and 5 after
    assert "processed/model " in measured.stdout

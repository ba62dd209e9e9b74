"""Live built from a workspace and a fake host: a real video file (written by the test) plays through the
workspace's run path (ResNet-18, random weights), the newest frame winning; Space freezes and resumes; the end of a
file, a truncated file, a file that is not a video and "no camera" leave the results on screen."""

from __future__ import annotations

import gc
import glob
import sys
import time

import numpy as np
import pytest
import torch
from conftest import no_run_asked
from PySide6.QtGui import QKeySequence, QShortcut
from video_files import frame_number, truncate, write_video

from hookscope.core.live.video import open_video
from hookscope.ui.features.live import LiveFeature

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def feature(workspace, host):
    live = LiveFeature(workspace, host)
    yield live
    live.shutdown()


@pytest.fixture
def shown(workspace):
    """The frames whose runs came on screen, in order: (frame index from the name, index from the pixels)."""
    frames = []

    def keep(outcome):
        if " · frame " in outcome.image.name:
            rgb = outcome.result.input  # the run's own input: check it is that frame's pixels
            frames.append((int(outcome.image.name.rsplit(" ", 1)[1]), outcome.image, rgb))

    workspace.run_applied.connect(keep)
    return frames


def test_it_contributes_file_menu_entries_and_a_drop_handler(feature, host, tmp_path):
    ids = (
        "file.open_video",
        "file.open_camera",
        "file.live_freeze",
        "file.live_next_frame",
        "file.live_previous_frame",
        "file.live_record",
        "file.live_stop_recording",
        "file.live_stop",
    )
    assert [host.actions[i].title for i in ids] == [
        "Open video…",
        "Open camera…",
        "Freeze / resume the video (Space)",
        "Next frame of the video (.)",
        "Previous frame of the video (,)",
        "Record what is seen…",
        "Stop recording",
        "Close the video or camera",
    ]
    assert host.input_rows == [feature.bar] and not feature.bar.isVisibleTo(host.parent)  # shown for a video only
    assert all(host.actions[i].menu == "File" for i in ("file.open_video", "file.open_camera"))
    assert host.drop_handlers == [feature._on_drop]
    assert feature._on_drop([str(tmp_path / "a.png"), str(tmp_path / "b.txt")]) == [
        str(tmp_path / "a.png"),
        str(tmp_path / "b.txt"),
    ]
    # no Space shortcut while nothing plays: the module tree keeps its own Space
    assert not host.parent.findChildren(QShortcut)


def test_a_dropped_video_plays_through_the_run_path_newest_frame_winning(
    feature, workspace, host, qtbot, shown, tmp_path
):
    clip = write_video(tmp_path / "clip.mp4", frames=30, fps=30.0)  # a frame every 33 ms: faster than the model
    assert feature._on_drop([str(clip)]) == []
    assert feature.playing
    keys = host.parent.findChildren(QShortcut)
    assert [k.key() for k in keys if k.isEnabled()] == [QKeySequence("Space"), QKeySequence("."), QKeySequence(",")]
    assert feature.bar.isVisibleTo(host.parent) and feature.bar.slider.maximum() == 29
    qtbot.waitUntil(lambda: not feature.playing, timeout=RUN_TIMEOUT_MS)
    indices = [index for index, _, _ in shown]
    assert indices and indices == sorted(set(indices))  # never an older frame, never one twice
    assert len(indices) < 30 and max(b - a for a, b in zip([0, *indices], indices)) > 1  # frames were dropped
    assert host.statuses[-1].startswith(f"End of {clip}: {len(indices)} frames shown, ")
    # what the panels show is the frame: the run's input is that frame's pixels through the model's preprocessing
    index, source, run_input = shown[-1]
    assert frame_number(np.asarray(source.image)) == index
    torch.testing.assert_close(run_input, workspace.loaded.preprocess.to_tensor(source.image))
    assert workspace.image == source and workspace.last.image == source  # the last frame stays, as an image


def test_the_next_frame_is_asked_for_when_the_model_is_done_not_when_the_run_path_frees(
    feature, workspace, qtbot, shown, tmp_path
):
    """Each frame's run asks the reader for the next frame as soon as the model's passes are done, so that it is
    decoded while the pictures are made: when the run comes on screen, a frame is waiting or being decoded already
    (without the ask, the reader of a paced file sleeps until the run path frees)."""
    clip = write_video(tmp_path / "clip.avi", frames=30, fps=30.0)  # 1 s: a few frames even on a slow machine
    seen: list[tuple[bool, bool]] = []

    def on_screen(outcome) -> None:
        if feature.stream is not None and " · frame " in outcome.image.name:
            seen.append((feature.stream.pending, feature.stream.ended))

    workspace.run_applied.connect(on_screen)
    feature.open_video(clip)
    qtbot.waitUntil(lambda: not feature.playing, timeout=RUN_TIMEOUT_MS)
    assert len(seen) >= 3 and len(shown) == len(seen)
    assert all(pending or ended for pending, ended in seen), seen  # at the file's end there is nothing to ask for


def test_space_freezes_the_video_where_it_is_dot_steps_and_space_resumes_from_there(
    feature, workspace, host, qtbot, shown, tmp_path
):
    clip = write_video(tmp_path / "clip.avi", frames=32, fps=4.0)  # 8 s: a loaded machine's first runs are slow
    feature.open_video(clip)
    qtbot.waitUntil(lambda: len(shown) >= 1, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)
    assert feature.playing, (host.errors, host.statuses)
    space, dot, _comma = feature._keys
    space.activated.emit()
    assert feature.frozen and feature.stream.paused
    assert host.statuses[-1].endswith("frozen on this frame ('.' steps to the next frame, Space resumes).")
    frozen_on = len(shown)
    with no_run_asked(workspace):  # no frame asked for while frozen
        qtbot.wait(2000)  # the wait is what is tested: 8 frames' time, and the file waits
    assert len(shown) == frozen_on  # nothing new on screen while frozen
    # frozen, the frame is an image like any other: a tick runs on it again
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS):
        workspace.tick("layer2", "forward")
    assert workspace.last.image == shown[-1][1] and len(shown) == frozen_on + 1
    for _ in range(2):  # '.' shows the next frame, still frozen
        count = len(shown)
        dot.activated.emit()
        qtbot.waitUntil(lambda c=count: len(shown) > c, timeout=RUN_TIMEOUT_MS)
        qtbot.waitUntil(lambda: not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)
        assert feature.frozen and len(shown) == count + 1
    first_step, second_step = shown[-2][0], shown[-1][0]
    assert first_step > shown[frozen_on - 1][0] and second_step == first_step + 1  # one frame at a time
    space.activated.emit()
    assert not feature.frozen and not feature.stream.paused
    qtbot.waitUntil(lambda: len(shown) > frozen_on + 3, timeout=RUN_TIMEOUT_MS)
    # resumed from where it was: the file waited (played on, it would be 8+ frames past the frozen one by now)
    assert second_step < shown[frozen_on + 3][0] <= second_step + 4
    feature.stop()
    assert not feature.playing and not any(k.isEnabled() for k in host.parent.findChildren(QShortcut))


def test_the_slider_and_comma_go_to_any_frame_and_space_plays_on_from_there(
    feature, workspace, host, qtbot, shown, tmp_path
):
    clip = write_video(tmp_path / "clip.mp4", frames=30, fps=2.0)  # 15 s: it never gets far by itself
    feature.open_video(clip)
    qtbot.waitUntil(lambda: len(shown) >= 1, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)

    def then_shown(action) -> int:
        count = len(shown)
        action()
        qtbot.waitUntil(lambda: len(shown) > count, timeout=RUN_TIMEOUT_MS)
        qtbot.waitUntil(lambda: not workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)
        index, source, run_input = shown[-1]
        assert frame_number(np.asarray(source.image)) == index  # the pixels on screen are that frame's
        return index

    assert then_shown(lambda: feature.bar.slider.setValue(20)) == 20  # a drag of the slider
    assert feature.frozen and feature.bar.label.text() == "frame 20 / 29"
    assert then_shown(feature._keys[2].activated.emit) == 19  # ','
    assert feature.bar.slider.value() == 19
    assert then_shown(feature._keys[0].activated.emit) == 20  # Space: on from there, not from frame 1 or 2
    assert not feature.frozen


def test_a_truncated_video_shows_its_frames_then_one_error_and_the_results_stay(
    feature, workspace, host, qtbot, shown, tmp_path
):
    cut = truncate(write_video(tmp_path / "whole.avi", frames=30, fps=100.0), tmp_path / "cut.avi")
    feature.open_video(cut)
    qtbot.waitUntil(lambda: not feature.playing, timeout=RUN_TIMEOUT_MS)
    assert len(host.errors) == 1 and "truncated" in host.errors[0] and "\n" not in host.errors[0]
    assert shown and workspace.last.image == shown[-1][1]  # the last frame's results stay on screen


def test_a_file_that_is_not_a_video_is_one_error_and_nothing_changes(feature, workspace, host, tmp_path):
    before = workspace.last
    notes = tmp_path / "notes.mp4"
    notes.write_text("not a video\n" * 40)
    assert not feature.open_video(notes)
    assert host.errors == [f"Cannot read '{notes}': it is not a video file FFmpeg can open (not a video, truncated "
                           "before its index, or damaged)."]  # fmt: skip
    assert not feature.playing and workspace.last is before


@pytest.mark.skipif(not sys.platform.startswith("linux") or bool(glob.glob("/dev/video[0-9]*")),
                    reason="this machine has a camera")  # fmt: skip
def test_open_camera_on_a_machine_without_one_is_one_line(feature, host):
    host.trigger("file.open_camera")
    assert host.errors == ["No camera found: there is no /dev/video* device. Open a video file instead "
                           "(File > Open video…)."]  # fmt: skip
    assert not feature.playing


def test_closing_stops_the_reader_thread(feature, tmp_path):
    feature.open_video(write_video(tmp_path / "clip.avi", frames=30, fps=10.0))
    stream = feature.stream
    started = time.monotonic()
    feature.shutdown()
    assert time.monotonic() - started < 1.0
    assert not stream._thread.is_alive() and stream.source.closed and not feature.playing


def test_while_a_video_plays_what_existed_before_is_out_of_the_collectors_full_passes(feature, tmp_path):
    # A full pass over every object in the process held the GUI thread for 40-120 ms in the middle of playback.
    assert gc.get_freeze_count() == 0
    feature.open_video(write_video(tmp_path / "clip.avi", frames=30, fps=10.0))
    assert gc.get_freeze_count() > 1000  # the model, Qt's wrappers, torch: set aside while it plays
    feature.stop()
    assert gc.get_freeze_count() == 0  # handed back to the collector when it stops


def test_in_the_window_a_dropped_video_plays_and_closing_the_window_stops_it(window, qtbot, tmp_path):
    clip = write_video(tmp_path / "clip.avi", frames=30, fps=3.0)  # 10 s: still playing when the window closes
    live = window.features["live"]
    assert window.menus.actions["file.open_video"].text() == "Open video…"
    window.open_files([str(clip)])  # as a drop of the file does
    assert live.playing
    stream = live.stream
    qtbot.waitUntil(lambda: window.workspace.image.name.startswith("clip.avi · frame "), timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not window.workspace.scheduler.busy, timeout=RUN_TIMEOUT_MS)
    assert "clip.avi · frame " in window.windowTitle()
    # the status bar keeps the rates from frame to frame (the window's own line about each run does not replace it)
    qtbot.waitUntil(lambda: ", processed " in window.statusBar().currentMessage(), timeout=RUN_TIMEOUT_MS)
    shown = live.shown
    qtbot.waitUntil(lambda: live.shown >= shown + 2, timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(
        lambda: (
            window.statusBar().currentMessage().startswith(f"{clip}: source ")
            and " frames dropped" in window.statusBar().currentMessage()
        ),
        timeout=RUN_TIMEOUT_MS,
    )
    window.close()
    assert not live.playing and not stream._thread.is_alive() and stream.source.closed


def test_recording_writes_the_frames_as_they_came_on_screen_with_grad_cam_beside_them(
    feature, workspace, host, qtbot, shown, tmp_path
):
    host.trigger("file.live_record")  # nothing plays: nothing to record
    assert host.statuses[-1].startswith("Open a video or camera first") and feature.recorder is None
    workspace.set_ticked([("layer2", "forward"), ("layer2", "tensor")], True)  # Act and Grad of layer2
    qtbot.waitUntil(lambda: not workspace.scheduler.busy and bool(workspace.last.result.of_kind("tensor")),
                    timeout=RUN_TIMEOUT_MS)  # fmt: skip
    feature.open_video(write_video(tmp_path / "clip.avi", frames=16, fps=8.0))
    names = [view.describe() for view in feature.record_choices()]
    # every ticked panel of the run on screen, then the Grad-CAM of every module with both Act and Grad
    assert {"layer2 (Activations)", "layer2 (Gradients)", "Grad-CAM of layer2"} <= set(names)
    cams = [name.startswith("Grad-CAM of ") for name in names]
    assert cams == sorted(cams) and len(names) == len(workspace.ticked_pairs()) + sum(cams)
    asked = []
    feature.ask_record_view = lambda choices: asked.append(choices) or choices.index("Grad-CAM of layer2")
    feature.ask_record_path = lambda: str(tmp_path / "seen.avi")
    host.trigger("file.live_record")
    assert asked == [names] and feature.recorder is not None
    recorded_from = len(shown)
    qtbot.waitUntil(lambda: not feature.playing, timeout=RUN_TIMEOUT_MS)  # the end of the file closes it
    assert feature.recorder is None
    on_screen = [index for index, _, _ in shown[recorded_from:]]
    assert on_screen, host.statuses
    assert any(f"Recorded {on_screen[-1] - on_screen[0] + 1} pictures" in line and f"of Grad-CAM of layer2 to "
               f"{tmp_path / 'seen.avi'}" in line for line in host.statuses), host.statuses  # fmt: skip
    with open_video(tmp_path / "seen.avi") as seen:
        # the input as the model sees it, 4 pixels, the Grad-CAM over it: 452 wide, at the video's own rate
        assert (seen.info.width, seen.info.height, seen.info.fps) == (452, 224, 8.0)
        numbers = [frame_number(frame.rgb[:, :224]) for frame in iter(seen.read, None)]
    # each run that came on screen (the first may have been asked for before the recording began), held until the
    # next one came, as the screen held it
    assert sorted(set(numbers)) == numbers[:1] + [n for n in on_screen if n > numbers[0]]
    assert len(numbers) == on_screen[-1] - numbers[0] + 1 and numbers == sorted(numbers)
    assert not host.errors


def test_a_recording_to_a_bad_name_is_one_error_and_the_video_plays_on(feature, host, tmp_path):
    feature.open_video(write_video(tmp_path / "clip.avi", frames=10, fps=5.0))
    from hookscope.core.live.runner import SeenView

    assert not feature.start_recording(tmp_path / "seen.gif", SeenView("layer1.0.conv1", "forward"))
    assert host.errors == [f"Cannot record to '{tmp_path / 'seen.gif'}': give a .mp4 or .avi file name."]
    assert feature.playing and feature.recorder is None


def test_a_frame_starts_its_run_at_once_and_ticks_still_gather(workspace, qtbot):
    from PIL import Image

    from hookscope.ui.state.requests import ImageSource
    from hookscope.ui.state.scheduler import RUN_DEBOUNCE_MS

    scheduler = workspace.scheduler
    qtbot.waitUntil(lambda: not scheduler.busy, timeout=RUN_TIMEOUT_MS)
    frame = ImageSource("clip.avi · frame 7", None, Image.new("RGB", (64, 48), (255, 56, 0)))
    with qtbot.waitSignal(workspace.run_applied, timeout=RUN_TIMEOUT_MS) as applied:
        workspace.request_image(frame, debounce=False)  # as LiveFeature asks for a frame
        # the run is on its way before the event loop turns again: no 50 ms pause, no paint before it
        assert scheduler.runner.running_job is not None and not scheduler._timer.isActive()
    assert applied.args[0].image == frame
    workspace.tick("layer2", "forward")  # a click in the tree still waits for the rest of a burst
    assert scheduler._timer.isActive() and scheduler._timer.interval() == RUN_DEBOUNCE_MS
    job = scheduler.runner.running_job  # the frame's job may still be finishing; the tick's has not started
    assert job is None or job.generation < scheduler.generation
    qtbot.waitUntil(lambda: not scheduler.busy, timeout=RUN_TIMEOUT_MS)

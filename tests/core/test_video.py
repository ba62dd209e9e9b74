"""The video reader (hookscope.core.live.video) on real files written by the test: frames, their order and colours, the newest
frame winning on a slow consumer, the end of a file, files that are not videos or are truncated, and the camera
path on a machine without a camera."""

from __future__ import annotations

import argparse
import glob
import sys
import time

import numpy as np
import pytest
from PIL import Image
from video_files import frame_number, truncate, write_video

from hookscope.cli.export import frame_range
from hookscope.core.live.video import LatestFrame, VideoError, list_cameras, no_camera_line, open_camera, open_video

NO_CAMERA = sys.platform.startswith("linux") and not glob.glob("/dev/video[0-9]*")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("videos")
    return {
        "avi": write_video(folder / "clip.avi"),
        "mp4": write_video(folder / "clip.mp4"),
        "fast": write_video(folder / "fast.avi", frames=32, fps=50.0),
    }


@pytest.mark.parametrize("kind", ["avi", "mp4"])
def test_every_frame_in_order_as_rgb_with_index_and_time(videos, kind):
    with open_video(videos[kind]) as source:
        assert (source.info.kind, source.info.width, source.info.height) == ("video", 64, 48)
        assert source.info.fps == pytest.approx(25.0) and source.info.frame_count == 30
        frames = []
        while (frame := source.read()) is not None:
            frames.append(frame)
    assert [f.index for f in frames] == list(range(30))
    assert [frame_number(f.rgb) for f in frames] == list(range(30))  # the decoded pixels are those frames
    assert [f.time_s for f in frames] == pytest.approx([i / 25 for i in range(30)])
    first = frames[5].rgb
    assert first.shape == (48, 64, 3) and first.dtype == np.uint8 and first.flags.c_contiguous
    # RGB, not OpenCV's BGR: the file's frames are red (and green by index), with no blue
    assert first[..., 0].mean() > 240 and first[..., 2].mean() < 15


def test_a_file_is_decoded_on_one_thread_beside_the_model(videos):
    """FFmpeg's frame threads would hand every frame over between threads while the model has the cores."""
    import cv2

    with open_video(videos["mp4"]) as source:
        assert source._capture.get(cv2.CAP_PROP_N_THREADS) == 1
        assert source.read() is not None


def test_a_slow_consumer_gets_the_newest_frame_and_the_others_are_dropped_not_queued(videos):
    # 32 frames at 50 fps: a frame every 20 ms, played at its own rate as a camera gives them
    with LatestFrame(open_video(videos["fast"]), paced=True) as stream:
        first = stream.take(timeout=5)
        time.sleep(0.3)  # a model busy for 15 frames' time
        second = stream.take(timeout=5)
        taken = [first, second]
        while (frame := stream.take(timeout=5)) is not None:
            taken.append(frame)
            time.sleep(0.1)
        assert stream.ended
    # Queued, the second frame would be frame 1; the newest wins, so it is about 15 frames on (a loaded machine
    # may read late, never early: at least 6 frames on is far from any queue).
    assert second.index >= first.index + 6
    assert frame_number(second.rgb) == second.index
    indices = [f.index for f in taken]
    assert indices == sorted(set(indices))  # never an older frame, never one twice
    assert stream.read_count == 32 and stream.taken == len(taken) < 14
    assert stream.dropped == stream.read_count - stream.taken  # every frame not taken was dropped, none waits
    assert stream.source_fps == pytest.approx(50, rel=0.3)


def test_a_paced_file_is_read_on_demand_so_the_reader_sleeps_while_the_model_runs(videos):
    # Nothing is decoded while nobody asks (a model running): the reader woke 30 times a second beside the model's
    # threads before, which cost the model 2-3% of its rate on two cores. Asked again, it passes over the frames
    # that came due meanwhile (counted read and dropped) and gives the newest.
    with LatestFrame(open_video(videos["fast"]), paced=True) as stream:  # 32 frames at 50 fps
        first = stream.take(timeout=5)
        decoded = stream.source.frames_read
        time.sleep(0.3)  # 15 frames' time, nobody asking
        assert stream.source.frames_read == decoded and stream.read_count == 1
        newest = stream.take(timeout=5)
        assert newest.index >= first.index + 6 and frame_number(newest.rgb) == newest.index
        assert stream.read_count == newest.index + 1 and stream.dropped == newest.index - first.index - 1


def test_asked_for_a_paced_file_decodes_its_newest_frame_before_it_is_taken(videos):
    # The window asks when a frame's model passes are done, so that the next frame is decoded while the pictures
    # are made: take then finds it waiting. Asking while a frame waits reads nothing more.
    with LatestFrame(open_video(videos["fast"]), paced=True) as stream:  # 32 frames at 50 fps
        first = stream.take(timeout=5)
        time.sleep(0.1)  # five frames' time, nobody asking: nothing decoded
        assert not stream.pending and stream.read_count == 1
        stream.ask()
        assert stream.pending
        deadline = time.monotonic() + 5
        while not stream.holds_frame and time.monotonic() < deadline:
            time.sleep(0.002)
        read = stream.read_count
        assert stream.holds_frame and read >= 5  # the frames due meanwhile passed over, the newest put
        stream.ask()
        time.sleep(0.1)
        assert stream.read_count == read and stream.source.frames_read == read  # a frame waits: nothing more read
        newest = stream.take(timeout=0)
        assert newest is not None and newest.index == read - 1 > first.index + 3
        assert frame_number(newest.rgb) == newest.index and stream.dropped == newest.index - first.index - 1


def test_a_file_plays_on_from_the_frame_it_is_at_without_waiting_a_frame(videos):
    # hookscope live reads frame 0 itself (to time the model alone) before the stream starts: frame 1 is then due at
    # once. Timed from the stream's start, it waited a frame's time (40 ms at 25 fps), a frame the timed part lost.
    source = open_video(videos["avi"])  # 25 fps
    assert source.read().index == 0
    started = time.monotonic()
    with LatestFrame(source, paced=True) as stream:
        first = stream.take(timeout=5)
        waited = time.monotonic() - started
        assert first.index == 1 and frame_number(first.rgb) == 1
        assert waited < 0.03, f"frame 1 came after {waited * 1000:.0f} ms"
        time.sleep(0.2)  # five frames' time: the spacing after it is the file's own
        assert stream.take(timeout=5).index in (5, 6, 7)


def test_lossless_reading_gives_every_frame_to_a_slow_consumer(videos):
    with LatestFrame(open_video(videos["avi"]), paced=False, lossless=True) as stream:
        indices = []
        for frame in stream:
            indices.append(frame.index)
            if len(indices) < 4:
                time.sleep(0.05)
    assert indices == list(range(30)) and stream.dropped == 0


def test_the_end_of_a_file_ends_the_stream_and_closes_the_source(videos):
    source = open_video(videos["mp4"])
    stream = LatestFrame(source, paced=False, lossless=True)
    assert len(list(stream)) == 30
    assert stream.take(timeout=1) is None and stream.ended
    stream.close()
    assert source.closed and not stream._thread.is_alive()


def test_closing_stops_the_reader_of_a_file_still_playing(videos):
    stream = LatestFrame(open_video(videos["avi"]), paced=True)  # 1.2 s of frames
    assert stream.take(timeout=5) is not None
    started = time.monotonic()
    stream.close()
    assert time.monotonic() - started < 1.0 and not stream._thread.is_alive() and stream.source.closed


def test_a_loop_plays_the_file_again(videos):
    with LatestFrame(open_video(videos["avi"]), paced=False, lossless=True, loop=True) as stream:
        indices = [stream.take(timeout=5).index for _ in range(35)]
    assert indices == list(range(30)) + list(range(5))


def test_a_truncated_file_gives_its_frames_then_one_clear_line(videos, tmp_path):
    cut = truncate(videos["avi"], tmp_path / "cut.avi")
    with pytest.raises(VideoError) as raised:
        with open_video(cut) as source:
            good = []
            while (frame := source.read()) is not None:
                good.append(frame_number(frame.rgb))
    message = str(raised.value)
    assert "truncated" in message and "cut.avi" in message and "\n" not in message
    assert raised.value.path == str(cut)
    assert 0 < len(good) < 30 and good == list(range(len(good)))
    # through the reader thread: the frames it holds first, then the same error, at the consumer
    stream = LatestFrame(open_video(cut), paced=False, lossless=True)
    taken = []
    with pytest.raises(VideoError, match="truncated"):
        for frame in stream:
            taken.append(frame.index)
    assert taken == list(range(len(good)))
    stream.close()


def test_a_truncated_mp4_without_its_index_is_refused_on_opening(videos, tmp_path):
    cut = truncate(videos["mp4"], tmp_path / "cut.mp4")  # mp4v's index (moov) is written at the end
    with pytest.raises(VideoError, match="not a video file FFmpeg can open") as raised:
        open_video(cut)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("notes.mp4", b"these are notes, not a video\n" * 40, "not a video file FFmpeg can open"),
        ("empty.avi", b"", "the file is empty"),
        ("missing.mp4", None, "does not exist"),
    ],
)
def test_a_file_that_is_not_a_video_is_one_clear_line(tmp_path, name, content, expected):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(VideoError, match=expected) as raised:
        open_video(path)
    assert "\n" not in str(raised.value) and name in str(raised.value)


def test_a_picture_is_not_a_video(tmp_path):
    picture = tmp_path / "still.png"
    Image.new("RGB", (32, 32), "red").save(picture)
    with pytest.raises(VideoError, match="is a picture, not a video"):
        open_video(picture)
    with pytest.raises(VideoError, match="folder"):
        open_video(tmp_path)


@pytest.mark.skipif(not NO_CAMERA, reason="this machine has a camera (/dev/video*)")
def test_no_camera_on_this_machine_is_one_clear_line():
    assert list_cameras() == []
    line = no_camera_line()
    assert line.startswith("No camera found") and "/dev/video" in line and "\n" not in line
    with pytest.raises(VideoError) as raised:
        open_camera(0)
    assert str(raised.value) == line


def test_frame_ranges_are_python_slices():
    assert frame_range("3:7") == (3, 7)
    assert frame_range("5:") == (5, None)
    assert frame_range(":4") == (0, 4)
    assert frame_range("12") == (12, 13)
    for bad in ("7:3", "-1:4", "a:b", "4:4"):
        with pytest.raises(argparse.ArgumentTypeError):
            frame_range(bad)


def test_pause_holds_a_file_step_reads_one_frame_and_resume_plays_on_from_there(videos):
    with LatestFrame(open_video(videos["fast"]), paced=True) as stream:  # 32 frames at 50 fps
        first = stream.take(timeout=5)
        stream.pause()
        time.sleep(0.05)  # a frame already read may still be put; then nothing
        held = stream.read_count
        time.sleep(0.3)  # 15 frames' time
        assert stream.read_count == held and stream.paused
        newest = stream.take(timeout=0) or first
        stream.step()
        stepped = stream.take(timeout=5)
        assert stepped.index == newest.index + 1 and frame_number(stepped.rgb) == stepped.index
        stream.step()
        assert stream.take(timeout=5).index == stepped.index + 1  # the next one again, not the newest in time
        time.sleep(0.2)
        assert stream.read_count == held + 2  # still holding after the steps
        stream.resume()
        resumed_at = time.monotonic()
        after = stream.take(timeout=5)
        assert after.index == stepped.index + 2  # on from where it was, not 25 frames later
        time.sleep(0.1)  # 5 frames' time: played at the file's spacing, not all at once
        assert stream.read_count - (held + 3) <= 5 + int((time.monotonic() - resumed_at - 0.1) * 50) + 2


def test_a_recording_holds_each_picture_until_the_next_one_came(tmp_path):
    from hookscope.core.live.video import VideoRecorder

    red, blue = np.zeros((48, 63, 3), np.uint8), np.zeros((48, 63, 3), np.uint8)  # odd width: padded to even
    red[..., 0], blue[..., 2] = 255, 255
    with VideoRecorder(tmp_path / "seen.avi", fps=10) as recorder:
        recorder.add(0, red)
        recorder.add(3, blue)  # frames 1 and 2 were dropped: the screen showed red until frame 3
    assert recorder.frames_written == 4
    with open_video(tmp_path / "seen.avi") as seen:
        assert (seen.info.width, seen.info.height, seen.info.fps) == (64, 48, 10)
        colours = [int(np.argmax(frame.rgb[:, :60].reshape(-1, 3).mean(axis=0))) for frame in iter(seen.read, None)]
    assert colours == [0, 0, 0, 2]  # red, red, red, blue
    green = np.zeros_like(red)
    green[..., 1] = 255
    with VideoRecorder(tmp_path / "again.avi", fps=10) as recorder:
        recorder.add(5, red)
        recorder.add(5, blue)  # the frozen frame run again (an edit): what is seen now replaces it
        recorder.add(6, green)
        recorder.add(4, red)  # a step back: the picture before follows after one frame
    with open_video(tmp_path / "again.avi") as seen:
        colours = [int(np.argmax(frame.rgb[:, :60].reshape(-1, 3).mean(axis=0))) for frame in iter(seen.read, None)]
    assert colours == [2, 1, 0]
    for bad, words in (("seen.gif", "give a .mp4 or .avi"), ("no/such/folder/seen.mp4", "does not exist")):
        with pytest.raises(VideoError, match=words):
            VideoRecorder(tmp_path / bad, fps=10)


@pytest.mark.parametrize("kind", ["avi", "mp4"])
def test_a_paused_file_seeks_to_any_frame_exactly_and_plays_on_from_there(videos, kind):
    with LatestFrame(open_video(videos[kind]), paced=True) as stream:  # 30 frames at 25 fps
        stream.take(timeout=5)
        stream.pause()
        for wanted in (20, 3, 29, 0, 13):
            stream.seek(wanted)
            frame = stream.take(timeout=5)
            assert frame.index == wanted and frame_number(frame.rgb) == wanted  # the pixels are that frame's
            assert frame.time_s == pytest.approx(wanted / 25)
        stream.seek(99)  # past the end: the last frame
        assert stream.take(timeout=5).index == 29
        stream.seek(7)
        assert stream.take(timeout=5).index == 7
        stream.step()
        assert stream.take(timeout=5).index == 8
        stream.resume()
        assert [stream.take(timeout=5).index for _ in range(3)] == [9, 10, 11]

"""Drop-behind writing (app/hookscope/core/outputs/drop_behind.py): the same bytes as plain writes, on disk before they are claimed, and
never more than its limit waiting."""

import errno
import os
import zipfile

import numpy as np
import pytest

from hookscope.core.outputs.drop_behind import SUPPORTED, DropBehind
from hookscope.core.outputs.export import save_array, save_npz

needs_drop_behind = pytest.mark.skipif(not SUPPORTED, reason="no os.posix_fadvise/os.fdatasync here: plain writes")


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "conv1": rng.standard_normal((1, 64, 56, 56), dtype=np.float32),
        "layer4/leaf": rng.standard_normal((1, 512, 7, 7), dtype=np.float32),
        "fc": np.array([[np.nan, np.inf, -0.0, 1.5]], dtype=np.float32),
        "strided": rng.standard_normal((8, 6), dtype=np.float64)[:, ::2],  # not contiguous: numpy's own path
    }


@pytest.mark.parametrize("enabled", [True, False], ids=["drop-behind", "plain"])
def test_files_are_the_bytes_plain_writes_give(tmp_path, enabled):
    values = arrays()
    with DropBehind(enabled=enabled) as files:
        save_array(files, tmp_path / "ours.npy", values["conv1"])
        with files.create(tmp_path / "ours.npz") as stream:
            save_npz(stream, values)
    np.save(tmp_path / "plain.npy", values["conv1"])
    assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "plain.npy").read_bytes()
    with zipfile.ZipFile(tmp_path / "ours.npz") as archive:
        assert archive.testzip() is None  # every member's CRC matches its bytes
    with np.load(tmp_path / "ours.npz") as loaded:
        assert loaded.files == list(values)
        for key, value in values.items():
            np.testing.assert_array_equal(loaded[key], value)
            assert loaded[key].dtype == value.dtype


@needs_drop_behind
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc (Linux)")
def test_settle_waits_for_every_file_and_lets_go_of_it(tmp_path):
    before = open_descriptors()
    files = DropBehind()
    payload = np.arange(300_000, dtype=np.float32)
    for name in ("a.npy", "b.npy", "c.npy"):
        save_array(files, tmp_path / name, payload)
    assert files.pending_bytes == 3 * (tmp_path / "a.npy").stat().st_size
    assert open_descriptors() == before + 3  # kept until the files are on disk
    files.settle()
    assert files.pending_bytes == 0 and open_descriptors() == before
    for name in ("a.npy", "b.npy", "c.npy"):
        np.testing.assert_array_equal(np.load(tmp_path / name), payload)


@needs_drop_behind
def test_no_more_than_the_limit_waits(tmp_path):
    """A slow disk holds up the writer instead of filling memory: past the limit, the oldest files are waited for."""
    payload = np.zeros(100_000, dtype=np.float32)  # 400 kB and a header
    size = 400_000 + 128
    files = DropBehind(limit=1_000_000)
    seen = []
    for index in range(6):
        save_array(files, tmp_path / f"{index}.npy", payload)
        seen.append(files.pending_bytes)
    assert seen == [size, 2 * size, 2 * size, 2 * size, 2 * size, 2 * size]
    one = DropBehind(limit=1)  # one file bigger than the limit is still written, alone
    save_array(one, tmp_path / "big.npy", payload)
    assert one.pending_bytes == size
    save_array(one, tmp_path / "next.npy", payload)
    assert one.pending_bytes == size
    files.settle()
    one.settle()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc (Linux)")
def test_a_failed_write_is_not_kept_and_abandon_lets_go(tmp_path):
    before = open_descriptors()
    files = DropBehind()
    save_array(files, tmp_path / "written.npy", np.ones(10))
    with pytest.raises(RuntimeError), files.create(tmp_path / "half.npy") as stream:
        stream.write(b"half")
        raise RuntimeError("the writer failed half way")
    assert files.pending_bytes == (tmp_path / "written.npy").stat().st_size * files.enabled
    files.abandon()
    assert files.pending_bytes == 0 and open_descriptors() == before


@needs_drop_behind
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc (Linux)")
def test_a_file_that_does_not_reach_the_disk_is_raised_and_every_descriptor_closed(tmp_path, monkeypatch):
    """An I/O error found by fdatasync (a disk that fails after the write was accepted; it cannot be made to fail
    here, so fdatasync stands in for it)."""
    before = open_descriptors()
    files = DropBehind()
    for name in ("a.npy", "b.npy"):
        save_array(files, tmp_path / name, np.ones(10))

    def failing(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        files.settle()
    assert files.pending_bytes == 0 and open_descriptors() == before

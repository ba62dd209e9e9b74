"""A video's frames written one folder each (``export --video``): every frame folder whole or not at all.

A frame is written into a hidden folder beside its place (``OUT/.frame-000011.partial``) and renamed to its name
(``OUT/frame-000011``) only once its manifest is written, as the scan's checkpoint is replaced whole; a frame
stopped half way (Ctrl-C, SIGTERM, a full disk) leaves nothing under its name. A run over an earlier one's folder
replaces the frames it writes, an earlier version's half-written ones included, and removes what a killed run left
hidden. A full disk is one line naming the disk and the frames that are kept (:class:`DiskFull`).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from hookscope.core.common.errors import HookscopeError

PARTIAL = ".partial"  # a frame being written
OLD = ".old"  # an earlier run's frame, for the moment the new one takes its place
NEARLY_FULL_BYTES = 1 << 20  # a write that failed with no reason given, on a disk with less free: the disk is full


class DiskFull(HookscopeError):
    """The disk filled up while a frame was written: that frame is not kept, those before it are."""


def frame_name(index: int, width: int) -> str:
    return f"frame-{index:0{width}d}"


def remove_leftovers(out: Path) -> None:
    """What a run killed outright (SIGKILL, a power cut) left hidden in ``out``: half-written frames, replaced ones."""
    if not out.is_dir():
        return
    for entry in out.iterdir():
        if entry.name.startswith(".frame-") and entry.name.endswith((PARTIAL, OLD)):
            _remove(entry)


def write_frame(out: Path, name: str, write: Callable[[Path], dict]) -> dict:
    """``write(folder)`` into a hidden folder, then that folder renamed to ``out/name`` (an earlier one of that
    name replaced); the manifest ``write`` returned. Whatever stops it, nothing half-written stays: the hidden folder
    goes, and a short write on a full disk is an ``OSError`` ENOSPC (the caller, who knows what is kept, says so:
    :func:`full_disk_error`)."""
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f".{name}{PARTIAL}"
    _remove(partial)
    try:
        manifest = write(partial)
        _put_in_place(partial, out / name)
    except OSError as error:
        full = disk_full(error, out)  # looked at before the part goes, which makes room again
        _remove(partial)
        if full and error.errno != errno.ENOSPC:  # numpy's short write says no reason: said here, as the disk's
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(partial)) from error
        raise
    except BaseException:
        _remove(partial)
        raise
    return manifest


def _put_in_place(new: Path, final: Path) -> None:
    if not os.path.lexists(final):
        os.rename(new, final)
        return
    old = final.with_name(f".{final.name}{OLD}")
    _remove(old)
    os.rename(final, old)
    os.rename(new, final)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink(missing_ok=True)


def disk_full(error: OSError, where: Path) -> bool:
    """Whether ``error`` is the disk under ``where`` being full: ENOSPC (or a quota), or a short write that says no
    reason (numpy's "150528 requested and 2016 written") on a disk with almost no room left."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if error.errno is not None:
        return False
    try:
        return shutil.disk_usage(_existing(where)).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def disk_of(path: Path) -> str:
    """The mount point of the disk ``path`` is on (``/``, ``/home``, ``/media/usb``)."""
    here = Path(os.path.abspath(_existing(path)))
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return str(here)


def _existing(path: Path) -> Path:
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def kept_text(written: list[int], out: Path) -> str:
    """What a stopped frame export kept: "frames 0-10 are written whole in 'OUT'" (or that none is)."""
    if not written:
        return f"no frame was written in '{out}'"
    first, last = min(written), max(written)
    frames = f"frame {first} is" if first == last else f"frames {first}-{last} are"
    return f"{frames} written whole in '{out}'"


def full_disk_error(error: OSError, out: Path, index: int, written: list[int]) -> DiskFull:
    free = shutil.disk_usage(_existing(out)).free
    return DiskFull(f"Cannot write frame {index} into '{out}': the disk {disk_of(out)} is full ({free / 1e6:.1f} MB "
                    f"free); {kept_text(written, out)}, frame {index} was not kept.", path=str(out))  # fmt: skip

"""Errors a user can cause or fix. ``str(error)`` is always one readable line.

Every error can also say what it is about, in fields, so that a caller (the window) routes a failure without
reading its text: ``path`` (the file: an image, a model or weights file, a session, a folder), ``module_path``
(the module of the model, ``layer4.1.conv2``) and ``edit_spec`` (the edit that failed, ``zero:layer1:3``). A field
is None when the error is not about such a thing. The fields are keyword-only, so ``SomeError(message)`` still
works everywhere, and they survive pickling and ``copy``.
"""

from __future__ import annotations

import errno
import os
from pathlib import PurePath
from typing import Any


class HookscopeError(Exception):
    """Base class: the command line prints it as one line; the window shows it in a dialog."""

    def __init__(
        self,
        *args: object,
        path: str | None = None,
        module_path: str | None = None,
        edit_spec: str | None = None,
    ) -> None:
        super().__init__(*args)
        self.path = path  # the file (or folder) the error is about
        self.module_path = module_path  # the module of the model the error is about
        self.edit_spec = edit_spec  # the edit (Intervention.spec) that failed

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce passes only args to __init__, which would lose the fields (and break
        # subclasses whose __init__ takes more than the message).
        return (_rebuild, (type(self), self.args), dict(self.__dict__))


def _rebuild(cls: type[HookscopeError], args: tuple[object, ...]) -> HookscopeError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class ImageError(HookscopeError):
    """An image file that cannot be read as an image; ``path`` is the file as it was given."""


class ModelError(HookscopeError):
    """A model name, model file or weights file that cannot be used; ``path`` is the file, when one is at fault."""


class DeviceError(HookscopeError):
    """A device that is not available on this machine."""


class RunError(HookscopeError):
    """A run that failed (for example, out of memory); previous results stay valid. An edit that made the run fail
    is named by ``edit_spec`` (and its module by ``module_path``)."""


# What an operating-system error says about an output path, in words a person can act on: the errno of a write to
# or a folder made at a path that is blocked (by a file where a folder must be, a folder where a file must be, ...).
_WRITE_REASONS = {
    errno.EISDIR: "a folder is in the way",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
}


def write_problem(error: OSError) -> tuple[str, str] | None:
    """The path to fix and what is wrong with it, for an ``OSError`` of writing to (or making a folder at) a path
    that is blocked; None for any other error. A file where a folder must be (``mkdir`` on an existing file: EEXIST;
    a folder under a file: ENOTDIR) is named itself, whichever of the path's folders it is: ``('OUT/png', 'a file is
    in the way')`` for a write to ``OUT/png/forward/x.png`` when OUT/png is a file."""
    if not isinstance(error.filename, (str, bytes, os.PathLike)):
        return None
    path = os.fsdecode(error.filename)
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        blocker = next((p for p in (path, *map(str, PurePath(path).parents)) if _is_a_file(p)), None)
        return (blocker, "a file is in the way") if blocker is not None else None
    reason = _WRITE_REASONS.get(error.errno) if error.errno is not None else None
    return (path, reason) if reason is not None else None


def write_error(error: OSError) -> HookscopeError | None:
    """``write_problem`` as the one line the command line prints (None for any other error)."""
    problem = write_problem(error)
    if problem is None:
        return None
    path, reason = problem
    return HookscopeError(f"Cannot write to '{path}': {reason}.", path=path)


def _is_a_file(path: str) -> bool:
    return os.path.lexists(path) and not os.path.isdir(path)


class WeightsDownloadError(ModelError):
    """A download that could not be completed; nothing was written to the cache."""


class DownloadCancelled(WeightsDownloadError):
    """The user cancelled the download; nothing was written to the cache."""

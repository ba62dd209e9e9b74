"""Errors a user can cause or fix. ``str(error)`` is always one readable line.

Every error can also say what it is about, in fields, so that a caller (the window) routes a failure without
reading its text: ``path`` (the file: an image, a model or weights file, a session, a folder), ``module_path``
(the module of the model, ``layer4.1.conv2``) and ``edit_spec`` (the edit that failed, ``zero:layer1:3``). A field
is None when the error is not about such a thing. The fields are keyword-only, so ``SomeError(message)`` still
works everywhere, and they survive pickling and ``copy``.

What the user can do about it is a fact too, ``remedy`` (a :class:`Remedy`), never words of a front end: the
message (``error.fact``) says what went wrong, and each front end words the remedy its own way
(``error.worded(WORDS)``): the command line with its options (``hookscope.cli.words``), the window with its menus
and buttons (``hookscope.ui.words``); ``str(error)`` says it in plain words, for the Python API. So the engine never
names a command-line option (``tests/core/test_error_wording.py`` checks it).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any


class Remedy(Enum):
    """What the user can do about an error, worded by each front end (``WORDS``: remedy -> words). Its value is
    how the words join the error's fact and its plain words (what ``str(error)`` says)."""

    # the file runs code when opened: open it trusting its author
    TRUST = (": ", "open it trusted if you trust its author")
    # a state_dict: name the catalogue architecture it belongs to
    NAME_ARCHITECTURE = (": ", "choose the architecture it belongs to (e.g. resnet18)")
    # the file is itself a state_dict, given with a weights file: open it alone, with its architecture
    STATE_DICT_ALONE = (": ", "open it by itself with its architecture, without a separate weights file")
    # a pickle needs a module that is not installed: install it, or open the model's weights another way
    INSTALL_OR_STATE_DICT = (": ", "install it, or open the model's state_dict with its architecture or a "
                                   "model.py:build factory")  # fmt: skip
    # a pickle needs a class from the script that saved it: open its state_dict with a factory
    FACTORY = (": ", "open the state_dict with a model.py:build factory and the weights file instead")
    # a compiled or exported model: hooks need the model's Python code
    MODEL_CODE = ("; ", "open the model's Python code instead: a state_dict with its architecture, a model.py:build "
                        "factory (with a weights file), or a pickled nn.Module, trusted")  # fmt: skip
    # a weights file that holds pickled code: open it as a model, trusted, instead
    OPEN_AS_MODEL = (": ", "if you trust its author, open it as a model instead, trusted")
    # a Hugging Face model given a weights file: it takes its own weights or random ones
    HUB_WEIGHTS = (": ", "it takes its own pretrained weights ('default') or random ones ('none')")
    # an unknown model name with no close match: where the names are listed
    MODEL_NAMES = ("; ", "hookscope.core.models.catalogue.catalogue() lists the catalogue's names")
    # a standalone script cannot redo this run (a text target): export the run instead
    EXPORT_INSTEAD = ("; ", "export the run instead")
    # no camera on this machine: open a video file
    VIDEO_INSTEAD = (" ", "Open a video file instead")

    @property
    def joiner(self) -> str:
        return str(self.value[0])

    @property
    def plain(self) -> str:
        return str(self.value[1])


class HookscopeError(Exception):
    """Base class: the command line prints it as one line; the window shows it in a dialog."""

    def __init__(
        self,
        *args: object,
        path: str | None = None,
        module_path: str | None = None,
        edit_spec: str | None = None,
        remedy: Remedy | None = None,
    ) -> None:
        super().__init__(*args)
        self.path = path  # the file (or folder) the error is about
        self.module_path = module_path  # the module of the model the error is about
        self.edit_spec = edit_spec  # the edit (Intervention.spec) that failed
        self.remedy = remedy  # what the user can do about it, worded by each front end

    @property
    def fact(self) -> str:
        """What went wrong, without what to do about it."""
        return Exception.__str__(self)

    def worded(self, words: Mapping[Remedy, str]) -> str:
        """The error's line in a front end's words: the fact, then the remedy as ``words`` say it (in plain words
        where they do not)."""
        if self.remedy is None:
            return self.fact
        return f"{self.fact}{self.remedy.joiner}{words.get(self.remedy, self.remedy.plain)}."

    def __str__(self) -> str:
        return self.worded({})

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

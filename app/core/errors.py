"""Errors a user can cause or fix. ``str(error)`` is always one readable line.

Every error can also say what it is about, in fields, so that a caller (the window) routes a failure without
reading its text: ``path`` (the file: an image, a model or weights file, a session, a folder), ``module_path``
(the module of the model, ``layer4.1.conv2``) and ``edit_spec`` (the edit that failed, ``zero:layer1:3``). A field
is None when the error is not about such a thing. The fields are keyword-only, so ``SomeError(message)`` still
works everywhere, and they survive pickling and ``copy``.
"""

from __future__ import annotations

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

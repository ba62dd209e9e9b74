"""Errors a user can cause or fix. ``str(error)`` is always one readable line."""


class HookscopeError(Exception):
    """Base class: the command line prints it as one line; the window shows it in a dialog."""


class ImageError(HookscopeError):
    """An image file that cannot be read as an image."""


class ModelError(HookscopeError):
    """A model name, model file or weights file that cannot be used."""


class DeviceError(HookscopeError):
    """A device that is not available on this machine."""


class RunError(HookscopeError):
    """A run that failed (for example, out of memory); previous results stay valid."""

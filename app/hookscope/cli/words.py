"""What the user can do about an error (``hookscope.core.common.errors.Remedy``), in the command line's words: its
options. The window words the same remedies with its menus and buttons (``hookscope.ui.words``)."""

from __future__ import annotations

from hookscope.core.common.errors import HookscopeError, Remedy

CLI_WORDS: dict[Remedy, str] = {
    Remedy.TRUST: "pass --trust if you trust its author",
    Remedy.NAME_ARCHITECTURE: "choose the architecture it belongs to (--arch NAME, e.g. --arch resnet18)",
    Remedy.STATE_DICT_ALONE: "open it with --arch NAME, without --weights",
    Remedy.INSTALL_OR_STATE_DICT: "install it, or open the model's state_dict with --arch NAME or a model.py:build "
    "factory",
    Remedy.FACTORY: "open the state_dict with a factory instead (--model-file model.py:build --weights FILE)",
    Remedy.MODEL_CODE: "open the model's Python code instead: a state_dict with --arch NAME, a model.py:build factory "
    "(with --weights FILE), or a pickled nn.Module with --trust",
    Remedy.OPEN_AS_MODEL: "if you trust its author, open it as a model instead (--model-file PATH --trust)",
    Remedy.HUB_WEIGHTS: "pass --weights default or none",
    Remedy.MODEL_NAMES: "'hookscope export --help' lists where to find names",
    Remedy.EXPORT_INSTEAD: "use export without --script",
    Remedy.VIDEO_INSTEAD: "Open a video file instead (--video FILE)",
}


def cli_words(error: HookscopeError) -> str:
    """The error's line as the command line says it."""
    return error.worded(CLI_WORDS)

"""What the user can do about an error (``hookscope.core.common.errors.Remedy``), in the window's words: its menus,
buttons and dialogs. The command line words the same remedies with its options (``hookscope.cli.words``); the
engine's messages name neither."""

from __future__ import annotations

from hookscope.core.common.errors import HookscopeError, Remedy

_BUILDS = "a model.py file with a function that builds the model"
WINDOW_WORDS: dict[Remedy, str] = {
    Remedy.TRUST: "confirm that you trust its author",
    Remedy.NAME_ARCHITECTURE: "choose the architecture it belongs to",
    Remedy.STATE_DICT_ALONE: "open it by itself (File > Open model…) and choose its architecture",
    Remedy.INSTALL_OR_STATE_DICT: f"install it, or open the model's state_dict and choose its architecture, or {_BUILDS}",
    Remedy.FACTORY: f"open the state_dict with a factory instead ({_BUILDS})",
    Remedy.MODEL_CODE: f"open the model's Python code instead: a state_dict, {_BUILDS}, or a pickled nn.Module "
    "(File > Open model…)",
    Remedy.OPEN_AS_MODEL: "if you trust its author, open it as a model instead (File > Open model…, then confirm "
    "that you trust its author)",
    Remedy.HUB_WEIGHTS: "choose its pretrained weights or random ones",
    Remedy.MODEL_NAMES: "the model list shows the catalogue's names",
    Remedy.EXPORT_INSTEAD: "use File > Export run… instead",
    Remedy.VIDEO_INSTEAD: "Open a video file instead (File > Open video…)",
}


def window_words(error: BaseException) -> str:
    """An error's line as the window says it (a Hookscope error's remedy in the window's words; any other error as
    its own text)."""
    return error.worded(WINDOW_WORDS) if isinstance(error, HookscopeError) else str(error)

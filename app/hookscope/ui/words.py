"""The engine's messages in the window's words: its command-line hints (``--arch NAME``, ``--trust``) become what
the user does in the window. Model files and sessions both show engine messages about model files."""

from __future__ import annotations

# The command line's words in engine messages, and what the window calls the same thing (longest first).
_WINDOW_WORDS = (
    (
        "a state_dict with --arch NAME, a model.py:build factory (with --weights FILE), or a pickled nn.Module with "
        "--trust",
        "a state_dict, a model.py file with a function that builds the model, or a pickled nn.Module "
        "(File > Open model…)",
    ),
    ("(--model-file model.py:build --weights FILE)", "(a model.py file with a function that builds the model)"),
    ("--model-file model.py:build --weights FILE", "a model.py file with a function that builds the model"),
    ("the state_dict with --arch NAME", "the state_dict and choose its architecture"),
    (" with --arch NAME", ""),
    ("pass --trust if you trust its author", "confirm that you trust its author"),
    ("(--model-file PATH --trust)", "(File > Open model…, then confirm that you trust its author)"),
)


def window_words(message: str) -> str:
    """An engine message with its command-line hints in the window's words."""
    for cli, gui in _WINDOW_WORDS:
        message = message.replace(cli, gui)
    return message

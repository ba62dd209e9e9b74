"""Hookscope: look inside a PyTorch network through real hooks.

The Python API, for a model you hold in a script or a notebook::

    import hookscope

    cap = hookscope.capture(model, "cat.jpg", hooks={"layer1": ["act", "grad"], "fc": ["in"]})
    cap.activations["layer1"]          # the tensor the forward hook saw
    cap.save("out/")                   # what ``hookscope export`` writes

    viewer = hookscope.Viewer(model, images=["cat.jpg"], tick=["layer1"])
    hookscope.run()                    # in a script; in IPython or Jupyter the window is already live

``import hookscope`` is light: the engine (torch) loads on the first use of a name below, the window (Qt) when a
viewer is made, so ``hookscope --help`` imports neither.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from hookscope._version import __version__

# How long PyTorch's OpenMP threads (GNU OpenMP: Linux) spin, waiting ready for the next operation, before they sleep.
# libgomp reads it once, when torch loads it, so it is set here, before any module of the app imports torch; a value
# the user set is kept. Its default, 300,000 turns (several milliseconds here), kept the model's idle thread spinning
# through everything between two runs of the window: the pictures of a run, the GUI thread's update and paint, the
# next frame's decoding all shared a core with it (the window's hand-over from one video frame to the next took 6 ms
# instead of 1.3). 30,000 turns still spans the gaps between one operation and the next inside a run: the model alone
# is as fast (python -m hookscope.ui.bench_live prints both; docs/live.md).
os.environ.setdefault("GOMP_SPINCOUNT", "30000")

if TYPE_CHECKING:
    from hookscope.core.common.errors import HookscopeError
    from hookscope.core.common.vocabulary import HOOK_WORDS
    from hookscope.core.engine.capture import Prediction
    from hookscope.core.models.images import Preprocess
    from hookscope.core.outputs.capture import Capture, CapturedRecord, capture
    from hookscope.ui.viewer import Viewer, run

# Each public name and the module it lives in, loaded on first use (PEP 562).
_PUBLIC = {
    "capture": "hookscope.core.outputs.capture",
    "Capture": "hookscope.core.outputs.capture",
    "CapturedRecord": "hookscope.core.outputs.capture",
    "Prediction": "hookscope.core.engine.capture",
    "Preprocess": "hookscope.core.models.images",
    "HookscopeError": "hookscope.core.common.errors",
    "HOOK_WORDS": "hookscope.core.common.vocabulary",
    "Viewer": "hookscope.ui.viewer",
    "run": "hookscope.ui.viewer",
}

__all__ = [
    "HOOK_WORDS",
    "Capture",
    "CapturedRecord",
    "HookscopeError",
    "Prediction",
    "Preprocess",
    "Viewer",
    "__version__",
    "capture",
    "run",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        if _PUBLIC[name] == "hookscope.ui.viewer":
            _provide_the_guides_cli_page()
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'hookscope' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)


def _provide_the_guides_cli_page() -> None:
    """A Viewer's window shows the guide too, with the command-line page made from the command line's parsers."""
    from hookscope.cli.dispatch import provide_guide_pages

    provide_guide_pages()

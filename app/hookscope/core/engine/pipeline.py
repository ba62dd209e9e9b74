"""From what the user asked for to a model ready to run: open a model, read the images mix edits blend in. The
command line, batch runs, sessions and the window's worker all go through here; running an image is
``hookscope.core.engine.run``.

- :class:`ModelSource` and :func:`open_model` (``hookscope.core.models.source``) say where a model comes from and open it.
- :func:`other_images` reads and preprocesses the other images of the enabled mix edits once.
"""

from __future__ import annotations

from hookscope.core.engine.interventions import other_images
from hookscope.core.models.files import ArchitectureRequired, TrustRequired
from hookscope.core.models.source import ModelSource, open_model

__all__ = [
    "ArchitectureRequired",
    "ModelSource",
    "TrustRequired",
    "open_model",
    "other_images",
]

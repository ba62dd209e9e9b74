"""The one way from what the user asked for to a result: open a model, read the images mix edits blend in, run
an image. The command line, batch runs, sessions and the window's worker all go through here.

- :class:`ModelSource` says where a model comes from, frozen (so a GUI can put it into a request for a worker): a
  catalogue name with its weights (``none``, ``default`` or a state_dict file) and seed; or a model file
  (a state_dict with ``arch``, a pickled model or ``model.py:build`` with ``trust``, optionally ``non_strict``
  and a separate ``weights`` file); or a saved session's model (:meth:`ModelSource.from_session`).
- :func:`open_model` opens any of them. Questions a file raises come back as exceptions carrying what is needed
  to ask them: :class:`~app.core.model_files.TrustRequired` (``path``, ``objects``) and
  :class:`~app.core.model_files.ArchitectureRequired` (``path``, ``keys``); answer them and open
  ``source.trusted()`` or ``source.with_arch(...)``.
- :func:`other_images` reads and preprocesses the other images of the enabled mix edits once.
- :func:`run_image` preprocesses an image (a file is read first) and runs it with the model's class names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from PIL import Image

from app.core.capture import RunResult, Target, capture_run
from app.core.errors import ModelError
from app.core.hooks import HookRegistry
from app.core.images import Preprocess, read_image
from app.core.interventions import other_images
from app.core.model_files import ArchitectureRequired, TrustRequired, open_model_file, split_factory
from app.core.models import DEFAULT_MODEL, LoadedModel, load_model
from app.core.objectives import with_reference

if TYPE_CHECKING:
    from app.core.session import Session

__all__ = [
    "ArchitectureRequired",
    "ModelSource",
    "TrustRequired",
    "model_input",
    "open_model",
    "other_images",
    "run_image",
]

_NO_WEIGHTS_FILE = ("", "none", "default")


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: a catalogue name, or a model ``file``; everything :func:`open_model` needs.

    ``weights``: for a catalogue model ``none`` (random, drawn after ``torch.manual_seed(seed)``), ``default``
    (the pretrained weights in the torch hub cache; random with a notice when they are not there) or a state_dict
    file; for a model file, a state_dict file to load into the model it builds (``none``/``default``: none).
    ``file``: a weights or model file, or ``model.py:FUNCTION``; then ``name`` is not used. ``arch``: the catalogue
    architecture a state_dict file belongs to. ``trust``: allow running code from ``file`` (unpickling, importing).
    ``non_strict``: load the tensors of a state_dict that fit and say what was left out, instead of refusing.
    ``preprocess``: replaces the model's own input preprocessing (a session's saved one).
    """

    name: str = DEFAULT_MODEL
    weights: str = "none"
    seed: int = 0
    file: str | None = None
    arch: str | None = None
    trust: bool = False
    non_strict: bool = False
    preprocess: Preprocess | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", os.fspath(self.weights) if self.weights else "none")
        object.__setattr__(self, "seed", int(self.seed))
        if self.file is not None:
            object.__setattr__(self, "file", os.fspath(self.file) or None)
        if self.arch and not self.file:
            raise ValueError("ModelSource: an architecture (arch) goes with a model file (file).")

    @property
    def strict(self) -> bool:
        return not self.non_strict

    @property
    def weights_file(self) -> str | None:
        """The state_dict file named by ``weights``, or None for ``none`` and ``default``."""
        return None if self.weights in _NO_WEIGHTS_FILE else self.weights

    @property
    def label(self) -> str:
        """What is being opened, in a few words: the catalogue name, or the file's name (with its function)."""
        if not self.file:
            return self.name
        path, factory = split_factory(self.file)
        return path.name if factory is None else f"{path.name}:{factory}"

    def trusted(self) -> ModelSource:
        """The same source, with the user's trust to run code from its file (after :class:`TrustRequired`)."""
        return replace(self, trust=True)

    def with_arch(self, arch: str, non_strict: bool | None = None) -> ModelSource:
        """The same file opened as a state_dict of ``arch`` (after :class:`ArchitectureRequired`)."""
        return replace(self, arch=arch, non_strict=self.non_strict if non_strict is None else non_strict)

    @classmethod
    def from_session(cls, session: Session, *, trust: bool = False, non_strict: bool = False) -> ModelSource:
        """A saved session's model: its name or file, weights, seed and preprocessing.

        A model file that runs code when opened needs ``trust`` again: a session may come from someone else, so it
        never carries trust with it. Raises :class:`ModelError` (with ``path``) when the session's model or weights
        file is missing, and for a saved preprocessing that is not valid.
        """
        blocking = session.blocking_problem()
        if blocking:
            model = session.model
            missing = model.get("path") if model.get("path") in session.missing else model.get("weights")
            raise ModelError(blocking, path=str(missing) if missing else None)
        model = session.model
        preprocess = None
        if session.preprocessing:
            try:
                preprocess = Preprocess(**session.preprocessing)
            except (TypeError, ValueError) as error:
                raise ModelError(f"The session's preprocessing is not valid ({error}).") from error
        file = None
        if model.get("path"):
            file = f"{model['path']}:{model['factory']}" if model.get("factory") else str(model["path"])
        return cls(
            name=str(model.get("name", DEFAULT_MODEL)),
            weights=str(model.get("weights", "none")),
            seed=int(model.get("seed", 0)),
            file=file,
            arch=model.get("arch") if file else None,
            trust=trust,
            non_strict=non_strict,
            preprocess=preprocess,
        )


def open_model(source: ModelSource, *, hash_file: bool = False) -> LoadedModel:
    """Open the model ``source`` names (seconds for big models: in a worker, never on a GUI thread).

    ``hash_file`` also takes the model file's SHA-256 into ``LoadedModel.model_sha256`` (a session saved later
    records it, so a file changed since is noticed). Raises :class:`TrustRequired`, :class:`ArchitectureRequired`
    or another :class:`ModelError` (one line; ``path`` names the file at fault).
    """
    if source.file:
        loaded = open_model_file(
            source.file,
            arch=source.arch,
            trust=source.trust,
            strict=source.strict,
            seed=source.seed,
            weights=source.weights_file,
        )
        if hash_file:
            from app.core.session import file_sha256

            loaded.model_sha256 = file_sha256(split_factory(source.file)[0])
    else:
        loaded = load_model(source.name, source.weights, source.seed, strict=source.strict)
    if source.preprocess is not None:
        loaded.preprocess = source.preprocess
    return loaded


def model_input(loaded: LoadedModel, image: Image.Image | str | os.PathLike) -> torch.Tensor:
    """The (1, C, H, W) tensor ``loaded`` takes for ``image`` (a file is read first: ``ImageError`` with ``path``)."""
    if isinstance(image, (str, os.PathLike)):
        image = read_image(image)
    return loaded.preprocess.to_tensor(image)


def run_image(
    loaded: LoadedModel,
    registry: HookRegistry,
    image: Image.Image | torch.Tensor | str | os.PathLike,
    *,
    device: str = "cpu",
    target: Target = "top1",
    others: Mapping[str, torch.Tensor] | None = None,
    baseline: bool = False,
    cancelled: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one image through ``loaded.module`` forward and backward, recording through ``registry``'s hooks.

    ``image`` is a file (read and preprocessed), a picture (preprocessed) or a tensor already preprocessed. The
    predictions are named by ``loaded.categories``. ``others`` are the mix edits' other images
    (:func:`other_images`); ``baseline`` also scores the image with every edit off (see ``capture_run``).
    Failures raise ``ImageError`` (``path``), ``DeviceError`` or ``RunError`` (``edit_spec`` and ``module_path``
    when an edit made the run fail).
    """
    x = image if isinstance(image, torch.Tensor) else model_input(loaded, image)
    return capture_run(
        loaded.module,
        registry,
        x,
        device=device,
        target=with_reference(target, loaded),  # similar:/text: compare with an embedding, made once here
        categories=loaded.categories,
        cancelled=cancelled,
        others=others,
        baseline=baseline,
    )

"""Where a model comes from (:class:`ModelSource`) and the one way to open it (:func:`open_model`).

- :class:`ModelSource` is frozen (so a GUI can put it into a request for a worker): a catalogue name with its weights
  (``none``, ``default`` or a state_dict file) and seed; or a model file (a state_dict with ``arch``, a pickled model
  or ``model.py:build`` with ``trust``, optionally ``non_strict`` and a separate ``weights`` file); or a saved
  session's model (:meth:`ModelSource.from_session`).
- :func:`open_model` opens any of them. Questions a file raises come back as exceptions carrying what is needed
  to ask them: :class:`~hookscope.core.models.files.TrustRequired` (``path``, ``objects``) and
  :class:`~hookscope.core.models.files.ArchitectureRequired` (``path``, ``keys``); answer them and open
  ``source.trusted()`` or ``source.with_arch(...)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hookscope.core.common.errors import ModelError
from hookscope.core.models.catalogue import DEFAULT_MODEL, load_model
from hookscope.core.models.files import file_sha256, open_model_file, split_factory
from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import LoadedModel


class SavedModel(Protocol):
    """What :meth:`ModelSource.from_session` reads of a saved session (``hookscope.core.outputs.session.Session``): the
    session lives above the models, so it is named by what it offers, not imported."""

    @property
    def model(self) -> Mapping[str, Any]: ...

    @property
    def missing(self) -> list[str]: ...

    @property
    def preprocessing(self) -> Mapping[str, Any] | None: ...

    def blocking_problem(self) -> str | None: ...


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
    def from_session(cls, session: SavedModel, *, trust: bool = False, non_strict: bool = False) -> ModelSource:
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
            loaded.model_sha256 = file_sha256(split_factory(source.file)[0])
    else:
        loaded = load_model(source.name, source.weights, source.seed, strict=source.strict)
    if source.preprocess is not None:
        loaded.preprocess = source.preprocess
    return loaded

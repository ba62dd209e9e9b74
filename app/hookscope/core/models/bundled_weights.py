"""Pretrained weights shipped inside a release bundle, so that it starts on a trained network offline.

At build time (``packaging/build.sh --with-weights resnet18``) ``collect`` copies a model's default weights file
from the build machine's torch hub cache into a folder the spec ships as ``resources/weights/``, after checking
the file against the SHA-256 prefix torchvision puts in its name (``resnet18-f37072fd.pth``). At start-up
(``packaging/launcher.py``) ``install_bundled_weights`` copies each shipped file that the user's torch hub cache
does not have into that cache, checked again and moved into place atomically. The cache stays the one place
weights are looked up and downloaded to (``hookscope.core.models.catalogue.default_weights_file``, the Download button), and the
installation folder stays read-only (it may be in Program Files).

Usage at build time: ``python -m hookscope.core.models.bundled_weights DEST NAME...`` (one line per model; exit 1 when a cached
file fails its check, 0 when a model's file is simply not cached: the build goes on without it, and says so).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from hookscope.core.common.errors import ModelError
from hookscope.core.common.resources import resource_dir

WEIGHTS_FOLDER = "weights"


def sha256_prefix_ok(path: Path, name: str | None = None) -> bool:
    """Whether ``path``'s SHA-256 starts with the hash ``name`` (default: its own name) carries, as in
    ``NAME-HASH.pth``; False when the name carries no hash."""
    stem = Path(name or path.name).stem
    prefix = stem.rsplit("-", 1)[1].lower() if "-" in stem else ""
    if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix):
        return False
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest().startswith(prefix)


def _cached_file(name: str) -> Path | None:
    from hookscope.core.models.catalogue import default_weights_file

    return default_weights_file(name)


def collect(names: Iterable[str], dest: Path, locate: Callable[[str], Path | None] = _cached_file) -> list[Path]:
    """Copy each model's verified default weights file from the torch hub cache into ``dest``.

    A model whose file is not cached is reported and skipped; a cached file that fails its check raises
    ``ModelError`` (shipping it would give every user a damaged network)."""
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in names:
        path = locate(name)
        if path is None or not path.is_file():
            print(
                f"hookscope: {name}: no pretrained weights in this machine's torch hub cache"
                f"{f' ({path})' if path else ''}; the bundle ships without them",
                file=sys.stderr,
            )
            continue
        if not sha256_prefix_ok(path):
            raise ModelError(
                f"{path} does not match the SHA-256 in its name: download it again "
                f"(hookscope download --model {name} --force) before shipping it.",
                path=str(path),
            )
        shutil.copy2(path, dest / path.name)
        copied.append(dest / path.name)
        print(f"hookscope: {name}: shipping {path.name} ({path.stat().st_size / 1e6:.1f} MB, SHA-256 checked)")
    return copied


def bundled_folder() -> Path | None:
    try:
        folder = resource_dir() / WEIGHTS_FOLDER
    except FileNotFoundError:
        return None
    return folder if folder.is_dir() else None


def _checkpoints() -> Path:
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints"


def install_bundled_weights(source: Path | None = None, cache: Path | None = None) -> list[Path]:
    """Copy shipped weights missing from the user's torch hub cache into it; the files copied.

    Quiet and harmless when nothing is shipped, the cache already has the file, or the cache cannot be written
    (the window then offers the download as usual)."""
    source = bundled_folder() if source is None else source
    if source is None or not source.is_dir():
        return []
    shipped = sorted(source.glob("*.pth"))
    if not shipped:
        return []
    cache = _checkpoints() if cache is None else cache
    installed = []
    for path in shipped:
        target = cache / path.name
        if target.is_file():
            continue
        try:
            cache.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=cache)
            os.close(handle)
            try:
                shutil.copyfile(path, temporary)
                if not sha256_prefix_ok(Path(temporary), path.name):
                    continue  # a damaged bundle: leave the cache alone, the window offers the download
                os.replace(temporary, target)
                installed.append(target)
            finally:
                if os.path.exists(temporary):
                    os.remove(temporary)
        except OSError:
            continue
    return installed


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m hookscope.core.models.bundled_weights DEST NAME...", file=sys.stderr)
        return 2
    try:
        collect(argv[1:], Path(argv[0]))
    except ModelError as error:
        print(f"hookscope: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

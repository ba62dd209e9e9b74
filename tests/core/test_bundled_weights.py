"""Weights shipped in a bundle: collected at build time only when the cached file matches the SHA-256 in its name,
copied into the user's torch hub cache at start-up, never over a file that is there and never when damaged."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookscope.core.common.errors import ModelError
from hookscope.core.models.bundled_weights import collect, install_bundled_weights, sha256_prefix_ok


def fake_weights(folder: Path, stem: str = "resnet18", content: bytes = b"not really a network " * 1000) -> Path:
    """A file named as torchvision names its weights: NAME-<first 8 hex digits of its SHA-256>.pth."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{hashlib.sha256(content).hexdigest()[:8]}.pth"
    path.write_bytes(content)
    return path


def test_a_cached_file_whose_hash_matches_its_name_is_collected(tmp_path: Path) -> None:
    cached = fake_weights(tmp_path / "hub" / "checkpoints")
    copied = collect(["resnet18"], tmp_path / "ship", locate=lambda name: cached)
    assert copied == [tmp_path / "ship" / cached.name]
    assert copied[0].read_bytes() == cached.read_bytes()


def test_a_damaged_cached_file_stops_the_build(tmp_path: Path) -> None:
    cached = fake_weights(tmp_path / "hub")
    cached.write_bytes(cached.read_bytes()[:-1])  # one byte short: a cut download
    with pytest.raises(ModelError, match="does not match the SHA-256 in its name"):
        collect(["resnet18"], tmp_path / "ship", locate=lambda name: cached)
    assert not list((tmp_path / "ship").iterdir())


def test_a_model_that_is_not_cached_is_skipped_with_a_note(tmp_path: Path, capsys) -> None:
    assert collect(["resnet18"], tmp_path / "ship", locate=lambda name: tmp_path / "resnet18-f37072fd.pth") == []
    assert "resnet18: no pretrained weights in this machine's torch hub cache" in capsys.readouterr().err


def test_a_name_without_a_hash_is_never_trusted(tmp_path: Path) -> None:
    path = tmp_path / "resnet18.pth"
    path.write_bytes(b"x")
    assert not sha256_prefix_ok(path)


def test_shipped_weights_go_into_the_users_cache_once(tmp_path: Path) -> None:
    shipped = fake_weights(tmp_path / "bundle" / "weights")
    cache = tmp_path / "home" / "hub" / "checkpoints"
    assert install_bundled_weights(shipped.parent, cache) == [cache / shipped.name]
    assert (cache / shipped.name).read_bytes() == shipped.read_bytes()
    assert [p.name for p in cache.iterdir()] == [shipped.name]  # no temporary file left behind
    (cache / shipped.name).write_bytes(b"the user's own file")
    assert install_bundled_weights(shipped.parent, cache) == []  # never over a file that is there
    assert (cache / shipped.name).read_bytes() == b"the user's own file"


def test_a_damaged_shipped_file_leaves_the_cache_alone(tmp_path: Path) -> None:
    shipped = fake_weights(tmp_path / "bundle" / "weights")
    shipped.write_bytes(b"damaged")
    cache = tmp_path / "cache"
    assert install_bundled_weights(shipped.parent, cache) == []
    assert not list(cache.iterdir())


def test_nothing_shipped_is_nothing_to_do(tmp_path: Path) -> None:
    assert install_bundled_weights(tmp_path / "none", tmp_path / "cache") == []
    assert not (tmp_path / "cache").exists()


def test_the_app_finds_installed_weights_where_it_looks_for_them(tmp_path: Path) -> None:
    """By default shipped files go to the folder default_weights_file (what the window and the CLI check) names."""
    shipped = fake_weights(tmp_path / "bundle" / "weights")
    code = (
        "import sys; from pathlib import Path; import torch\n"
        "from hookscope.core.models.bundled_weights import install_bundled_weights\n"
        "from hookscope.core.models.catalogue import default_weights_file\n"
        f"installed = install_bundled_weights(Path({str(shipped.parent)!r}))\n"
        "print(installed[0].parent == default_weights_file('resnet18').parent, installed[0].is_file())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "TORCH_HOME": str(tmp_path / "torch")},
        timeout=120,
    )
    assert done.stdout.strip() == "True True", done.stderr
    assert (tmp_path / "torch" / "hub" / "checkpoints" / shipped.name).is_file()


def test_the_build_command_exits_1_on_a_damaged_file_and_0_when_not_cached(tmp_path: Path) -> None:
    env = {**os.environ, "TORCH_HOME": str(tmp_path / "torch")}
    done = subprocess.run(
        [sys.executable, "-m", "hookscope.core.models.bundled_weights", str(tmp_path / "ship"), "resnet18"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and "no pretrained weights" in done.stderr
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "resnet18-f37072fd.pth").write_bytes(b"not the real file")
    done = subprocess.run(
        [sys.executable, "-m", "hookscope.core.models.bundled_weights", str(tmp_path / "ship"), "resnet18"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "does not match the SHA-256 in its name" in done.stderr

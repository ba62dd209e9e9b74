"""A tiny but very wide (or tall) image keeps memory bounded.

A 169-byte 30000x1 PNG used to become a 7.68-million x 256 picture in the resize before the crop (6 GB). Now the
centre the crop needs is cut first (``Preprocess.to_tensor``); ordinary pictures still take torchvision's exact path.
Peak memory is measured in a fresh subprocess (``ru_maxrss``), after the same command ran once on a normal image.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms._presets import ImageClassification

from hookscope.core.models.images import Preprocess, read_image

ROOT = Path(__file__).resolve().parents[2]
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
BOUND_MB = 300  # the peak may grow by at most this much over the same command on a normal image


@pytest.fixture
def extreme(tmp_path: Path) -> dict[str, Path]:
    """Real PNG files: 30000x1 and 1x30000 (each a few hundred bytes), and a normal photo."""
    rng = np.random.default_rng(0)
    files = {}
    for name, size in (("wide", (30000, 1)), ("tall", (1, 30000))):
        path = tmp_path / f"{name}.png"
        Image.new("RGB", size, (200, 40, 10)).save(path)
        files[name] = path
    photo = tmp_path / "photo.png"
    Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(photo)
    files["photo"] = photo
    return files


def _peak_growth(script: str) -> dict:
    """Run ``script`` in a fresh Python; it prints a JSON line with the peaks it measured (ru_maxrss, in MB)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_files_are_tiny(extreme: dict[str, Path]) -> None:
    assert extreme["wide"].stat().st_size < 400 and extreme["tall"].stat().st_size < 400


def test_preprocess_of_a_30000x1_png_stays_small(extreme: dict[str, Path]) -> None:
    result = _peak_growth(f"""
        import json, resource
        from hookscope.core.models.images import Preprocess, read_image
        pre = Preprocess(resize=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
        def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        pre.to_tensor(read_image({str(extreme["photo"])!r}))
        base = peak()
        shapes = [list(pre.to_tensor(read_image(p)).shape) for p in ({str(extreme["wide"])!r}, {str(extreme["tall"])!r})]
        print(json.dumps({{"growth_mb": peak() - base, "shapes": shapes}}))
    """)
    assert result["shapes"] == [[1, 3, 224, 224], [1, 3, 224, 224]]
    assert result["growth_mb"] < BOUND_MB, result


def test_export_of_30000x1_and_1x30000_pngs_stays_small(extreme: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _peak_growth(f"""
        import json, resource
        from hookscope.cli import main
        def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        common = ["--model", "resnet18", "--layers", "conv1,layer1", "--no-png"]
        codes = [main(["export", "--image", {str(extreme["photo"])!r}, *common, "--out", {str(out / "photo")!r}])]
        base = peak()
        for name, path in (("wide", {str(extreme["wide"])!r}), ("tall", {str(extreme["tall"])!r})):
            codes.append(main(["export", "--image", path, *common, "--out", {str(out)!r} + "/" + name]))
        print(json.dumps({{"growth_mb": peak() - base, "codes": codes}}))
    """)
    assert result["codes"] == [0, 0, 0]
    assert result["growth_mb"] < BOUND_MB, result
    manifest = json.loads((out / "wide" / "manifest.json").read_text())
    assert manifest["input_shape"] == [1, 3, 224, 224]


def _noise(width: int, height: int, seed: int = 1) -> Image.Image:
    """Smooth along the long side, with noise: a resize that took the wrong part would show."""
    rng = np.random.default_rng(seed)
    xx = np.linspace(0, 8 * np.pi, max(width, height))
    wave = (127 + 100 * np.sin(xx))[:, None, None] + rng.normal(0, 10, (max(width, height), min(width, height), 3))
    pixels = np.clip(wave, 0, 255).astype(np.uint8)
    if width > height:
        pixels = pixels.transpose(1, 0, 2)
    return Image.fromarray(np.ascontiguousarray(pixels))


@pytest.mark.parametrize("size", [(4000, 60), (60, 4000), (30000, 3), (900, 37), (3001, 7)])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_resizing_only_the_crop_gives_the_pixels_resizing_whole_gives(
    size: tuple[int, int], interpolation: str
) -> None:
    """Of a very wide (or tall) picture only the part under the crop is resampled, at the same scale and sample
    positions: the same pixels as torchvision's preset, to one grey level (Pillow rounds its two passes to 8 bits)."""
    image = _noise(*size)
    ours = Preprocess(resize=256, crop=224, interpolation=interpolation, **IMAGENET).to_tensor(image)
    preset = ImageClassification(crop_size=224, resize_size=256, interpolation=InterpolationMode(interpolation),
                                 **IMAGENET)  # fmt: skip
    theirs = preset(image).unsqueeze(0)
    assert ours.shape == theirs.shape == (1, 3, 224, 224)
    grey_level = 1 / 255 / min(IMAGENET["std"]) + 1e-6  # one 8-bit step in normalised units
    difference = (ours - theirs).abs()
    if interpolation == "nearest":  # a sample position on a pixel border may pick its neighbour
        assert float((difference > grey_level).float().mean()) < 0.01
    else:
        assert float(difference.max()) <= grey_level, float(difference.max())
    assert float(difference.mean()) < 0.005, float(difference.mean())


def test_ordinary_pictures_take_torchvisions_exact_path() -> None:
    """Up to 8:1 nothing is cut first: identical to the preset, bit for bit."""
    for size in ((300, 200), (2000, 250), (250, 2000)):
        image = _noise(*size)
        ours = Preprocess(resize=256, crop=224, **IMAGENET).to_tensor(image)
        theirs = ImageClassification(crop_size=224, resize_size=256, **IMAGENET)(image).unsqueeze(0)
        assert torch.equal(ours, theirs), size


def test_without_resize_nothing_changes(extreme: dict[str, Path]) -> None:
    """``resize=None`` crops (and pads) straight away: already bounded, and unchanged."""
    pre = Preprocess(resize=None, crop=64, **IMAGENET)
    x = pre.to_tensor(read_image(extreme["wide"]))
    assert x.shape == (1, 3, 64, 64)

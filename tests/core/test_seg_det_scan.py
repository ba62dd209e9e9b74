"""The dataset scan (scores per channel over a folder) on segmentation and detection models: forward hooks on their
backbones. Each channel's top image and score equal a plain PyTorch forward hook's maximum over the same images.
Random weights, nothing downloaded; small inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.results import ScanSettings
from hookscope.core.scan.run import scan_images


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (90 + 10 * i, 120, 3), dtype=np.uint8)).save(root / f"{i}.png")
    return root


def plain_peaks(loaded, images, path):
    """(images, channels) maxima of ``path``'s output, with one forward hook and nothing else."""
    module = loaded.module.get_submodule(path)
    seen = []
    handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    try:
        with torch.no_grad():
            for image in images:
                loaded.module(loaded.preprocess.to_tensor(read_image(image)))
    finally:
        handle.remove()
    return torch.cat([s.flatten(2).amax(dim=2) for s in seen]).numpy()


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("lraspp_mobilenet_v3_large", "backbone.4"),
        ("ssdlite320_mobilenet_v3_large", "backbone.features.0.4"),
    ],
)
def test_scan_of_a_segmentation_or_detection_backbone_equals_plain_forward_hooks(folder, name, layer):
    loaded = load_model(name, "none")
    assert loaded.task in ("segmentation", "detection")
    images = find_images(folder, recursive=True)
    result = scan_images(
        loaded, images, ScanSettings((layer,), top=2, by="max", batch_size=2, boxes=False), root=folder
    )
    assert result.complete and result.processed == len(images)
    peaks = plain_peaks(loaded, images, layer)
    module = result.modules[layer]
    assert module.channels == peaks.shape[1]
    for channel in range(module.channels):
        best = module.top[channel][0]
        assert best.score == pytest.approx(peaks[:, channel].max(), rel=1e-4, abs=1e-5)
        assert peaks[best.image, channel] == pytest.approx(peaks[:, channel].max(), rel=1e-4, abs=1e-5)

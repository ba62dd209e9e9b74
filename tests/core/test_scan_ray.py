"""The scan on Ray equals the single-process scan (a local Ray with two CPUs, two actors).

Marked ``ray`` (starting Ray and its actors takes longer than the default run allows): run it with
``pytest -m ray tests/core/test_scan_ray.py``. Skipped when Ray is not installed (``pip install 'hookscope[ray]'``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.core.models.images import Preprocess
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.on_ray import RayScan, ray_available
from hookscope.core.scan.results import ScanSettings
from hookscope.core.scan.run import run_scan, scan_images

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not ray_available(), reason="Ray is not installed: pip install 'hookscope[ray]'"),
]

SMALL = Preprocess(resize=73, crop=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_scan_equals_the_single_process_scan(local_ray, tmp_path: Path):
    rng = np.random.default_rng(11)
    for index in range(14):
        size = (int(rng.integers(60, 120)), int(rng.integers(50, 110)))
        small = rng.integers(0, 256, size=(size[1] // 8 + 2, size[0] // 8 + 2, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(tmp_path / f"img{index:02d}.png")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")  # skipped the same way on both
    images = find_images(tmp_path)
    source = ModelSource("resnet18", "none", seed=0, preprocess=SMALL)
    loaded = open_model(source)
    settings = ScanSettings(("layer1", "layer2.0.conv1", "fc"), top=3, batch_size=4, boxes=False)
    single = scan_images(loaded, images, settings)
    backend = RayScan(source, settings, images, actors=2)
    assert not backend.started  # the fixture's Ray is used, not a new one
    on_ray = run_scan(backend, open_model(source), images, settings)
    a, b = single.to_json(), on_ray.to_json()
    for data in (a, b):
        data["scan"].pop("scan_s"), data["scan"].pop("boxes_s")
    assert b == a  # every top-k entry, score, position and statistic, to the last bit
    assert [i for i, _ in on_ray.skipped] == [images.index(tmp_path / "broken.jpg")]

    # the receptive-field boxes of the final top-k, computed by the actors too
    boxed = ScanSettings(("layer1.0.conv1",), top=2, batch_size=8)
    single = scan_images(open_model(source), images, boxed)
    on_ray = run_scan(RayScan(source, boxed, images, actors=2), open_model(source), images, boxed)
    assert on_ray.modules["layer1.0.conv1"].top == single.modules["layer1.0.conv1"].top
    assert all(entry.box is not None for channel in on_ray.modules["layer1.0.conv1"].top for entry in channel)

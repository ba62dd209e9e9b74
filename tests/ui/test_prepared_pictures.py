"""What the worker prepares for the panels after a run: mosaics at the size shown, drawn where the tensors are, and
no full-resolution numpy copy of any record (that is made when a hover, the channel view or an export reads it)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from hookscope.core.common.resources import sample_image
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.pictures.panels import PanelSettings
from hookscope.core.pictures.views import as_channels, mosaic, under_centres
from hookscope.ui.state.rendering import color_table, lut_of
from hookscope.ui.state.requests import ImageSource, RunRequest, execute_run

TICKS = [
    ("layer1.0.conv1", "forward"),
    ("layer1.0.conv1", "tensor"),
    ("layer3.1", "forward"),
    ("layer3.1", "tensor"),
    ("avgpool", "forward"),
    ("fc", "tensor"),
]


def test_a_run_is_prepared_without_full_resolution_copies(qapp) -> None:
    loaded = open_model(ModelSource("resnet18", "none", 0))
    image = ImageSource("sample", image=Image.open(sample_image()).convert("RGB"))
    other = ImageSource("other", image=Image.fromarray(np.full((200, 260, 3), 90, dtype=np.uint8)))
    with HookRegistry(loaded.module) as registry:
        for path, kind in TICKS:
            registry.add(path, kind)
        settings = {("layer3.1", "forward"): PanelSettings(sort="mean", scaling="shared")}
        request = RunRequest.freeze(
            1, loaded, registry, image, "cpu", "top1", settings, PanelSettings(), image_b=other, fit=(300, 280)
        )
        outcome = execute_run(request, lambda: False)

    pictures = {(p.kind, p.key): p for p in outcome.pictures}
    assert set(pictures) == {(kind, path) for path, kind in TICKS}
    # Neither preparing, colouring nor comparing with image B made the full numpy array of any record's maps (a
    # vector's values are what its bar plot shows: those come over).
    views = [view for entry in outcome.comparison.views.values() for key, view in entry.items() if key != "diff"]
    maps = [p for p in [*outcome.pictures, *views] if p.channels.kind == "maps"]
    assert len(maps) == 12 and all(p.channels._data is None for p in maps)

    for picture in outcome.pictures:
        record = picture.record
        expected = as_channels(np.abs(record.tensor.numpy()) if picture.is_gradient else record.tensor.numpy())
        if picture.channels.kind != "maps":  # pooled features and logits: bar plots of their values
            assert picture.channels.kind == "vector" and picture.rendered is None
            np.testing.assert_array_equal(picture.arrangement.values, expected.data.reshape(-1))
            continue
        rendered = picture.rendered  # coloured in the worker at about the size shown, whatever the layer's size
        assert rendered is not None and rendered.qimage.width() < 2 * 300 and rendered.qimage.height() < 2 * 280
        # each pixel painted is the colour of the sampled mosaic's pixel under its centre
        qimage = rendered.qimage
        height, width = picture.arrangement.size
        step = max(1, min(width // qimage.width(), height // qimage.height()))
        sampled = picture.arrangement.sampled(step)
        under = sampled[
            np.ix_(under_centres(sampled.shape[0], qimage.height()), under_centres(sampled.shape[1], qimage.width()))
        ]
        painted = np.frombuffer(qimage.constBits(), np.uint32).reshape(qimage.height(), -1)[:, : qimage.width()]
        np.testing.assert_array_equal(painted, np.array(color_table(lut_of(picture)), dtype=np.uint32)[under])
        for step in (1, 2, 3):  # the sampled mosaic is the numpy one's at any step
            want = mosaic(expected.data, picture.settings.scaling, order=picture.arrangement.order, step=step)[0]
            np.testing.assert_array_equal(picture.arrangement.sampled(step), want)
        np.testing.assert_array_equal(picture.channels.data, expected.data)  # made now, on first read

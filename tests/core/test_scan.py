"""The dataset scan (hookscope.core.scan.run and the modules beside it): checked against plain PyTorch, the analytic receptive field of a conv stack and
an independent gradient per unit; resume, skipping, the JSON schema and the command line."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.images import Preprocess, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.accumulators import NO_IMAGE, TopK
from hookscope.core.scan.geometry import original_box
from hookscope.core.scan.hook_pass import layout_of
from hookscope.core.scan.model_copy import copy_without_hooks
from hookscope.core.scan.results import CHECKPOINT_FILE, LABEL_HEIGHT, NOTE_HEIGHT, ScanSettings, read_scan, write_scan
from hookscope.core.scan.run import scan_images

ROOT = Path(__file__).resolve().parents[2]
SMALL = Preprocess(resize=73, crop=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _picture(path: Path, size: tuple[int, int], seed: int) -> Path:
    """Smooth random colour (a real photo's statistics matter less than distinct, tie-free values)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(size[1] // 8 + 2, size[0] // 8 + 2, 3), dtype=np.uint8)
    Image.fromarray(small).resize(size, Image.BILINEAR).save(path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """12 images of different sizes and shapes, one in a subfolder."""
    root = tmp_path_factory.mktemp("scan-images")
    (root / "sub").mkdir()
    rng = np.random.default_rng(7)
    for index in range(12):
        size = (int(rng.integers(60, 130)), int(rng.integers(50, 120)))
        where = root / "sub" if index == 11 else root
        _picture(where / f"photo{index:02d}.{'jpg' if index % 3 == 0 else 'png'}", size, index)
    return root


@pytest.fixture
def small(resnet18_loaded) -> LoadedModel:
    """ResNet-18 (random weights, seed 0) at 64 pixels: a fresh copy per test."""
    return replace(resnet18_loaded, module=copy.deepcopy(resnet18_loaded.module), preprocess=SMALL)


def plain_features(model: nn.Module, x: torch.Tensor, upto: str = "layer3") -> dict[str, torch.Tensor]:
    """ResNet-18's outputs written out in plain PyTorch, no hook anywhere (as far as ``upto``)."""
    out = {"bn1": model.bn1(model.conv1(x))}
    if upto != "bn1":
        out["maxpool"] = model.maxpool(torch.relu(out["bn1"]))
        out["layer1.0.conv1"] = model.layer1[0].conv1(out["maxpool"])
    if upto not in out:
        out["layer1"] = model.layer1(out["maxpool"])
        out["layer2.0.conv1"] = model.layer2[0].conv1(out["layer1"])
        out["layer3"] = model.layer3(model.layer2(out["layer1"]))
    return out


def reference(loaded: LoadedModel, images: list[Path]) -> dict[str, np.ndarray]:
    """Every image's feature maps, one image at a time: (images, C, H, W) per module, float64."""
    maps: dict[str, list[np.ndarray]] = {}
    with torch.no_grad():
        for path in images:
            for name, value in plain_features(
                loaded.module.eval(), loaded.preprocess.to_tensor(read_image(path))
            ).items():
                maps.setdefault(name, []).append(value[0].double().numpy())
    return {name: np.stack(values) for name, values in maps.items()}


def check_ranking(entries, scores: np.ndarray, k: int, tol: float = 1e-5) -> None:
    """The scan's entries are the reference's top k in order, allowing only near-ties to swap places."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    assert len(entries) == len(order)
    for rank, (entry, expected) in enumerate(zip(entries, order)):
        assert math.isclose(entry.score, scores[entry.image], rel_tol=tol, abs_tol=tol), (rank, entry)
        if entry.image != expected:
            assert abs(scores[entry.image] - scores[expected]) <= tol * max(1.0, abs(scores[expected])), (rank, entry)


@pytest.mark.parametrize("by", ["max", "mean"])
def test_scan_equals_plain_pytorch_for_every_image_and_channel(small, folder, by):
    images = find_images(folder, recursive=True)
    modules = ("layer1", "layer2.0.conv1", "layer3")
    k = 4
    result = scan_images(small, images, ScanSettings(modules, top=k, by=by, batch_size=5, boxes=False), root=folder)
    assert result.complete and result.processed == 12 and result.images == [str(p) for p in images]
    maps = reference(small, images)
    for path in modules:
        values = maps[path]  # (12, C, H, W)
        module = result.modules[path]
        assert module.channels == values.shape[1] and len(module.top) == values.shape[1]
        flat = values.reshape(values.shape[0], values.shape[1], -1)
        peak, mean = flat.max(axis=2), flat.mean(axis=2)
        ranking = peak if by == "max" else mean
        for channel in range(module.channels):
            entries = module.top[channel]
            check_ranking(entries, ranking[:, channel], k)
            for entry in entries:  # the position is where that image's channel reaches its maximum
                assert math.isclose(values[entry.image, channel, entry.y, entry.x], peak[entry.image, channel],
                                    rel_tol=1e-5, abs_tol=1e-5)  # fmt: skip
        everything = flat.transpose(1, 0, 2).reshape(flat.shape[1], -1)
        np.testing.assert_allclose(module.mean, everything.mean(axis=1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(module.std, everything.std(axis=1), rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(module.active, (peak > 0).mean(axis=0))


def test_batching_does_not_change_the_result(small, folder):
    images = find_images(folder, recursive=True)
    settings = ScanSettings(("layer1", "layer3"), top=3, batch_size=1, boxes=False)
    one = scan_images(small, images, settings)
    for batch_size in (4, 12):
        other = scan_images(small, images, replace(settings, batch_size=batch_size))
        for path in settings.modules:
            for a, b in zip(one.modules[path].top, other.modules[path].top):
                assert [(t.image, t.y, t.x) for t in a] == [(t.image, t.y, t.x) for t in b]
                np.testing.assert_allclose([t.score for t in a], [t.score for t in b], rtol=1e-5, atol=1e-6)


def test_hooks_and_eval_mode_are_set_once_per_scan_not_per_batch(small, folder, monkeypatch):
    """A batch of one image pays no per-batch setup: the scan registers its forward hooks once (one per scanned
    module) and switches the model to eval mode once, however many batches; between batches the hooks do nothing
    to another forward pass, and afterwards no hook is left and the model's mode is restored."""
    registered: list[nn.Module] = []
    switched: list[bool] = []
    register, train = nn.Module.register_forward_hook, nn.Module.train

    def counting_register(self, *args, **kwargs):
        registered.append(self)
        return register(self, *args, **kwargs)

    def counting_train(self, mode=True):
        if self is small.module:
            switched.append(mode)
        return train(self, mode)

    monkeypatch.setattr(nn.Module, "register_forward_hook", counting_register)
    monkeypatch.setattr(nn.Module, "train", counting_train)
    small.module.train()
    switched.clear()
    x = torch.rand(1, 3, 64, 64)
    outputs = []

    def between_batches(_progress) -> None:  # another pass through the model while the scan holds its hooks
        with torch.no_grad():
            outputs.append(small.module(x))

    images = find_images(folder, recursive=True)
    result = scan_images(small, images, ScanSettings(("layer1", "layer3"), top=2, batch_size=1, boxes=False),
                         progress=between_batches)  # fmt: skip
    assert result.processed == len(images) == 12
    assert len(registered) == 2 and switched == [False, True]
    assert not any(m._forward_hooks for m in small.module.modules()) and small.module.training
    assert len(outputs) == 13 and all(out.shape == (1, 1000) for out in outputs)  # ran to the end, nothing read


def test_topk_merge_is_exact_for_any_split_with_ties_and_nan():
    rng = np.random.default_rng(3)
    channels, count, k = 5, 40, 6
    scores = rng.integers(0, 6, size=(channels, count)).astype(np.float32)  # many ties
    scores[0, 3] = np.nan
    scores[1, :] = np.nan  # a channel of nothing but NaN still fills its k places
    images = np.arange(count)
    expected = [sorted(range(count), key=lambda i: (-np.nan_to_num(scores[c, i], nan=-np.inf), i))[:k]
                for c in range(channels)]  # fmt: skip
    for split in ([40], [1] * 40, [7, 13, 20], [20, 20]):
        running = TopK.empty(channels, k)
        start = 0
        for size in rng.permutation(split):  # the shards come in any order
            part = slice(start, start + size)
            start += size
            shard = TopK.ranked(torch.tensor(scores[:, part]), torch.tensor(images[part]).expand(channels, -1),
                                torch.zeros(channels, size, dtype=torch.int64), k)  # fmt: skip
            running = running.merged(shard, k)
        assert running.image.tolist() == expected
        assert (running.image != NO_IMAGE).all()


def receptive_box(layers: list[tuple[int, int, int]], index: int, size: int) -> tuple[int, int]:
    """The input rows (start, end exclusive) one output row sees through conv layers (kernel, stride, padding)."""
    low = high = index
    for kernel, stride, padding in reversed(layers):
        low, high = low * stride - padding, high * stride - padding + kernel - 1
    return max(0, low), min(size, high + 1)


def test_boxes_are_the_analytic_receptive_field_in_the_original_pixels(tmp_path):
    torch.manual_seed(0)
    layers = [(3, 1, 1), (3, 2, 1), (3, 1, 1)]
    stack = nn.Sequential(nn.Conv2d(3, 4, 3, 1, 1), nn.Conv2d(4, 4, 3, 2, 1), nn.Conv2d(4, 3, 3, 1, 1))
    preprocess = Preprocess(resize=16, crop=16, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    loaded = LoadedModel("stack", stack, "none", False, preprocess, None)
    # (size, crop offset in the resized image): scale 2 everywhere; a landscape and a portrait image are cropped.
    shapes = {"square.png": ((32, 32), (0, 0)), "wide.png": ((40, 32), (2, 0)), "tall.png": ((32, 48), (0, 4))}
    for seed, (name, (size, _)) in enumerate(shapes.items()):
        _picture(tmp_path / name, size, seed)
    images = find_images(tmp_path)
    result = scan_images(loaded, images, ScanSettings(("0", "1", "2"), top=3, batch_size=2))
    checked = 0
    for index, path in enumerate(("0", "1", "2")):
        for channel_top in result.modules[path].top:
            for entry in channel_top:
                (_, _), (left, top) = shapes[Path(result.images[entry.image]).name]
                rows = receptive_box(layers[: index + 1], entry.y, 16)
                cols = receptive_box(layers[: index + 1], entry.x, 16)
                expected = (2 * (cols[0] + left), 2 * (rows[0] + top), 2 * (cols[1] + left), 2 * (rows[1] + top))
                assert entry.box == expected, (path, entry)
                checked += 1
    assert checked == (4 + 4 + 3) * 3


def test_boxes_equal_an_independent_gradient_per_unit_on_resnet(small, tmp_path):
    """bn1 (overwritten in place by the ReLU after it), maxpool (gradients routed to one pixel per window) and a
    conv: the boxes of the first 16 channels' top images against each unit's own gradient, computed alone with plain
    autograd (96 units; the scan computes all 384 in batches)."""
    preprocess = Preprocess(resize=None, crop=64, mean=SMALL.mean, std=SMALL.std)
    loaded = replace(small, preprocess=preprocess)
    sizes = [(64, 64), (80, 72), (72, 96), (68, 64)]  # crops only: even margins, so the offsets are exact halves
    for seed, size in enumerate(sizes):
        _picture(tmp_path / f"p{seed}.png", size, seed + 20)
    images = find_images(tmp_path)
    modules = ("bn1", "maxpool", "layer1.0.conv1")
    result = scan_images(loaded, images, ScanSettings(modules, top=2, batch_size=16, exact_boxes=True))
    assert all(result.modules[path].boxes == "gradient" for path in modules)
    model = copy.deepcopy(small.module).eval()
    empty = 0
    for path in modules:
        assert all(len(entries) == 2 for entries in result.modules[path].top)
        for channel, entries in enumerate(result.modules[path].top[:16]):
            for entry in entries:
                picture = read_image(images[entry.image])
                x = preprocess.to_tensor(picture).requires_grad_(True)
                unit = plain_features(model, x, upto=path)[path][0, channel, entry.y, entry.x]
                (grad,) = torch.autograd.grad(unit, x)
                support = (grad[0] != 0).any(dim=0)
                if not support.any():
                    assert entry.box is None
                    empty += 1
                    continue
                rows, cols = torch.nonzero(support.any(dim=1)).flatten(), torch.nonzero(support.any(dim=0)).flatten()
                left, top = (picture.width - 64) // 2, (picture.height - 64) // 2
                expected = (int(cols[0]) + left, int(rows[0]) + top, int(cols[-1]) + 1 + left, int(rows[-1]) + 1 + top)
                assert entry.box == expected, (path, channel, entry)
    assert empty < 5  # the top images of a channel are where it is active, so nearly every unit has a gradient


@pytest.mark.parametrize(
    ("box", "size", "preprocess", "expected"),
    [
        ((0, 0, 16, 16), (32, 32), Preprocess(16, 16, (0.5,) * 3, (0.5,) * 3), (0, 0, 32, 32)),
        ((3, 5, 7, 9), (40, 32), Preprocess(16, 16, (0.5,) * 3, (0.5,) * 3), (10, 10, 18, 18)),
        ((1, 1, 2, 2), (10, 10), Preprocess(3, 3, (0.5,) * 3, (0.5,) * 3), (3, 3, 7, 7)),  # 10/3: start down, end up
        ((0, 0, 3, 3), (7, 7), Preprocess(None, 11, (0.5,) * 3, (0.5,) * 3), (0, 0, 1, 1)),  # crop pads 2 each side
        ((0, 0, 2, 2), (7, 7), Preprocess(None, 11, (0.5,) * 3, (0.5,) * 3), None),  # only padding
        (
            (4, 4, 5, 5),
            (30, 20),
            Preprocess(10, 10, (0.5,) * 3, (0.5,) * 3),
            (12, 8, 14, 10),
        ),  # 15x10, crop at 2.5 -> 2
    ],
)
def test_original_box_undoes_the_crop_and_the_resize(box, size, preprocess, expected):
    assert original_box(box, size, preprocess) == expected


def test_an_unreadable_file_is_skipped_with_its_reason(small, folder, tmp_path):
    for path in find_images(folder):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    images = find_images(tmp_path)
    broken = [str(p) for p in images].index(str(tmp_path / "broken.png"))
    result = scan_images(small, images, ScanSettings(("layer1",), top=3, batch_size=4, boxes=False))
    assert result.processed == len(images) - 1
    assert [index for index, _ in result.skipped] == [broken]
    assert "broken.png" in result.skipped[0][1] and "corrupt" in result.skipped[0][1]
    assert all(entry.image != broken for channel in result.modules["layer1"].top for entry in channel)


def test_a_stopped_scan_resumes_to_the_same_result(small, folder, tmp_path):
    images = find_images(folder, recursive=True)
    # gradient boxes: a box phase long enough to stop in (the default fields take one step)
    settings = ScanSettings(("layer1", "layer1.0.conv1"), top=1, batch_size=4, exact_boxes=True)
    fresh = scan_images(small, images, settings, out_dir=tmp_path / "fresh")
    assert (tmp_path / "fresh" / CHECKPOINT_FILE).exists()  # a finished scan keeps its checkpoint until
    write_scan(fresh, tmp_path / "fresh")  # scan.json is on disk (a full disk must not lose it)
    assert not (tmp_path / "fresh" / CHECKPOINT_FILE).exists()

    batches = []
    stopped = scan_images(small, images, settings, out_dir=tmp_path / "out",
                          progress=lambda p: batches.append(p.done), cancelled=lambda: len(batches) >= 3)  # fmt: skip
    assert not stopped.complete and stopped.processed == 8
    assert (tmp_path / "out" / CHECKPOINT_FILE).exists()
    # the boxes phase can be stopped and resumed too
    seen = []
    in_boxes = scan_images(small, images, settings, out_dir=tmp_path / "out", resume=True,
                           progress=lambda p: seen.append(p.phase), cancelled=lambda: seen.count("boxes") >= 2)  # fmt: skip
    assert not in_boxes.complete and in_boxes.processed == 12
    resumed = scan_images(small, images, settings, out_dir=tmp_path / "out", resume=True)
    assert resumed.complete
    write_scan(resumed, tmp_path / "out")
    assert not (tmp_path / "out" / CHECKPOINT_FILE).exists()
    fresh_json, resumed_json = fresh.to_json(), resumed.to_json()
    for data in (fresh_json, resumed_json):
        data["scan"].pop("scan_s"), data["scan"].pop("boxes_s")
    assert resumed_json == fresh_json

    stopped_at_once = scan_images(small, images, settings, out_dir=tmp_path / "again", cancelled=lambda: True)
    assert stopped_at_once.processed == 0 and (tmp_path / "again" / CHECKPOINT_FILE).exists()  # Ctrl-C at once too
    with pytest.raises(HookscopeError, match="holds a scan of something else.*top"):
        scan_images(small, images, replace(settings, top=3), out_dir=tmp_path / "again", resume=True)


def test_scan_json_has_exactly_the_documented_schema(small, folder, tmp_path):
    images = find_images(folder)
    result = scan_images(small, images, ScanSettings(("layer1.0.conv1",), top=2, batch_size=8))
    path = write_scan(result, tmp_path)
    data = json.loads(path.read_text())
    assert {"model", "images", "modules"} <= set(data) and set(data) - {"model", "images", "modules"} == {"scan"}
    assert data["images"] == [str(p) for p in images]
    module = data["modules"]["layer1.0.conv1"]
    assert (
        set(module) == {"channels", "boxes", "top", "stats"} and module["channels"] == 64 and len(module["top"]) == 64
    )
    assert module["boxes"] == "receptive field" and set(data["scan"]["box_definitions"]) == {"receptive field",
                                                                                           "gradient"}  # fmt: skip
    assert set(module["stats"]) == {"mean", "std", "active"} and all(len(v) == 64 for v in module["stats"].values())
    entry = module["top"][0][0]
    assert set(entry) == {"image", "score", "y", "x", "box"}
    assert isinstance(entry["image"], int) and isinstance(entry["score"], float) and len(entry["box"]) == 4
    assert read_scan(tmp_path).to_json() == result.to_json()


def test_the_copy_runs_without_the_live_models_hooks(small):
    live = small.module.eval()
    calls = []
    reader = live.layer1.register_forward_hook(lambda *_: calls.append(1))
    edit = live.layer2.register_forward_hook(lambda _m, _a, out: out * 0)  # an edit: the copy must not see it
    copied = copy_without_hooks(live)
    assert all(not m._forward_hooks for m in copied.modules())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        plain_copy = copied(x)
        assert calls == []
        edited = live(x)
        assert calls == [1] and len(live.layer1._forward_hooks) == 1  # the live model keeps its hooks
        reader.remove(), edit.remove()
        assert not torch.equal(plain_copy, edited) and torch.equal(plain_copy, live(x))


@pytest.mark.parametrize(
    ("shape", "kind", "channels", "positions"),
    [((2, 64, 7, 9), "maps", 64, 63), ((2, 7, 7, 768), "maps-last", 768, 49), ((2, 197, 384), "tokens", 384, 197),
     ((2, 1000), "vector", 1000, 1)],
)  # fmt: skip
def test_layouts_read_channels_as_the_window_does(shape, kind, channels, positions):
    layout = layout_of(shape, "m")
    assert (layout.kind, layout.channels, layout.positions) == (kind, channels, positions)
    tensor = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    assert layout.view(tensor).shape == (2, channels, positions)


def test_an_output_the_scan_cannot_read_is_one_line_naming_the_module():
    with pytest.raises(HookscopeError, match=r"^blocks's output is 2x3x4x5 per image") as info:
        layout_of((1, 2, 3, 4, 5), "blocks")
    assert info.value.module_path == "blocks"


# ---- the command line ------------------------------------------------------------------------------------------
def _cli(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hookscope",
        "scan",
        "--model",
        "resnet18",
        "--weights",
        "none",
        "--size",
        "64",
        *args,
    ]


def test_cli_writes_scan_json_and_png_strips(folder, tmp_path, capsys):
    from hookscope.cli import main

    out = tmp_path / "out"
    code = main(["scan", "--model", "resnet18", "--weights", "none", "--size", "64", "--images", str(folder),
                 "--recursive", "--layers", "layer1.0.conv1,layer2", "--top", "2", "--out", str(out),
                 "--batch-size", "5", "--png", "--no-boxes"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads((out / "scan.json").read_text())
    assert list(data["modules"]) == ["layer1.0.conv1", "layer2"] and len(data["images"]) == 12
    assert data["modules"]["layer2"]["top"][0][0]["box"] is None  # --no-boxes
    strips = sorted((out / "png" / "layer2").glob("channel-*.png"))
    assert len(strips) == 128 and len(list((out / "png" / "layer1.0.conv1").glob("*.png"))) == 64
    # each patch with its score and file name under it, under the line that says the weights are random
    assert Image.open(strips[0]).size == (2 * 96 + 2, NOTE_HEIGHT + 96 + LABEL_HEIGHT)
    assert "-> " in captured.out and "192 PNG strips" in captured.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "layer9"], "The model has no module named 'layer9'."),
        (["--layers", "layer1", "--images", "/no/such/folder"], "Folder '/no/such/folder' does not exist."),
        (["--layers", "layer1", "--size", "-3"], "--size must be a number of pixels"),
    ],
)
def test_cli_errors_are_one_line(folder, tmp_path, capsys, args, message):
    from hookscope.cli import main

    base = ["scan", "--model", "resnet18", "--weights", "none", "--images", str(folder), "--out", str(tmp_path)]
    code = main(base + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_cli_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path):
    """A real SIGINT to a real process: it stops at a batch boundary, exits 130 with the resume hint, and
    --resume finishes with the same result as an uninterrupted scan."""
    images = tmp_path / "images"
    images.mkdir()
    for index in range(48):
        _picture(images / f"i{index:02d}.png", (72, 64), index)
    args = ["--images", str(images), "--layers", "layer1,layer3", "--top", "2", "--batch-size", "1", "--no-boxes"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(_cli(*args, "--out", str(tmp_path / "out")), stderr=subprocess.PIPE, text=True,
                               cwd=ROOT, env=env)  # fmt: skip
    seen = ""
    deadline = time.monotonic() + 120
    while "scan: " not in seen and time.monotonic() < deadline:
        seen += process.stderr.read(1)
    process.send_signal(signal.SIGINT)
    err = seen + process.communicate(timeout=120)[1]
    assert process.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    assert (tmp_path / "out" / CHECKPOINT_FILE).exists() and not (tmp_path / "out" / "scan.json").exists()
    resumed = subprocess.run(_cli(*args, "--out", str(tmp_path / "out"), "--resume"), capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    fresh = subprocess.run(_cli(*args, "--out", str(tmp_path / "fresh")), capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=300)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    a, b = (json.loads((tmp_path / name / "scan.json").read_text()) for name in ("out", "fresh"))
    assert a["modules"] == b["modules"]


def test_bench_scan_prints_both_throughputs_the_ratio_and_the_box_cost(capsys):
    from hookscope.cli import main

    code = main(["bench", "--scan", "--images", "8", "--size", "64", "--batch-size", "4", "--layers", "layer1,fc"])
    out = capsys.readouterr().out
    assert code == 0
    assert "bare batched inference" in out and "img/s, ratio " in out and "per-pass ratios" in out
    assert "ms per top-k entry: layer1 " in out and ", fc " in out
    assert "boxes (default: receptive field): " in out and "% of the whole scan" in out


def test_cli_ray_without_ray_installed_is_one_line(folder, tmp_path, capsys, monkeypatch):
    from hookscope.cli import main

    monkeypatch.setattr("hookscope.core.scan.on_ray.ray_available", lambda: False)
    code = main(["scan", "--model", "resnet18", "--weights", "none", "--images", str(folder), "--layers", "layer1",
                 "--out", str(tmp_path), "--ray"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["hookscope: error: The scan on Ray needs Ray Data: pip install 'hookscope[ray]'."]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one torch thread: no OpenMP team to start")
def test_the_scan_reader_starts_no_second_openmp_team(small, folder):
    """The reader thread only decodes and fits pictures (Pillow): a torch operation there would start a second
    OpenMP thread team, which makes the model's own team sleep between operations. The scan and its box phase add
    the reader thread and nothing else."""

    def threads():
        return len(os.listdir("/proc/self/task"))

    seen: list[int] = []
    # full-size inputs: torch runs an operation on several threads only from 32768 values on
    loaded = replace(small, preprocess=Preprocess(resize=256, crop=224, mean=SMALL.mean, std=SMALL.std))
    torch.ones(1 << 16).add_(1)  # an operation on this thread: the model's own team is up
    before = threads()
    images = find_images(folder, recursive=True)
    scan_images(
        loaded,
        images,
        ScanSettings(("layer1.0.conv1",), top=2, batch_size=4),
        progress=lambda _p: seen.append(threads()),
    )
    assert seen and max(seen) <= before + 1, (before, seen)

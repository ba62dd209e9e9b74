"""The README's screenshots of a segmentation, a detection and an embedding model in the window, read back from
the X server's own pixels (as ``real_screen.py`` does: ``QScreen.grabWindow(0)``, never ``QWidget.grab()``).

Run under Xvfb (with openbox) and the xcb platform; the person's steps go through the X server (xdotool):

    Xvfb :9 -screen 0 1366x768x24 & DISPLAY=:9 openbox &
    DISPLAY=:9 QT_QPA_PLATFORM=xcb python tests/ui/task_screenshots.py --kind segmentation --out DIR

Pretrained weights are not downloaded here: the models run with the weights given by ``--weights`` (``none``:
untrained, so masks and boxes are noise, and the captions say so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch  # torch before Qt
from PIL import Image
from PySide6.QtCore import QPoint, QPointF

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from real_screen import at, pause, pointer, rest_pointer, screen_image, settle  # noqa: E402

from hookscope.core.common.resources import sample_image  # noqa: E402
from hookscope.ui.app import application, make_window  # noqa: E402
from hookscope.ui.state.requests import ImageSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "segmentation": ("lraspp_mobilenet_v3_large", ["backbone.4", "backbone.12"]),
    "detection": ("fasterrcnn_mobilenet_v3_large_320_fpn", ["backbone.body.4", "backbone.body.13"]),
    "embedding": ("hf:local/clip", ["vision_model.encoder.layers.0", "vision_model.encoder.layers.1"]),
}


def biased_detector():
    """Faster R-CNN, untrained, with the box classifier's bias of class 17 (cat) at 3 and 18 (dog) at 2.5: an
    untrained detector returns no box at all (every proposal scores about 1/91, under its 0.05 floor); this one
    returns boxes at two score levels. The boxes are noise, and the README's caption says so."""

    from hookscope.core.models.catalogue import load_model

    loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
    loaded.module.roi_heads.detections_per_img = 4  # the few best: labels of many overlap
    with torch.no_grad():
        bias = loaded.module.roi_heads.box_predictor.cls_score.bias
        bias.zero_()
        bias[17], bias[18] = 3.0, 2.5
    return loaded


def make_clip(folder: Path) -> None:
    """A small CLIP with random weights (224 px, 16 px patches, two layers) and a word-level tokenizer, written
    offline with ``save_pretrained`` and served from 127.0.0.1 as a Hub (tests/hub_server.py)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    words = ["<pad>", "<unk>", "<s>", "</s>", "a", "photo", "of", "dog", "cat", "coffee", "cup"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=16,
    ).save_pretrained(folder)
    config = CLIPConfig(
        text_config={
            "vocab_size": len(words),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
            "eos_token_id": 3,
            "bos_token_id": 2,
            "pad_token_id": 0,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 224,
            "patch_size": 16,
        },
        projection_dim=16,
    )
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}).save_pretrained(folder)


def input_point(window, x: float, y: float) -> QPoint:
    """Where input pixel (x, y) is on the input view's viewport."""
    panel = window.input_panel
    return panel.view.mapFromScene(panel._box.mapViewToScene(QPointF(x, y)))


def save_screen(path: Path) -> None:
    """The X server's pixels as a PNG, reduced to a palette of 256 colours (a few hundred KB, not a megabyte)."""
    shot = screen_image()
    width, height = shot.width(), shot.height()
    raw = np.frombuffer(shot.constBits(), dtype=np.uint8, count=shot.bytesPerLine() * height)
    bgra = raw.reshape(height, shot.bytesPerLine())[:, : width * 4].reshape(height, width, 4)
    rgb = np.ascontiguousarray(bgra[:, :, [2, 1, 0]])
    Image.fromarray(rgb).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True
    )
    print(f"saved {path} ({path.stat().st_size // 1024} KB)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=sorted(MODELS), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--weights", default="none")
    parser.add_argument("--size", default="1366x768")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))
    name, checks = MODELS[args.kind]

    app = application()
    if args.kind == "embedding":
        import os
        import tempfile

        from tests.hub_server import HubServer
        from tests.loopback import serving

        folder = Path(tempfile.mkdtemp(prefix="hub-"))
        make_clip(folder / "repos" / "local" / "clip")
        hub = serving(HubServer(folder / "repos"))
        server = hub.__enter__()
        os.environ.update(HF_ENDPOINT=server.base, HF_HOME=str(folder / "hf"))
        window = make_window(model=name, weights="default", ticks=checks, remember=False)
    elif args.kind == "detection":
        window = make_window(weights=args.weights, ticks=["layer1.0.conv1"], remember=False)
    else:
        window = make_window(model=name, weights=args.weights, ticks=checks, remember=False)
    window.show_dialogs = False
    window.resize(width, height)
    window.move(0, 0)
    window.show()
    settle(window, app, timeout_s=300)
    space = window.workspace
    assert space.last is not None, "the first run did not come"

    if args.kind == "segmentation":
        # a person drags a rectangle over the cat's head on the input: the most common class there, over it
        viewport = window.input_panel.view.viewport()
        pause(600)
        pointer(*at(viewport, input_point(window, 120, 100)), "mousedown", "1")
        for step in range(1, 8):
            pointer(*at(viewport, input_point(window, 120 + 30 * step, 100 + 28 * step)))
        pointer("mouseup", "1")
        settle(window, app)
        window.features["grad_cam"].show_module(checks[1])
    elif args.kind == "detection":
        space.load_model_with(f"{name} (box classifier bias set)", biased_detector)
        settle(window, app, timeout_s=300)
        space.set_ticked([(path, kind) for path in checks for kind in ("forward", "tensor")], True)
        settle(window, app)
        window.predictions.detection.set_threshold(0.15)
        settle(window, app)
        items = window.input_panel.detections.items
        if items:
            box = min((item.box for item in items), key=lambda b: (b.x1 - b.x0) * (b.y1 - b.y0))
            pointer(
                *at(
                    window.input_panel.view.viewport(),
                    input_point(window, (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2),
                ),
                "click",
                "1",
            )
        settle(window, app)
        window.features["grad_cam"].show_module(checks[1])
    else:
        other = ROOT / "resources" / "coffee.png"
        space.set_image_b(ImageSource.from_path(other))
        settle(window, app)
        button = window.predictions.similarity.image_b_button
        pointer(*at(button, QPoint(button.width() // 2, button.height() // 2)), "click", "1")
        settle(window, app)
    rest_pointer(window)
    settle(window, app)
    print(f"target: {space.target!r}; result: {space.last.result.target}; image: {sample_image().name}", flush=True)
    save_screen(out / f"{args.kind}.png")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

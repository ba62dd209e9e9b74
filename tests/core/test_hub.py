"""Models from the Hugging Face Hub by name: a real Hub on 127.0.0.1 (tests/hub_server.py) serving tiny models
saved with ``save_pretrained``, the real huggingface_hub client, the command line run as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookscope.core.common.errors import DownloadCancelled, ModelError
from hookscope.core.models import hub as hub_models
from tests.hub_server import (
    HubServer,
    commit_of,
    make_bert,
    make_clip,
    make_dino,
    make_mae,
    make_segformer,
    make_timm,
    make_vit,
    use_hub,
)
from tests.loopback import serving

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "chelsea.png"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub")
    make_vit(folder / "tiny" / "vit")
    make_clip(folder / "tiny" / "clip")
    make_segformer(folder / "tiny" / "segformer")
    make_dino(folder / "tiny" / "dino")
    make_bert(folder / "tiny" / "bert")
    make_mae(folder / "tiny" / "mae")
    make_timm(folder / "timm" / "test_resnet.r160_in1k")
    make_vit(folder / "tiny" / "gated")
    return folder


@pytest.fixture
def hub(repos, tmp_path, monkeypatch):
    """The Hub serving ``repos``, and an empty Hugging Face cache, for this process and the commands it runs."""
    with serving(HubServer(repos, gated=("tiny/gated",))) as server:
        use_hub(monkeypatch, server, tmp_path / "hf")
        yield server


def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hookscope", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))  # fmt: skip


def gets(server: HubServer, name: str) -> list[str | None]:
    """The Range headers of the GETs of ``name`` (None: a whole-file GET)."""
    return [r for method, path, r in server.requests if method == "GET" and path.endswith("/" + name)]


def test_export_loads_a_hub_classifier_by_name(hub, tmp_path):
    out = tmp_path / "out"
    done = hookscope("export", "--model", "hf:tiny/vit", "--weights", "default", "--image", str(SAMPLE),
                     "--layers", "vit.layers.0,classifier", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "downloading hf:tiny/vit" in done.stderr and "MB" in done.stderr  # the progress line
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["name"] == "hf:tiny/vit" and manifest["model"]["source"] == "hub"
    assert manifest["model"]["pretrained"] is True
    # The repo's image processor: 40 x 40, squashed, bicubic, its own mean and std.
    assert manifest["preprocessing"]["crop"] == 40 and manifest["preprocessing"]["squash"] is True
    assert manifest["preprocessing"]["interpolation"] == "bicubic"
    assert manifest["preprocessing"]["mean"] == pytest.approx([0.5, 0.4, 0.3])
    assert manifest["modules"]["classifier"]["records"]
    assert sorted(p["label"] for p in manifest["prediction_top5"]) == ["thing0", "thing1", "thing2"]  # id2label
    snapshot = Path(os.environ["HF_HOME"]) / "hub" / "models--tiny--vit" / "snapshots" / commit_of("tiny/vit")
    served = (hub.folder / "tiny" / "vit" / "model.safetensors").read_bytes()
    assert (snapshot / "model.safetensors").read_bytes() == served  # huggingface_hub's own cache layout


def test_a_session_reopens_a_hub_model_by_name(hub):
    from hookscope.core.models.source import ModelSource, open_model
    from hookscope.core.outputs.session import model_entry

    loaded = hub_models.load_hub_model("hf:tiny/vit")
    entry = model_entry(loaded)
    assert entry == {"name": "hf:tiny/vit", "weights": "default", "seed": 0}
    again = open_model(ModelSource(name=entry["name"], weights=entry["weights"], seed=entry["seed"]))
    assert again.source == "hub" and again.preprocess == loaded.preprocess


def test_weights_none_builds_from_the_config_without_fetching_the_weights(hub):
    loaded = hub_models.load_hub_model("hf:tiny/vit", "none", seed=3)
    assert not loaded.pretrained and loaded.weights_text == "Random weights (seed 3)"
    assert gets(hub, "model.safetensors") == [] and gets(hub, "config.json")
    again = hub_models.load_hub_model("hf:tiny/vit", "none", seed=3)
    first, second = loaded.module.state_dict(), again.module.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)  # seeded


def test_preprocessing_matches_the_repos_image_processor(repos):
    from transformers import AutoImageProcessor

    image = Image.open(SAMPLE).convert("RGB")
    for name, tolerance in (("vit", 0.02), ("clip", 0.05)):
        processor = AutoImageProcessor.from_pretrained(str(repos / "tiny" / name))
        preprocess = hub_models.hub_preprocess(processor)
        theirs = processor(images=image, return_tensors="pt")["pixel_values"]
        ours = preprocess.to_tensor(image)
        assert ours.shape == theirs.shape
        assert float((ours - theirs).abs().mean()) < tolerance, name
    clip = hub_models.hub_preprocess(AutoImageProcessor.from_pretrained(str(repos / "tiny" / "clip")))
    assert (clip.resize, clip.crop, clip.squash, clip.interpolation) == (36, 32, False, "bicubic")


def test_preprocessing_of_the_usual_image_processors():
    """The kinds of ``size`` the Hub's image models use, against the processors' own output."""
    from transformers import BeitImageProcessor, BitImageProcessor, ConvNextImageProcessor, SiglipImageProcessor

    image = Image.open(SAMPLE).convert("RGB")
    processors = {
        "convnext": ConvNextImageProcessor(size={"shortest_edge": 224}, crop_pct=0.875),  # resize 256, crop 224
        "convnext 384": ConvNextImageProcessor(size={"shortest_edge": 384}),  # squashed to 384 x 384
        "dinov2": BitImageProcessor(size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224},
                                    resample=3, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]),
        "siglip": SiglipImageProcessor(),  # 224 x 224, mean and std 0.5
        "beit": BeitImageProcessor(size={"height": 256, "width": 256}, do_center_crop=True,
                                   crop_size={"height": 224, "width": 224}),  # squashed to 256, then crop 224
    }  # fmt: skip
    for name, processor in processors.items():
        theirs = processor(images=image, return_tensors="pt")["pixel_values"]
        ours = hub_models.hub_preprocess(processor).to_tensor(image)
        assert ours.shape == theirs.shape and float((ours - theirs).abs().mean()) < 1e-3, name


def test_a_cut_download_resumes_with_a_range_request(hub):
    hub.drop_once.add("timm/test_resnet.r160_in1k/model.safetensors")
    path = hub_models.fetch_timm_weights("test_resnet")
    served = (hub.folder / "timm" / "test_resnet.r160_in1k" / "model.safetensors").read_bytes()
    assert path.read_bytes() == served
    ranges = gets(hub, "model.safetensors")
    assert ranges[0] is None and ranges[1] is not None and int(ranges[1].split("=")[1].rstrip("-")) > 0


def test_a_cancelled_download_keeps_its_part_and_the_next_one_resumes_it(hub):
    seen = []

    def cancelled() -> bool:
        return bool(seen) and seen[-1] > 500_000

    with pytest.raises(DownloadCancelled):
        hub_models.fetch_timm_weights("test_resnet", progress=lambda d, t, r: seen.append(d), cancelled=cancelled)
    blobs = hub_models.repo_cache("timm/test_resnet.r160_in1k") / "blobs"
    partial = [p for p in blobs.iterdir() if p.name.endswith(".incomplete")]
    assert len(partial) == 1 and partial[0].stat().st_size > 400_000
    kept = partial[0].stat().st_size
    done = []
    path = hub_models.fetch_timm_weights("test_resnet", progress=lambda d, t, r: done.append((d, t)))
    served = (hub.folder / "timm" / "test_resnet.r160_in1k" / "model.safetensors").read_bytes()
    assert path.read_bytes() == served and not any(blobs.glob("*.incomplete"))
    assert gets(hub, "model.safetensors")[-1] == f"bytes={kept}-"
    assert done[-1] == (len(served), len(served))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == path.resolve().name  # the blob is named by its SHA-256


def test_offline_from_the_cache(hub, repos, tmp_path):
    out = tmp_path / "out"
    assert hookscope("download", "--model", "hf:tiny/dino").returncode == 0
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the Hub is unreachable
    done = hookscope("export", "--model", "hf:tiny/dino", "--image", str(SAMPLE), "--layers", "encoder.pooler",
                     "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "opened from the cache" in done.stderr


def test_offline_and_not_cached_is_one_line_exit_2(hub, tmp_path):
    out = tmp_path / "out"
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the Hub is unreachable
    missing = hookscope("export", "--model", "hf:tiny/vit", "--image", str(SAMPLE), "--out", str(out))
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in the Hugging Face cache" in lines[0] and "cannot be reached" in lines[0]


@pytest.mark.parametrize(("name", "words"), [
    ("hf:tiny/nothere", "does not exist on the Hugging Face Hub"),
    ("hf:tiny/bert", "hf:tiny/bert is a bert text model, not an image model"),
    ("hf:tiny/gated", "is gated"),
    ("hf:tiny/mae", "hf:tiny/mae is a vit_mae model for pre training, which Hookscope does not open"),
    ("hf:not a name", "is not a Hugging Face model name"),
])  # fmt: skip
def test_what_cannot_be_opened_is_one_line_exit_2(hub, tmp_path, name, words):
    done = hookscope("export", "--model", name, "--image", str(SAMPLE), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_timm_pretrained_weights_come_from_the_hub(hub, tmp_path):
    out = tmp_path / "out"
    done = hookscope("export", "--model", "timm/test_resnet", "--weights", "default", "--image", str(SAMPLE),
                     "--layers", "conv1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "downloading timm/test_resnet's weights" in done.stderr
    assert json.loads((out / "manifest.json").read_text())["model"]["pretrained"] is True
    from safetensors.torch import load_file

    from hookscope.core.models.catalogue import load_model

    loaded = load_model("timm/test_resnet", "default")  # from the cache now, as timm reads it
    served = load_file(str(hub.folder / "timm" / "test_resnet.r160_in1k" / "model.safetensors"))
    state = loaded.module.state_dict()
    assert loaded.pretrained and all(torch.equal(state[k], v) for k, v in served.items())


def test_segmentation_and_embedding_models(hub):
    seg = hub_models.load_hub_model("hf:tiny/segformer")
    assert seg.task == "segmentation" and seg.categories == ["part0", "part1", "part2", "part3"]
    logits = seg.module(seg.preprocess.to_tensor(Image.open(SAMPLE).convert("RGB"))).logits
    assert logits.shape[:2] == (1, 4) and logits.ndim == 4
    dino = hub_models.load_hub_model("hf:tiny/dino")
    assert dino.task == "embedding" and dino.text_embedder is None
    x = dino.preprocess.to_tensor(Image.open(SAMPLE).convert("RGB"))
    assert torch.equal(dino.module(x), dino.module.encoder(pixel_values=x).pooler_output)


def test_clip_image_tower_and_text_embedder(hub):
    from transformers import CLIPModel

    clip = hub_models.load_hub_model("hf:tiny/clip")
    assert clip.task == "embedding"
    paths = [p for p, _ in clip.module.named_modules()]
    assert "vision_model.encoder.layers.0.self_attn" in paths and not any(p.startswith("text_model") for p in paths)
    x = clip.preprocess.to_tensor(Image.open(SAMPLE).convert("RGB"))
    full = CLIPModel.from_pretrained(str(hub_models.cached_snapshot("tiny/clip"))).eval()
    with torch.no_grad():
        expected = full.get_image_features(pixel_values=x).pooler_output
        assert torch.allclose(clip.module(x), expected, atol=1e-6)
    dog, cat = clip.text_embedder("a photo of a dog"), clip.text_embedder("a photo of a cat")
    assert dog.shape == (1, 8) and float(dog.norm()) == pytest.approx(1.0, abs=1e-5)
    assert not torch.allclose(dog, cat)


def test_a_file_that_does_not_match_the_hubs_checksum_is_discarded(hub, tmp_path):
    from hookscope.core.common.errors import WeightsDownloadError

    # A blob whose partial already holds wrong bytes of the right length: the check catches it.
    repo = "timm/test_resnet.r160_in1k"
    served = (hub.folder / repo / "model.safetensors").read_bytes()
    blobs = hub_models.repo_cache(repo) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / (hashlib.sha256(served).hexdigest() + ".incomplete")).write_bytes(b"x" * len(served))
    with pytest.raises(WeightsDownloadError, match="does not match the Hub's checksum"):
        hub_models.fetch_timm_weights("test_resnet")
    assert not any(blobs.iterdir())
    assert hub_models.fetch_timm_weights("test_resnet").read_bytes() == served


def test_names(hub):
    with pytest.raises(ModelError, match="not a Hugging Face model name"):
        hub_models.repo_of("hf:a/b/c")
    assert hub_models.repo_of("hf:google/vit-base-patch16-224") == "google/vit-base-patch16-224"


def test_a_squashed_preprocess_resizes_the_whole_picture_and_maps_boxes_back():
    from hookscope.core.models.images import Preprocess
    from hookscope.core.models.inputs import describe_requirements
    from hookscope.core.scan.geometry import original_box

    squash = Preprocess(resize=None, crop=40, mean=(0.5,) * 3, std=(0.5,) * 3, squash=True)
    picture = Image.new("RGB", (80, 40), (10, 200, 30))
    assert squash.fitted(picture).size == (40, 40)
    assert squash.to_tensor(picture).shape == (1, 3, 40, 40)
    assert original_box((0, 0, 20, 20), (80, 40), squash) == (0, 0, 40, 20)
    cropped = Preprocess(resize=50, crop=40, mean=(0.5,) * 3, std=(0.5,) * 3, squash=True)  # to 50 x 50, crop 40
    assert cropped.fitted(picture).size == (40, 40)
    assert original_box((0, 0, 40, 40), (80, 40), cropped) == (8, 4, 72, 36)
    assert "aspect ratio not kept, centre crop" in describe_requirements(cropped)
    assert "aspect ratio not kept" in describe_requirements(squash)
    assert squash.describe()["squash"] is True and Preprocess(**squash.describe()) == squash
    plain = Preprocess(resize=256, crop=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert "squash" not in plain.describe()  # records of torchvision-style preprocessing are as they were


@pytest.mark.slow  # 10 s; the same resume, in-process: test_a_cancelled_download_keeps_its_part_...
def test_ctrl_c_keeps_the_part_that_came_and_the_next_download_resumes_it(hub):
    import signal
    import time

    hub.slow.add("timm/test_resnet.r160_in1k/model.safetensors")  # 8 kB every 0.1 s: time to press Ctrl-C
    process = subprocess.Popen(
        [sys.executable, "-m", "hookscope", "download", "--model", "timm/test_resnet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    blobs = hub_models.repo_cache("timm/test_resnet.r160_in1k") / "blobs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size > 100_000 for p in blobs.glob("*.incomplete")):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    kept = [p.stat().st_size for p in blobs.glob("*.incomplete")]
    assert len(kept) == 1 and kept[0] > 100_000
    hub.slow.clear()
    done = hookscope("download", "--model", "timm/test_resnet")
    assert done.returncode == 0, done.stderr
    served = (hub.folder / "timm" / "test_resnet.r160_in1k" / "model.safetensors").read_bytes()
    assert Path(done.stdout.strip()).read_bytes() == served
    assert gets(hub, "model.safetensors")[-1] == f"bytes={kept[0]}-"


def test_without_transformers_the_name_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed: find_spec finds nothing
    with pytest.raises(ModelError, match=r"needs transformers: pip install 'hookscope\[hub\]'"):
        hub_models.check_hub_name("hf:google/vit-base-patch16-224")


@pytest.mark.slow  # the window's CLIP text target runs in the default run (tests/ui/test_seg_det_window.py)
def test_a_text_target_on_a_clip_model_is_the_cosine_to_the_texts_embedding(hub, tmp_path):
    """--target text:PROMPT through the command line on a CLIP-like model from the Hub: the manifest's objective is
    the cosine similarity of the image's embedding to the prompt's, and the input gradient is its gradient."""
    import torch.nn.functional as F

    out = tmp_path / "out"
    done = hookscope("export", "--model", "hf:tiny/clip", "--weights", "default", "--image", str(SAMPLE),
                     "--layers", "vision_model.encoder.layers.0", "--target", "text:a photo of a dog", "--out", str(out),
                     "--no-png")  # fmt: skip
    assert done.returncode == 0, done.stderr
    target = json.loads((out / "manifest.json").read_text())["target"]
    assert target["description"] == "cosine similarity to the text 'a photo of a dog'"
    clip = hub_models.load_hub_model("hf:tiny/clip")
    x = torch.from_numpy(np.load(out / "input.npy"))
    with torch.no_grad():
        expected = F.cosine_similarity(clip.module(x), clip.text_embedder("a photo of a dog"))[0]
    assert target["objective"]["value"] == pytest.approx(float(expected), abs=1e-5)
    xin = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(
        F.cosine_similarity(clip.module(xin), clip.text_embedder("a photo of a dog"))[0], [xin]
    )
    assert np.allclose(np.load(out / "input_grad.npy"), grad.numpy(), atol=1e-6)
    # a model without a text tower: one line
    done = hookscope("export", "--model", "hf:tiny/vit", "--weights", "default", "--image", str(SAMPLE),
                     "--layers", "classifier", "--target", "text:a dog", "--out", str(tmp_path / "no"))  # fmt: skip
    assert done.returncode == 2 and "text tower" in done.stderr.splitlines()[-1]

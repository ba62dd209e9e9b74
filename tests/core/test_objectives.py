"""Gradient targets beyond a classifier's class (issue 25): segmentation, detection and embeddings, checked against
the objective written by hand in plain PyTorch and against pytorch-grad-cam (the anchor) with the same target and
layer. Real torchvision models with random weights; nothing is downloaded."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from cli_output import message_lines

from hookscope.core.common.errors import RunError
from hookscope.core.common.resources import sample_image
from hookscope.core.engine.capture import capture_run
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.objectives import with_reference
from hookscope.core.engine.target_words import Objective, parse_target
from hookscope.core.models.catalogue import load_model
from hookscope.core.models.images import read_image
from hookscope.core.pictures.cam import run_grad_cam

SEG = "lraspp_mobilenet_v3_large"
DET = "fasterrcnn_mobilenet_v3_large_320_fpn"
SEG_LAYER = "backbone.12"  # (1, 112, 20, 31) at 320 px
DET_LAYER = "backbone.body.13"


@pytest.fixture(scope="module")
def seg():
    """The model at 320 px instead of its 520 (the photo's shorter side): what is checked does not depend on the
    size, and the run costs a third."""
    loaded = load_model(SEG, "none")
    return dataclasses.replace(loaded, preprocess=dataclasses.replace(loaded.preprocess, resize=320, crop=320))


@pytest.fixture(scope="module")
def det():
    loaded = load_model(DET, "none")
    loaded.module.roi_heads.score_thresh = 0.0  # an untrained detector's scores are all near 1/91: keep its boxes
    loaded.module.transform.min_size, loaded.module.transform.max_size = (192,), 320  # a third of the 320 px run
    return loaded


@pytest.fixture(scope="module")
def photo():
    return read_image(sample_image())


def hooked_run(loaded, x, target, layer):
    registry = HookRegistry(loaded.module)
    registry.add(layer, "forward")
    registry.add(layer, "tensor")
    result = capture_run(loaded.module, registry, x, target=target, categories=loaded.categories)
    registry.clear()
    return result


def input_gradient(model, x, objective):
    xin = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(objective(model(xin)), [xin])
    return grad


def test_the_forms_of_a_target():
    assert parse_target("top1") == Objective("top1")
    assert parse_target(7) == parse_target("7") == parse_target("class:7") == Objective("class", index=7)
    assert parse_target("class:3@10,20,30,40") == Objective("region", index=3, region=(10, 20, 30, 40))
    assert parse_target("box:2") == Objective("box", index=2)
    assert parse_target("similar:b.png").image == "b.png"
    assert parse_target('text:"a photo of a dog"').text == "a photo of a dog"
    for form in ("class:3@10,20,30,40", "box:2", "similar:b.png", "text:a dog", "top1", "class:7"):
        assert parse_target(form).spec == form
    for bad, words in (("box", "not one of"), ("class:3@30,20,10,40", "empty"), ("similar:", "not one of")):
        with pytest.raises(RunError, match=words):
            parse_target(bad)


@pytest.fixture(scope="module")
def seg_class(seg, photo):
    """The class the (untrained) model predicts most, background aside: top1's choice, with pixels to sum over."""
    result = hooked_run(seg, seg.preprocess.to_tensor(photo), "top1", SEG_LAYER)
    assert (result.segmentation == result.target_index).any()
    return result.target_index


def test_a_segmentation_class_is_its_logits_over_its_predicted_pixels(seg, photo, seg_class):
    x = seg.preprocess.to_tensor(photo)
    c = seg_class
    result = hooked_run(seg, x, f"class:{c}", SEG_LAYER)
    assert result.task == "segmentation" and result.target_index == c
    assert result.segmentation.shape == x.shape[-2:] and result.segmentation.dtype == torch.int64

    def objective(output):  # pytorch-grad-cam's SemanticSegmentationTarget, by hand
        logits = output["out"]
        mask = (logits.detach()[0].argmax(dim=0) == c).float()
        return (logits[0, c] * mask).sum()

    with torch.no_grad():
        expected = objective(seg.module(x))
        predicted = seg.module(x)["out"][0].argmax(dim=0)
    assert torch.equal(result.segmentation, predicted)
    assert result.objective_value == pytest.approx(float(expected), rel=1e-5)
    assert result.input_grad.abs().sum() > 0
    torch.testing.assert_close(result.input_grad, input_gradient(seg.module, x, objective), rtol=1e-4, atol=1e-6)


def test_a_region_is_the_class_logits_summed_over_the_rectangle(seg, photo):
    x = seg.preprocess.to_tensor(photo)
    result = hooked_run(seg, x, "class:3@100,50,300,260", SEG_LAYER)
    assert result.target.endswith("over x 100-300, y 50-260"), "the region in two ranges, not four numbers in a row"
    expected = input_gradient(seg.module, x, lambda output: output["out"][0, 3, 50:260, 100:300].sum())
    torch.testing.assert_close(result.input_grad, expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(RunError, match="outside"):
        hooked_run(seg, x, "class:3@0,0,900,10", SEG_LAYER)
    with pytest.raises(RunError, match="21 classes"):
        hooked_run(seg, x, "class:25", SEG_LAYER)


def test_a_box_is_the_score_of_the_nth_detection(det, photo):
    x = det.preprocess.to_tensor(photo)
    result = hooked_run(det, x, "box:2", DET_LAYER)
    assert result.task == "detection" and result.target_index == 2 and len(result.detections) >= 3
    with torch.no_grad():
        found = det.module(x)[0]
    assert [d.score for d in result.detections] == pytest.approx(found["scores"].tolist(), rel=1e-5)
    assert result.detections[2].box == pytest.approx(tuple(found["boxes"][2].tolist()), rel=1e-4)
    expected = input_gradient(det.module, x, lambda output: output[0]["scores"][2])
    torch.testing.assert_close(result.input_grad, expected, rtol=1e-3, atol=1e-9)
    beyond = hooked_run(det, x, f"box:{len(result.detections)}", DET_LAYER)  # no such box here: no gradient taken
    assert beyond.no_target.startswith(f"Box {len(result.detections)} does not exist") and beyond.input_grad is None


def test_an_objective_that_does_not_fit_the_model_is_one_line(seg, det, photo):
    classifier = load_model("resnet18", "none")
    x = classifier.preprocess.to_tensor(photo)
    for target in ("box:0", "class:1@0,0,10,10"):
        with pytest.raises(RunError, match="does not fit this model") as raised:
            hooked_run(classifier, x, target, "layer4")
        assert "\n" not in str(raised.value)
    with pytest.raises(RunError, match="does not fit a detection model"):
        hooked_run(det, det.preprocess.to_tensor(photo), "class:3", DET_LAYER)
    with pytest.raises(RunError, match="text tower"):
        with_reference("text:a dog", classifier)


def test_similarity_to_an_image_is_the_cosine_of_the_two_embeddings(tmp_path, photo):
    loaded = load_model("resnet18", "none")
    loaded.module.fc = torch.nn.Identity()  # a classifier with its head removed: a 512-value embedding
    other = tmp_path / "other.png"
    photo.rotate(90).save(other)
    target = with_reference(f"similar:{other}", loaded)
    x = loaded.preprocess.to_tensor(photo)
    result = hooked_run(loaded, x, target, "layer4")
    with torch.no_grad():
        reference = loaded.module(loaded.preprocess.to_tensor(read_image(other)))
    expected = input_gradient(loaded.module, x, lambda output: F.cosine_similarity(output, reference, dim=1)[0])
    assert result.target.startswith("cosine similarity to") and -1 <= result.objective_value <= 1
    torch.testing.assert_close(result.input_grad, expected, rtol=1e-4, atol=1e-8)


# ---- the anchor: pytorch-grad-cam ------------------------------------------------------------------------------


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def test_grad_cam_of_a_segmentation_class_equals_pytorch_grad_cams(seg, photo, seg_class):
    pytest.importorskip("pytorch_grad_cam", reason="pip install grad-cam (in the test extra)")
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    x = seg.preprocess.to_tensor(photo)
    result = hooked_run(seg, x, f"class:{seg_class}", SEG_LAYER)
    ours = run_grad_cam(result, SEG_LAYER)
    assert ours.std() > 0

    class Out(torch.nn.Module):  # pytorch-grad-cam takes a tensor output: its tutorial's wrapper
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, value):
            return self.model(value)["out"]

    mask = result.segmentation.numpy() == seg_class
    with GradCAM(model=Out(seg.module), target_layers=[seg.module.get_submodule(SEG_LAYER)]) as cam:
        theirs = cam(input_tensor=x, targets=[SemanticSegmentationTarget(seg_class, mask.astype(np.float32))])[0]
    assert ours.shape == theirs.shape
    assert correlation(ours, theirs) >= 0.999


def test_grad_cam_of_a_detection_box_equals_pytorch_grad_cams(det, photo):
    pytest.importorskip("pytorch_grad_cam", reason="pip install grad-cam (in the test extra)")
    from pytorch_grad_cam import GradCAM

    x = det.preprocess.to_tensor(photo)
    result = hooked_run(det, x, "box:1", DET_LAYER)
    ours = run_grad_cam(result, DET_LAYER)
    assert ours.std() > 0
    # the same target: the score of detection 1 of the image's detections (pytorch-grad-cam hands each target the
    # image's output dict, as its FasterRCNNBoxScoreTarget takes it)
    with GradCAM(model=det.module, target_layers=[det.module.get_submodule(DET_LAYER)]) as cam:
        theirs = cam(input_tensor=x, targets=[lambda output: output["scores"][1]])[0]
    assert correlation(ours, theirs) >= 0.999


# ---- the command line ---------------------------------------------------------------------------------------


def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hookscope", *args], capture_output=True, text=True, timeout=600)


def test_export_of_a_segmentation_class_records_the_objective(tmp_path):
    out = tmp_path / "run"
    done = hookscope(
        "export",
        "--model",
        SEG,
        "--weights",
        "none",
        "--image",
        str(sample_image()),
        "--layers",
        SEG_LAYER,
        "--target",
        "class:15",
        "--out",
        str(out),
        "--no-png",
    )
    assert done.returncode == 0, done.stderr
    target = json.loads((out / "manifest.json").read_text())["target"]
    assert target["index"] == 15 and "predicted pixels" in target["description"]  # (maybe none of them)
    objective = target["objective"]
    assert objective["task"] == "segmentation" and isinstance(objective["value"], float)
    assert sum(objective["predicted_pixels"].values()) == 520 * 520


@pytest.mark.parametrize(
    ("model", "target", "words"),
    [
        ("resnet18", "box:0", "does not fit this model"),
        ("resnet18", "boxes", "target must be"),
        ("resnet18", "similar:/no/such/picture.png", "picture.png"),
    ],
)
def test_a_target_that_cannot_be_is_one_line_and_exit_2(tmp_path, model, target, words):
    done = hookscope(
        "export",
        "--model",
        model,
        "--weights",
        "none",
        "--image",
        str(sample_image()),
        "--layers",
        "layer4",
        "--target",
        target,
        "--out",
        str(tmp_path / "run"),
        "--no-png",
    )
    lines = message_lines(done.stderr)
    assert done.returncode == 2 and words in lines[-1] and "Traceback" not in done.stderr, done.stderr
    if not lines[-1].startswith("hookscope export: error: argument"):  # argparse's own: its usage, then the line
        assert len(lines) == 1, lines


def test_a_region_is_said_as_two_ranges() -> None:
    """Issue 44: "over 49,47,323,294" read as one number; the words are the two ranges the rectangle spans."""
    from hookscope.core.engine.target_words import region_text

    assert region_text((49, 47, 323, 294)) == "x 49-323, y 47-294"


def test_a_detector_that_finds_no_object_keeps_its_forward_pass_and_says_why(tmp_path):
    """Untrained, Faster R-CNN finds no object in the sample photograph. Only activations were asked for, so
    ``export`` writes them (it exited 2 before, writing nothing); asked for gradients too, it writes the
    activations, an empty gradient archive whose every key the manifest explains, and one line on stderr."""
    out = tmp_path / "run"
    done = hookscope(
        "export", "--model", "fasterrcnn_mobilenet_v3_large_320_fpn", "--weights", "none", "--image",
        str(sample_image()), "--layers", "backbone.body", "--hooks", "act,grad", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    why = "The model found no object in this image: there is no box to take the gradient of."
    assert f"hookscope: no gradient taken: {why}" in message_lines(done.stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["description"] == f"none: {why}"
    assert manifest["target"]["objective"] == {"task": "detection", "value": None}
    with np.load(out / "activations.npz") as arrays:
        assert sorted(arrays.files) == ["backbone.body/0", "backbone.body/1"]
    with np.load(out / "gradients.npz") as arrays:
        assert arrays.files == []
    assert set(manifest["no_gradient"]) == {"backbone.body/0", "backbone.body/1"}
    assert all(reason.startswith("no gradient was taken in this run: the model found no object")
               for reason in manifest["no_gradient"].values())  # fmt: skip


def test_box_n_that_this_image_lacks_is_no_gradient_not_a_failed_run():
    """``box:N`` beyond what this image's run found (a video's frames find more or fewer): the records of the
    forward pass stand; a target that does not fit the model at all is still refused."""
    loaded = load_model("fasterrcnn_mobilenet_v3_large_320_fpn")
    loaded.module.transform.min_size, loaded.module.transform.max_size = (160,), 160
    x = loaded.preprocess.to_tensor(read_image(sample_image()))
    with HookRegistry(loaded.module) as registry:
        registry.add("backbone.body", "forward")
        registry.add("backbone.body", "tensor")
        result = capture_run(loaded.module, registry, x, target="box:3")
        assert result.no_target.startswith("The model found no object") and result.objective_value is None
        assert [r.kind for r in result.records] == ["forward", "forward"] and result.input_grad is None
        assert {(m.path, m.kind) for m in result.no_gradient} == {("backbone.body", "tensor")}
        with pytest.raises(RunError, match="does not fit a detection model"):
            capture_run(loaded.module, registry, x, target="class:3")

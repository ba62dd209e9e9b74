"""What a person reads of a scan: PNG strips labelled with scores and file names, the HTML pages opened in a real
headless Chromium, the progress lines, and SIGTERM (a real signal to a real process)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookscope.core.models.images import Preprocess
from hookscope.core.outputs.batch import find_images
from hookscope.core.scan.page import write_page
from hookscope.core.scan.results import (
    CHECKPOINT_FILE,
    LABEL_HEIGHT,
    NOTE_HEIGHT,
    PatchReader,
    ScanSettings,
    write_scan,
    write_strips,
)
from hookscope.core.scan.run import scan_images

ROOT = Path(__file__).resolve().parents[2]
SMALL = Preprocess(resize=73, crop=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _pictures(folder: Path, count: int, size: tuple[int, int] = (90, 72)) -> list[Path]:
    rng = np.random.default_rng(11)
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        small = rng.integers(0, 256, size=(size[1] // 8 + 2, size[0] // 8 + 2, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(folder / f"photo {index:02d}.png")
    return find_images(folder)


@pytest.fixture(scope="module")
def scanned(resnet18_loaded, tmp_path_factory):
    """A scan of 5 images, layer1 and layer2 of ResNet-18 at 64 pixels, top 3, with boxes, written out."""
    out = tmp_path_factory.mktemp("scan-page")
    images = _pictures(out / "my images", 5)
    loaded = replace(resnet18_loaded, module=copy.deepcopy(resnet18_loaded.module), preprocess=SMALL)
    result = scan_images(loaded, images, ScanSettings(("layer1", "layer2"), top=3, batch_size=4))
    write_scan(result, out / "out")
    return result, out / "out"


def test_strips_carry_each_patchs_score_and_file_name(scanned):
    result, out = scanned
    reader = PatchReader(result)
    labelled, bare = reader.strip("layer2", 0), reader.strip("layer2", 0, labels=False)
    assert labelled.shape == (96 + LABEL_HEIGHT, 3 * 96 + 2 * 2, 3) and bare.shape == (96, 3 * 96 + 2 * 2, 3)
    assert (labelled[:96] == bare).all()  # the patches are untouched; the labels are below them
    band = labelled[96:]
    for rank in range(3):
        under = band[:, rank * 98 : rank * 98 + 96]
        assert (under.min(axis=2) < 128).sum() > 40, rank  # dark text: a score line and a name line
    # the label says which image: two channels with different top images have different bands
    other = next(c for c in range(128) if [t.image for t in result.top("layer2", c)] !=
                 [t.image for t in result.top("layer2", 0)])  # fmt: skip
    assert not (reader.strip("layer2", other)[96:] == band).all()
    assert write_strips(result, out) == 64 + 128
    # an untrained model's strip says so (issue 44): a line above the patches, and the model in the PNG's Title
    strip = Image.open(out / "png" / "layer2" / "channel-0000.png")
    assert strip.size == (3 * 96 + 4, NOTE_HEIGHT + 96 + LABEL_HEIGHT)
    assert strip.info["Title"] == "layer2 channel 0 of resnet18 (untrained: random weights, seed 0)"
    note = np.asarray(strip.convert("RGB"))[:NOTE_HEIGHT]
    assert ((note[..., 0] > 120) & (note[..., 1] < 60)).sum() > 40, "red words above the patches"
    assert (np.asarray(strip.convert("RGB"))[NOTE_HEIGHT:] == reader.strip("layer2", 0)).all()


def test_the_page_of_an_untrained_model_says_so(scanned) -> None:
    """Issue 44: "What excites each channel of resnet18" hid that the weights were random."""
    result, out = scanned
    assert write_page(result, out / "titled") == 2
    index = (out / "titled" / "index.html").read_text()
    assert "What excites each channel of resnet18 (untrained: random weights, seed 0)</h1>" in index
    assert "<title>Scan of resnet18 (untrained: random weights, seed 0)</title>" in index
    module_page = (out / "titled" / "page" / "layer1.html").read_text()
    assert "of resnet18 (untrained: random weights, seed 0)" in module_page
    trained = replace(result, model={**result.model, "weights": "default", "pretrained": True})
    assert "What excites each channel of resnet18</h1>" in (write_page(trained, out / "trained") and
                                                           (out / "trained" / "index.html").read_text())  # fmt: skip


def _chromium() -> str:
    """Chromium from Debian's packages: installed here when missing and apt can (the test skips only when it
    cannot be installed)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, timeout=900,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
        if shutil.which("chromium"):
            return shutil.which("chromium")
    pytest.skip("Chromium is not installed and cannot be installed here (apt-get install chromium)")


def _browser(*args: str) -> subprocess.CompletedProcess:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
               "--window-size=1200,900", *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_page_loads_in_headless_chromium_lists_channels_and_shows_images(scanned, tmp_path):
    result, scan_out = scanned
    out = tmp_path / "out"
    shutil.copytree(scan_out, out)
    assert write_page(result, out) == 2
    index = _browser("--dump-dom", (out / "index.html").as_uri())
    assert index.returncode == 0, index.stderr
    links = re.findall(r'<a href="(page/[^"]+)">([^<]+)</a>', index.stdout)
    assert [name for _href, name in links] == ["layer1", "layer2"]
    page = _browser("--dump-dom", (out / links[1][0]).as_uri())
    assert page.returncode == 0, page.stderr
    dom = page.stdout
    assert len(re.findall(r'<section class="channel" id="channel-\d+"', dom)) == 128
    figures = re.findall(r'<figure class="top" data-image="(\d+)"', dom)
    assert len(figures) == 128 * 3
    # every picture loaded in the browser (the page's own count, made on its load event)
    body = re.search(r'<body data-images="(\d+)" data-loaded="(\d+)"', dom)
    assert body and body.group(1) == body.group(2) == str(128 * 3), body and body.groups()
    first = result.top("layer2", 0)[0]
    assert f"{first.score:.4g}" in dom and Path(result.images[first.image]).name in dom
    assert dom.count('class="box"') == 128 * 3  # every top image with its box drawn on it
    # and on screen: the thumbnails are there, with the red boxes over them
    shot = tmp_path / "shot.png"
    taken = _browser(f"--screenshot={shot}", (out / links[1][0]).as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    red = (pixels[..., 0] > 220) & (pixels[..., 1] < 80) & (pixels[..., 2] < 80)
    colourful = pixels.std(axis=2) > 30
    assert red.sum() > 500 and colourful.sum() > 20000, (red.sum(), colourful.sum())


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


def test_cli_html_and_png_with_plain_progress_lines(tmp_path):
    images = tmp_path / "images"
    _pictures(images, 6)
    out = tmp_path / "out"
    done = subprocess.run(_cli("--images", str(images), "--layers", "layer1", "--top", "2", "--batch-size", "2",
                               "--out", str(out), "--png", "--html"), capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "\r" not in done.stderr  # not a terminal: plain lines
    assert lines[0].startswith("scan: 0/6 images") and any(line.startswith("scan: 6/6 images") for line in lines)
    assert any(line.startswith("boxes: 128/128 top-k entries") for line in lines)
    assert any(line.startswith("PNG strips: 64/64 strips") for line in lines)
    assert any(line.startswith("page: 1/1 module pages") for line in lines)
    assert "index.html" in done.stdout and (out / "index.html").exists() and (out / "page" / "layer1.html").exists()
    assert json.loads((out / "scan.json").read_text())["modules"]["layer1"]["boxes"] == "receptive field"


def test_progress_on_a_terminal_is_one_line_with_the_time_left():
    from hookscope.cli.scan import _Progress
    from hookscope.core.scan.run import ScanProgress

    class Terminal:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    terminal = Terminal()
    show = _Progress(terminal, report_every=0.0)
    show(ScanProgress("scan", 0, 100, 0, 0, 0.0))
    threading.Event().wait(0.05)
    show(ScanProgress("scan", 10, 100, 10, 0, 0.05))
    assert "\n" not in terminal.text and terminal.text.count("\r") >= 2
    assert re.search(r"scan: 10/100 images \(10%\), .*about (<1|\d+) s left", terminal.text.split("\r")[-1])
    show.end_line()
    assert terminal.text.endswith("\n") and not show.drawn


@pytest.mark.slow  # the scan's stop and resume run in the default run (test_scan.py's Ctrl-C)
def test_sigterm_writes_the_checkpoint_and_exits_143_with_one_line(tmp_path):
    """A real SIGTERM to a real process: it stops at a batch boundary as Ctrl-C does, keeps its checkpoint, says
    so in one line and exits 143; --resume finishes the scan."""
    images = tmp_path / "images"
    _pictures(images, 40)
    args = ["--images", str(images), "--layers", "layer1", "--top", "2", "--batch-size", "1", "--no-boxes"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(_cli(*args, "--out", str(tmp_path / "out")), stderr=subprocess.PIPE, text=True,
                               cwd=ROOT, env=env)  # fmt: skip
    seen = process.stderr.readline()  # the scan phase's first line comes as it starts
    assert seen.startswith("scan: 0/40 images"), seen
    process.send_signal(signal.SIGTERM)
    err = seen + process.stderr.read()
    assert process.wait(timeout=120) == 143, err
    notes = [line for line in err.splitlines() if not line.startswith("scan: ")]
    assert len(notes) == 1 and "SIGTERM" in notes[0] and "--resume" in notes[0] and "Traceback" not in err, err
    assert (tmp_path / "out" / CHECKPOINT_FILE).exists() and not (tmp_path / "out" / "scan.json").exists()
    resumed = subprocess.run(_cli(*args, "--out", str(tmp_path / "out"), "--resume"), capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "out" / "scan.json").exists()

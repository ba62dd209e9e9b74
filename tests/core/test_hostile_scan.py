"""Hostile input to the dataset scan (issue 46, items 7, 9 and 11), each through the real command in a process of its
own: a --top that cannot fit in memory is refused before the first image is read, with the largest that would; any
file name the file system allows is shown, escaped, in the strips, the page and the skip lines; a subfolder that
cannot be read is skipped with its reason, as an image that cannot be read is.

The commands run with the PYTHONPATH the tests were started with in front (as ``hostile.ENV`` puts the checkout),
so that the same tests can be pointed at another tree of the code."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes

import numpy as np
import pytest
from cli_output import message_lines
from hostile import ENV, ROOT, one_error, write_images
from PIL import Image, ImageDraw, ImageFont

RUN_ENV = {**ENV, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
NOBODY = 65534  # the unprivileged user and group of Debian and most Linux systems


def hookscope(*args: str, timeout: float = 300, user: int | None = None, env: dict | None = None
              ) -> subprocess.CompletedProcess:  # fmt: skip
    """``python -m hookscope ARGS``, as ``user`` (a uid, through setpriv) when given."""
    command = [sys.executable, "-m", "hookscope", *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env or RUN_ENV, timeout=timeout)


# ---- 7: a --top that cannot fit ---------------------------------------------------------------------------------
def peak_gb_of_children() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # kB on Linux: the largest child so far


@pytest.mark.parametrize("top", [10**9, 100_000])
def test_a_top_that_cannot_fit_is_refused_before_the_first_image_with_the_largest_that_would(tmp_path, top) -> None:
    """Issue 46's command (5 images, every module of ResNet-18: 17,936 channels) died after minutes and gigabytes;
    its top-k alone is 17,936 x 100,000 slots of 20 bytes, held twice. Refused now, as --size is, in one line."""
    from hookscope.core.engine.memory_fit import available_memory

    free = available_memory()
    if top == 100_000 and (free is None or free > 100e9):
        pytest.skip("this machine may have the memory for a top-100000 of every channel of ResNet-18")
    images, out = write_images(tmp_path / "images", 5), tmp_path / "out"
    done = hookscope("scan", "--weights", "none", "--images", str(images), "--layers", "all", "--top", str(top),
                     "--out", str(out), timeout=240)  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = one_error(done.stderr)
    assert line.startswith(f"hookscope: error: --top {top} needs at least ")
    assert "of memory for the top images of 17936 channels, more than the " in line
    fits = int(line.rsplit("at most --top ", 1)[1].split(" would fit")[0])
    assert 1 <= fits < top
    assert peak_gb_of_children() < 3 and not out.exists()


# ---- 9: any file name the file system allows ------------------------------------------------------------------
# (name as bytes on disk, how the scan shows it)
NAMES = [
    (b"new\nline.png", "new\\nline.png"),
    (b'say "cheese".png', 'say "cheese".png'),
    (b"it's <b>bold & <i>co.png", "it's <b>bold & <i>co.png"),
    (b"tab\there\r.png", "tab\\there\\r.png"),
    ("caf\u00e9 \u2615.png".encode(), "caf\u00e9 \u2615.png"),
    (b"latin1 caf\xe9.png", "latin1 caf\\xe9.png"),  # not UTF-8: Python keeps the byte as a lone surrogate
    (b"x" * 251 + b".png", "x" * 251 + ".png"),  # the longest name ext4 and tmpfs allow (255 bytes)
]


def hostile_folder(root: Path) -> tuple[Path, list[tuple[bytes, str]]]:
    """A folder with a subfolder of pictures under every name of ``NAMES`` this file system allows, and a broken
    'picture' whose name has a newline (its skip line must stay one line)."""
    folder = root / "images"
    sub = folder / "sub"
    sub.mkdir(parents=True)
    made = []
    for index, (name, shown) in enumerate(NAMES):
        pixels = np.random.default_rng(index).integers(0, 256, size=(48 + 4 * index, 56, 3), dtype=np.uint8)
        try:
            with open(os.path.join(os.fsencode(sub), name), "wb") as stream:
                Image.fromarray(pixels).save(stream, format="PNG")
        except OSError:  # a file system that refuses a name that is not UTF-8 (some do): not a name it allows
            assert name.startswith(b"latin1"), name
            continue
        made.append((name, shown))
    (folder / "broken\nname.png").write_bytes(b"not a picture")
    return folder, made


def test_any_file_name_is_shown_escaped_in_strips_page_and_skip_lines(tmp_path) -> None:
    folder, made = hostile_folder(tmp_path)
    assert len(made) >= 6
    out = tmp_path / "out"
    top = len(made)  # every picture in every channel's top: each name is on every strip
    done = hookscope("scan", "--weights", "none", "--images", str(folder), "--recursive", "--layers", "layer1.0.conv1",
                     "--top", str(top), "--batch-size", "4", "--png", "--html", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr
    # The broken picture's skip line is one line: its name's newline does not start another.
    skips = [line for line in message_lines(done.stderr) if "name.png" in line]
    assert len(skips) == 1 and skips[0].startswith(f"hookscope: skipped: Cannot read '{folder}/broken"), skips
    scan = json.loads((out / "scan.json").read_text(encoding="utf-8"))
    listed = [os.fsencode(Path(p).name) for p in scan["images"]]
    assert sorted(listed) == sorted([b"broken\nname.png", *(name for name, _ in made)])
    page_html = check_page(out, folder, made)
    assert "broken" not in page_html  # skipped: in no top-k
    check_strip(out, scan, made)


def check_page(out: Path, folder: Path, made: list[tuple[bytes, str]]) -> str:
    """Each picture's figure on the module page: its caption and alt text the escaped name, its link the file's own
    bytes, percent-encoded (the link leads to the file)."""
    assert (out / "index.html").is_file()
    page = out / "page" / "layer1.0.conv1.html"
    text = page.read_bytes().decode("utf-8")  # valid UTF-8 throughout
    for _name, shown in made:
        escaped = html.escape(shown)
        assert f"</span> {escaped}<br>y " in text and f'alt="{escaped}"' in text, shown
    links = re.findall(r'<a class="frame" href="([^"]+)">', text)
    assert len(links) == 64 * len(made)
    targets = {os.path.normpath(os.path.join(os.fsencode(page.parent), unquote_to_bytes(link))) for link in links}
    assert targets == {os.fsencode(folder / "sub") + b"/" + name for name, _ in made}
    assert all(os.path.isfile(target) for target in targets)
    return text


def check_strip(out: Path, scan: dict, made: list[tuple[bytes, str]]) -> None:
    """A strip's captions, read back from its pixels: under each patch its score and the escaped name, fitted to
    the patch's width as every caption is (``fit_text``)."""
    from hookscope.core.scan.results import LABEL_HEIGHT, NOTE_HEIGHT, fit_text

    shown_of = dict(made)
    strip = np.asarray(Image.open(out / "png" / "layer1.0.conv1" / "channel-0003.png").convert("RGB"))
    size, gap = 96, 2
    # (an untrained model's strip has a line above saying so)
    assert strip.shape == (NOTE_HEIGHT + size + LABEL_HEIGHT, len(made) * size + (len(made) - 1) * gap, 3)
    font = ImageFont.load_default()
    for rank, entry in enumerate(scan["modules"]["layer1.0.conv1"]["top"][3]):
        shown = shown_of[os.fsencode(Path(scan["images"][entry["image"]]).name)]
        label = Image.new("RGB", (size, LABEL_HEIGHT), (255, 255, 255))
        draw = ImageDraw.Draw(label)
        draw.text((2, 2), f"{entry['score']:.4g}", fill=(0, 0, 0), font=font)
        draw.text((2, 15), fit_text(shown, draw, font, size - 4), fill=(70, 70, 70), font=font)
        left = rank * (size + gap)
        assert np.array_equal(strip[-LABEL_HEIGHT:, left : left + size], np.asarray(label)), shown


# ---- 11: a subfolder that cannot be read ------------------------------------------------------------------------
@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is the tests' user's own), removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="hookscope-closed-"))
    where.chmod(0o755)
    yield where
    for path in where.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(where)


def test_scan_recursive_skips_an_unreadable_subfolder_with_its_reason(shared_folder) -> None:
    """chmod 000 on a subfolder; as root it would still be read, so then the command runs as nobody (setpriv)."""
    folder = write_images(shared_folder / "images", 3)
    write_images(folder / "closed", 2)
    (folder / "closed").chmod(0o000)
    out, user, env = shared_folder / "out", None, None
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: nothing here is unreadable")
        user = NOBODY
        out.mkdir()
        home = shared_folder / "home"  # a home of its own, for whatever a library caches
        home.mkdir()
        for path in (out, home):
            os.chown(path, NOBODY, NOBODY)
        env = {**RUN_ENV, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "TORCH_HOME": str(home / "t")}
        probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "ls",
                                str(folder / "closed")], capture_output=True)  # fmt: skip
        assert probe.returncode != 0, "the closed folder is readable by nobody"
    done = hookscope("scan", "--weights", "none", "--images", str(folder), "--recursive", "--layers", "layer1",
                     "--top", "2", "--size", "32", "--out", str(out), user=user, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = message_lines(done.stderr)
    assert lines == [f"hookscope: skipped: Cannot read the folder '{folder / 'closed'}': Permission denied."], lines
    assert "over 3 images (1 folder unreadable)" in done.stdout
    scan = json.loads((out / "scan.json").read_text(encoding="utf-8"))
    assert [Path(p).name for p in scan["images"]] == [f"photo{i}.png" for i in range(3)]
    assert scan["scan"]["processed"] == 3 and scan["scan"]["skipped"] == []

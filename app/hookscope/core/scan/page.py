"""A scan as static web pages, to browse in any browser (``hookscope scan ... --html``): ``OUT/index.html`` lists the
modules; ``OUT/page/MODULE.html`` shows every channel of a module with its statistics and its top images, each a
thumbnail with the box drawn on it, its score and its file name (a link to the image itself).

Nothing but files: no script is needed to read the pages (the one script there counts the pictures that loaded into
two attributes of ``<body>``, for the tests), no server, no network. Thumbnails (at most ``THUMB`` pixels on the long
side) are written once per image that is in some top-k, under ``OUT/page/thumbs``.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.loaded import model_title
from hookscope.core.scan.results import (
    BOX_DEFINITIONS,
    HEAD_SCORE,
    ModuleScan,
    PatchReader,
    ScanResult,
    module_folder_name,
    shown_name,
)

THUMB = 160
PAGE = "index.html"

STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; } .note { color: #555; max-width: 60em; }
.channel { border-top: 1px solid #ddd; padding: .6em 0; }
.channel h3 { font-size: 1em; margin: 0 0 .3em; } .stats { color: #555; font-weight: normal; }
.tops { display: flex; flex-wrap: wrap; gap: 8px; }
figure.top { margin: 0; width: 160px; }
.frame { display: block; position: relative; line-height: 0; background: #333; }
.frame img { width: 100%; height: auto; }
.box { position: absolute; border: 2px solid #ff2d2d; box-sizing: border-box; }
figcaption { font-size: 12px; line-height: 1.3; overflow-wrap: anywhere; }
figcaption .score { font-weight: 600; }
table { border-collapse: collapse; } td, th { padding: .2em .8em .2em 0; text-align: left; }
"""

COUNT_SCRIPT = """
window.addEventListener("load", () => {
  const pictures = Array.from(document.images);
  document.body.dataset.images = pictures.length;
  document.body.dataset.loaded = pictures.filter((p) => p.complete && p.naturalWidth > 0).length;
});
"""


def _head(title: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style><script>{COUNT_SCRIPT}</script></head>\n<body>\n")  # fmt: skip


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "n/a"


def _href(target: Path, start: Path) -> str:
    """A relative link from a page in ``start`` to ``target`` (a file:// page cannot take absolute paths on every
    system), with each part percent-encoded: the name's own bytes, whatever they are (a name that is not UTF-8
    included)."""
    from urllib.parse import quote

    try:
        relative = os.path.relpath(target, start)
    except ValueError:  # another drive (Windows): an absolute file URL
        return Path(target).resolve().as_uri()
    return quote(os.fsencode(Path(relative).as_posix()))


def write_page(result: ScanResult, out_dir: str | Path, progress: Callable[[int, int], None] | None = None,
               cancelled: Callable[[], bool] | None = None) -> int:  # fmt: skip
    """``out_dir``/index.html and one page per module; returns the module pages written (fewer when cancelled)."""
    out = Path(out_dir)
    pages = out / "page"
    thumbs = pages / "thumbs"
    try:
        thumbs.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HookscopeError(f"Cannot create '{thumbs}': {error.strerror or error}.", path=str(thumbs)) from error
    reader = PatchReader(result)
    made: dict[int, tuple[str, int, int] | None] = {}  # image index -> (thumbnail href, width, height) as read

    def thumbnail(index: int) -> tuple[str, int, int] | None:
        if index not in made:
            picture = reader.image(index)
            if picture is None:
                made[index] = None
            else:
                target = thumbs / f"{index:06d}.jpg"
                small = picture.copy()
                small.thumbnail((THUMB, THUMB), Image.Resampling.BILINEAR)
                try:
                    small.save(target, quality=85)
                except OSError as error:
                    raise HookscopeError(f"Cannot write '{target}': {error.strerror or error}.",
                                         path=str(target)) from error  # fmt: skip
                made[index] = (f"thumbs/{target.name}", picture.width, picture.height)
        return made[index]

    total = len(result.modules)
    written = 0
    links = []
    for path, module in result.modules.items():
        if cancelled is not None and cancelled():
            break
        name = module_folder_name(path) + ".html"
        _write(pages / name, _module_page(result, module, pages, thumbnail))
        links.append((path, module, f"page/{_href(pages / name, pages)}"))
        written += 1
        if progress is not None:
            progress(written, total)
    _write(out / PAGE, _index_page(result, links))
    return written


def _write(target: Path, text: str) -> None:
    try:
        # backslashreplace: a model's name from a file name that is not UTF-8 cannot stop the page
        target.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as error:
        raise HookscopeError(f"Cannot write '{target}': {error.strerror or error}.", path=str(target)) from error


def _index_page(result: ScanResult, links: list[tuple[str, ModuleScan, str]]) -> str:
    model = model_title(result.model)  # "resnet18 (untrained: random weights, seed 0)": random weights said
    settings = result.settings
    rows = "".join(
        f'<tr><td><a href="{href}">{html.escape(path or "(model)")}</a></td>'
        f"<td>{module.channels} {module.layout.unit}s</td><td>{_shape(module)}</td>"
        f"<td>boxes: {html.escape(module.boxes or 'none')}</td></tr>\n"
        for path, module, href in links
    )  # fmt: skip
    boxed = settings.boxes and set(settings.modules) != set(settings.heads)
    definitions = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>"
                          for k, v in BOX_DEFINITIONS.items()) if boxed else ""  # fmt: skip
    if settings.heads and not boxed and set(settings.modules) == set(settings.heads):  # scan --attention
        title = f"Where each attention head of {model} concentrates"
        intro = f"{result.processed} images, the top {settings.top} per head by its score."
    else:
        title = f"What excites each channel of {model}"
        intro = (f"{result.processed} images, the top {settings.top} per channel by the channel's "
                 f"{'maximum' if settings.by == 'max' else 'mean'}; the red box is the region of the image the "
                 "position of that value sees.")  # fmt: skip
    return (
        _head(f"Scan of {model}") + f"<h1>{html.escape(title)}</h1>\n"
        f'<p class="note">{html.escape(intro)}</p>\n{_heads_note(settings.heads)}<ul class="note">{definitions}</ul>\n'
        f"<h2>Modules</h2>\n<table>{rows}</table>\n"
        "</body></html>\n"
    )


def _shape(module: ModuleScan) -> str:
    """A module's layout in a few words: "maps 28x28", "tokens 197x1"; "one score per image" for heads."""
    layout = module.layout
    return "one score per image" if layout.kind == "heads" else f"{layout.kind} {layout.height}x{layout.width}"


def _heads_note(heads: tuple[str, ...]) -> str:
    """The line that says what a head's score is, on a page that shows heads (``scan --attention``)."""
    if not heads:
        return ""
    return f'<p class="note">Heads are ranked by {html.escape(HEAD_SCORE)}.</p>\n'


def _module_page(result: ScanResult, module: ModuleScan, pages: Path,
                 thumbnail: Callable[[int], tuple[str, int, int] | None]) -> str:  # fmt: skip
    model = model_title(result.model)
    unit, heads = module.layout.unit, module.layout.kind == "heads"
    what = "each head's most concentrated images" if heads else "what excites each channel"
    boxes = ("each score is of the whole image: no box" if heads else
             f"boxes: {html.escape(module.boxes or 'none')} "
             f"({html.escape(BOX_DEFINITIONS.get(module.boxes or '', 'not computed'))})")  # fmt: skip
    parts = [_head(f"{module.path or '(model)'} of {model}: {what}"),
             f'<p><a href="../{PAGE}">All modules</a></p>\n<h1>{html.escape(module.path or "(model)")}</h1>\n'
             f'<p class="note">{html.escape(module.path or "The whole model")} of {html.escape(model)}: '
             f"{module.channels} {unit}s; {boxes}.</p>\n{_heads_note((module.path,) if heads else ())}"]  # fmt: skip
    for channel, entries in enumerate(module.top):
        figures = []
        for entry in entries:
            source, name = Path(result.images[entry.image]), html.escape(shown_name(result.images[entry.image]))
            thumb = thumbnail(entry.image)
            box = ""
            if thumb is not None and entry.box is not None:
                _href_, width, height = thumb
                x0, y0, x1, y1 = entry.box
                box = (f'<div class="box" style="left:{100 * x0 / width:.2f}%;top:{100 * y0 / height:.2f}%;'
                       f'width:{100 * (x1 - x0) / width:.2f}%;height:{100 * (y1 - y0) / height:.2f}%"></div>')  # fmt: skip
            picture = (f'<img src="{thumb[0]}" alt="{name}">' if thumb is not None
                       else '<span class="missing">(cannot be read)</span>')  # fmt: skip
            figures.append(
                f'<figure class="top" data-image="{entry.image}"><a class="frame" href="{_href(source, pages)}">'
                f"{picture}{box}</a><figcaption><span class=\"score\">{_number(entry.score)}</span> "
                f"{name}{'' if heads else f'<br>y {entry.y}, x {entry.x}'}</figcaption></figure>"
            )  # fmt: skip
        stats = f"mean {_number(float(module.mean[channel]))}, std {_number(float(module.std[channel]))}"
        if not heads:  # a head's score is above 0 in every image: "active" says nothing of it
            stats += f", active in {_number(100 * float(module.active[channel]))}% of the images"
        parts.append(f'<section class="channel" id="{unit}-{channel}"><h3>{unit} {channel} '
                     f'<span class="stats">{stats}</span></h3><div class="tops">{"".join(figures)}</div></section>\n')  # fmt: skip
    parts.append("</body></html>\n")
    return "".join(parts)

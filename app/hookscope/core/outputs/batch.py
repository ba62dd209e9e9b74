"""Batch runs: the same inspection over every image in a folder, resumable, with a summary CSV.

The model is loaded once by the caller and its hooks registered once. A reader thread reads, resizes and crops the
next images while the calling thread makes each the model's input and runs the model. Each image's results (the
layout of ``hookscope export``, ``write_run``) are written by a writer thread while the model runs the next image
when the model leaves a core free (``writes_behind``); when its threads hold every core, the calling thread writes
them right after the run, the writer thread helping. Either way the files are written drop-behind
(``hookscope.core.outputs.drop_behind``: a batch does not fill the page cache with gigabytes, and writes into the same few pages),
and the writer thread waits for the disk while the model runs the next image.

Neither helper thread runs a torch operation. One would start a second OpenMP thread team in the process, and while
libgomp manages more threads than there are cores it lets the model's threads sleep between operations instead of
waiting ready, so every operation of the model pays a wake-up: on two cores ResNet-18's forward+backward took 83 ms
instead of 61 (medians) while an idle second team was alive. So the reader stops at the cropped picture (``Preprocess.fitted``;
the calling thread does ``as_input``), and the writer's statistics are numpy's (``record_means`` here,
``numeric.count_non_finite`` in the manifest).

Each finished image's folder gets a
``done.json`` last, written atomically once the image's other files are on disk, so a resumed batch skips exactly
the finished images and redoes a half-written one. ``summary.csv`` is rewritten at the end from every finished image, earlier runs included.

Nothing here prints; progress goes to a callback.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image

from hookscope.core.common.errors import HookscopeError, ImageError
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.hooks import HookRegistry
from hookscope.core.engine.run import run_image
from hookscope.core.engine.target_words import Target, target_value
from hookscope.core.engine.tree import ModuleInfo, module_tree
from hookscope.core.models.images import IMAGE_SUFFIXES, read_image
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.drop_behind import DropBehind
from hookscope.core.outputs.export import write_run

DONE_FILE = "done.json"
SUMMARY_FILE = "summary.csv"
READ_AHEAD = 2  # images being read while the model runs
# Files that mark a folder as Hookscope's output (input.npy is the first file write_run writes).
OUTPUT_MARKERS = ("input.npy", "manifest.json", DONE_FILE, SUMMARY_FILE)
WRITE_BEHIND = 2  # results waiting to be written (bounds memory: each holds the run's records)


@dataclass(frozen=True)
class BatchProgress:
    """Where a batch stands after one more image; ``rate`` counts only images run in this call."""

    handled: int  # images dealt with so far: finished, resumed or skipped
    total: int
    image: str  # the image just dealt with, relative to the batch's folder
    status: str  # "done", "resumed" or "skipped"
    processed: int  # images run through the model in this call
    skipped: int
    resumed: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        """Images per second run through the model in this call."""
        return self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class BatchReport:
    """What a batch did: finished now, finished earlier (left untouched), skipped with the reason, not reached."""

    out_dir: Path
    total: int
    done: list[str] = field(default_factory=list)  # relative image names finished in this call
    resumed: list[str] = field(default_factory=list)  # finished by an earlier call, left as they were
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (image, one-line reason)
    cancelled: bool = False
    elapsed_s: float = 0.0

    @property
    def finished(self) -> int:
        return len(self.done) + len(self.resumed)

    @property
    def summary_csv(self) -> Path:
        return self.out_dir / SUMMARY_FILE


def find_images(
    folder: str | os.PathLike,
    recursive: bool = False,
    exclude: str | os.PathLike | None = None,
    unreadable: list[tuple[Path, str]] | None = None,
) -> list[Path]:
    """Image files (by suffix, any case) in ``folder``, sorted by relative path.

    Left out: hidden files and folders, ``exclude`` (the batch's own output folder, when it lies inside) and any
    folder Hookscope wrote (it holds one of OUTPUT_MARKERS), so outputs are never read back as input. A folder
    that cannot be read (``chmod 000``) is left out too, as an image that cannot be read is skipped: ``unreadable``,
    when given, receives (folder, one-line reason) for each.
    """
    root = Path(folder)
    if not root.is_dir():
        raise HookscopeError(
            f"'{root}' is not a folder." if root.exists() else f"Folder '{root}' does not exist.", path=str(root)
        )
    skip = os.path.abspath(exclude) if exclude is not None else None

    def cannot_read(error: OSError, directory: Path | None = None) -> None:
        if unreadable is not None:
            where = directory if directory is not None else Path(error.filename or root)
            unreadable.append((where, f"Cannot read the folder '{where}': {error.strerror or error}."))

    def wanted(directory: Path) -> bool:
        if directory.name.startswith(".") or os.path.abspath(directory) == skip:
            return False
        try:
            return not any((directory / marker).exists() for marker in OUTPUT_MARKERS)
        except OSError as error:  # not searchable: its markers cannot even be looked for
            cannot_read(error, directory)
            return False

    found: list[Path] = []
    for current, dirs, files in os.walk(root, onerror=cannot_read):  # onerror: a folder that cannot be listed
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if wanted(here / d)) if recursive else []
        found += [here / f for f in files if not f.startswith(".") and Path(f).suffix.lower() in IMAGE_SUFFIXES]
        if not recursive:
            break
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def folder_names(images: Sequence[Path], root: Path) -> list[str]:
    """One output folder name per image, from its path relative to ``root`` ("sub/cat.jpg" -> "sub__cat"),
    made unique by the suffix, then a counter. Deterministic for a given list, so a resume finds the same names."""
    stems = [_relative(image, root).rsplit(".", 1)[0].replace("/", "__") or "image" for image in images]
    counts: dict[str, int] = {}
    for stem in stems:
        counts[stem] = counts.get(stem, 0) + 1
    names, used = [], set()
    for image, stem in zip(images, stems):
        name = stem if counts[stem] == 1 else f"{stem}.{image.suffix.lstrip('.').lower() or 'image'}"
        base, n = name, 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        names.append(name)
    return names


def _relative(image: Path, root: Path) -> str:
    try:
        return image.relative_to(root).as_posix()
    except ValueError:
        return image.name


def _fingerprint(loaded: LoadedModel, registry: HookRegistry, target: Target, kinds: Sequence[str], png: bool) -> dict:
    """What makes two batches' results interchangeable; a resume reuses a folder only when it matches."""
    model = {k: v for k, v in loaded.describe().items() if k != "notice"}
    return {
        "model": model,
        "preprocessing": loaded.preprocess.describe(),
        "hooks": sorted([info.path, info.kind] for info in registry.handles()),
        "edits": [edit.spec for edit in registry.enabled_edits()],
        "kinds": list(kinds),
        "target": target_value(target),
        "png": png,
    }


Item = TypeVar("Item")
Read = TypeVar("Read")


def read_ahead(
    items: Iterable[Item], read: Callable[[Item], Read], depth: int = READ_AHEAD, name: str = "hookscope-read"
) -> Generator[tuple[Item, Future[Read]], None, None]:
    """``(item, future of read(item))`` in order, with ``depth`` reads running ahead in one thread while the caller
    works on the current one. A read's error comes out of its future, so the caller decides what it skips. Use it
    inside ``contextlib.closing`` (or ``close()`` it): stopping early then cancels the reads not started and waits
    for the running one. Batch export and the dataset scan (``hookscope.core.scan.backends``) both read this way."""
    reader = ThreadPoolExecutor(1, thread_name_prefix=name)
    reads: deque[tuple[Item, Future[Read]]] = deque()
    queue = iter(items)
    end = object()
    try:

        def read_more() -> None:
            while len(reads) < depth:
                item = next(queue, end)
                if item is end:
                    return
                reads.append((item, reader.submit(read, item)))  # type: ignore[arg-type]

        read_more()
        while reads:
            item, future = reads.popleft()
            read_more()
            yield item, future
    finally:
        for _, future in reads:
            future.cancel()
        reader.shutdown(wait=True, cancel_futures=True)


def _read_done(folder: Path) -> dict | None:
    try:
        return json.loads((folder / DONE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json_atomically(data: Any, path: Path) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file: a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def record_means(result: RunResult) -> dict[str, float]:
    """Mean activation per forward record (its key), for the summary.

    In numpy, on purpose: this runs in the writer thread, where a torch op would start a second OpenMP team (the
    module's docstring says what that costs).
    """
    means = {}
    for record in result.of_kind("forward"):
        tensor = record.tensor
        if tensor.is_floating_point():
            values = tensor.numpy() if tensor.dtype != torch.bfloat16 else tensor.float().numpy()
            means[record.key] = float(values.mean(dtype=np.float64)) if values.size else float("nan")
    return means


def _write_image(
    result: RunResult,
    loaded: LoadedModel,
    folder: Path,
    *,
    source: Path,
    name: str,
    kinds: tuple[str, ...],
    png: bool,
    fingerprint: dict,
    edits: Sequence[str],
    tree: Sequence[ModuleInfo],
    files: DropBehind,
    helper: Executor | None = None,
) -> dict:
    """One image's results in the export layout, written through ``files`` (``helper`` writing part of the arrays);
    returns what its done.json will say once ``_claim`` finds the files on disk."""
    with _write_errors(name, folder, files):
        if folder.exists():  # a half-written folder from an interrupted batch, or a batch run again
            shutil.rmtree(folder)
        # the helper starts on the means, then the arrays; what it has not started when this thread is done with
        # the manifest, this thread writes itself
        means = helper.submit(record_means, result) if helper is not None else None
        write_run(
            result, loaded, folder, image=str(source), kinds=kinds, png=png, tree=tree, edits=edits, compared=False,
            helper=helper, files=files,
        )  # fmt: skip
        return {
            "image": name,
            "source": str(source),
            "fingerprint": fingerprint,
            "top5": [{"index": p.index, "label": p.label, "probability": p.probability} for p in result.top5],
            "means": means.result() if means is not None else record_means(result),
        }


def _claim(done: dict, folder: Path, files: DropBehind) -> dict:
    """done.json, last and atomically, once the image's files are on disk (the wait costs no processor time: the
    writer thread does it while the model runs the next image)."""
    with _write_errors(done["image"], folder, files):
        files.settle()
        write_json_atomically(done, folder / DONE_FILE)
    return done


def _finish_image(result: RunResult, loaded: LoadedModel, folder: Path, **job: Any) -> dict:
    """One image's results and then its done.json, in one go."""
    files = DropBehind()
    return _claim(_write_image(result, loaded, folder, files=files, **job), folder, files)


@contextmanager
def _write_errors(name: str, folder: Path, files: DropBehind) -> Iterator[None]:
    """An OSError as the image's one line; after any error the files written are let go, claiming nothing."""
    try:
        yield
    except BaseException as error:
        files.abandon()
        if isinstance(error, OSError):
            raise HookscopeError(
                f"Cannot write the results of '{name}' to '{folder}': {error.strerror or error}.", path=str(folder)
            ) from error
        raise


def writes_behind(device: str) -> bool:
    """Whether the writer thread writes each image's results while the model runs the next one: when the model
    leaves a core free, that is on an accelerator, or on the CPU with fewer torch threads than cores.

    Otherwise the model's OpenMP team holds every core, its threads waiting ready (spinning) between operations,
    and a writer running beside it takes a core from one of them in the middle of an operation while the others
    wait for it: ResNet-18 on two cores gave about 0.62 of bare throughput that way, about 0.70 writing each image
    right after its run (the writer thread taking the array files while the batch's thread puts the manifest
    together, then helping with what is left), before files were written drop-behind. Drop-behind, the two came
    out alike (about 80 ms an image against 55 bare, in a short check); ``hookscope bench --batch`` gives 0.70
    (median of five) writing after each run.
    """
    if device.strip().lower().split(":")[0] != "cpu":
        return True
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return torch.get_num_threads() < cores


def _read_input(path: Path, loaded: LoadedModel) -> Image.Image:
    """The reading thread's job: the picture read, resized and cropped (``Preprocess.fitted``: no torch here)."""
    return loaded.preprocess.fitted(read_image(path))


# long because: the read-ahead, the runs and the drop-behind writer are one pipeline whose try/finally shuts both
# threads down; its closures share the resume state
def run_batch(
    loaded: LoadedModel,
    registry: HookRegistry,
    images: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    device: str = "cpu",
    target: Target = "top1",
    kinds: Sequence[str] = ("forward", "backward"),
    png: bool = True,
    resume: bool = False,
    progress: Callable[[BatchProgress], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    others: Mapping[str, torch.Tensor] | None = None,
    edits: Sequence[str] = (),
) -> BatchReport:
    """Run every image through ``loaded.module`` with ``registry``'s hooks; one subfolder per image in ``out_dir``.

    ``root`` is the folder the images were found in (it names the subfolders; default: their common folder).
    An unreadable image is skipped with its reason and the batch goes on; any other error stops it. With
    ``resume``, images whose folder holds a matching ``done.json`` are left as they are. ``cancelled`` is asked
    before each image; results already computed are still written. ``summary.csv`` is always rewritten, also when
    the batch stops early (unreached images are listed as "not run"). ``others`` goes to ``capture_run`` (the
    mix edits' other images); ``edits``: the specs of the edits on ``registry``, recorded in each manifest.json (the
    runs are not compared with runs without them: no ``prediction_changes``).
    """
    start = time.perf_counter()
    paths = [Path(p) for p in images]
    out = Path(out_dir)
    base = (
        Path(root) if root is not None else (Path(os.path.commonpath([str(p.parent) for p in paths])) if paths else out)
    )
    names = [_relative(p, base) for p in paths]
    folders = [out / n for n in folder_names(paths, base)]
    kinds = tuple(kinds)
    fingerprint = _fingerprint(loaded, registry, target, kinds, png)
    tree = module_tree(loaded.module)  # the manifest's module list, the same for every image
    report = BatchReport(out_dir=out, total=len(paths))
    results: dict[int, dict] = {}  # index -> done.json contents
    status: dict[int, str] = {}
    reasons: dict[int, str] = {}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HookscopeError(
            f"Cannot create the output folder '{out}': {error.strerror or error}.", path=str(out)
        ) from error

    def tell(index: int, what: str) -> None:
        if progress is not None:
            progress(
                BatchProgress(
                    handled=len(status), total=len(paths), image=names[index], status=what,
                    processed=len(finished_now) + len(pending_writes), skipped=len(report.skipped),
                    resumed=len(report.resumed), elapsed_s=time.perf_counter() - start,
                )
            )  # fmt: skip

    pending_writes: deque[tuple[int, Future]] = deque()
    finished_now: list[int] = []  # indexes written in this call
    todo: list[int] = []
    for index, folder in enumerate(folders):
        done = _read_done(folder) if resume else None
        if done is not None and done.get("image") == names[index] and done.get("fingerprint") == fingerprint:
            results[index] = done
            status[index] = "done"
            report.resumed.append(names[index])
            tell(index, "resumed")
        else:
            todo.append(index)

    def collect(block: bool) -> None:
        while pending_writes and (block or pending_writes[0][1].done()):
            index, future = pending_writes.popleft()
            results[index] = future.result()
            finished_now.append(index)

    writer = ThreadPoolExecutor(1, thread_name_prefix="hookscope-batch-write")
    behind = writes_behind(device)
    reads = read_ahead(todo, lambda i: _read_input(paths[i], loaded), READ_AHEAD, "hookscope-batch-read")
    try:
        for index, future in reads:
            if cancelled is not None and cancelled():
                report.cancelled = True
                break
            try:
                x = loaded.preprocess.as_input(future.result())  # torch: in this thread, with the model's team
            except ImageError as error:
                status[index] = "skipped"
                reasons[index] = str(error)
                report.skipped.append((names[index], str(error)))
                tell(index, "skipped")
                continue
            result = run_image(loaded, registry, x, device=device, target=target, others=others)
            collect(block=not behind)
            job: dict[str, Any] = dict(
                source=paths[index], name=names[index], kinds=kinds, png=png, fingerprint=fingerprint,
                edits=edits, tree=tree,
            )  # fmt: skip
            if not behind:  # written now, the writer thread helping; it waits for the disk while the next image runs
                files = DropBehind()
                done = _write_image(result, loaded, folders[index], files=files, helper=writer, **job)
                pending_writes.append((index, writer.submit(_claim, done, folders[index], files)))
            elif len(pending_writes) < WRITE_BEHIND:
                pending_writes.append((index, writer.submit(_finish_image, result, loaded, folders[index], **job)))
            else:  # the writer is behind (a busy disk or machine): write this one here rather than wait for it
                results[index] = _finish_image(result, loaded, folders[index], **job)
                finished_now.append(index)
            del result
            status[index] = "done"
            tell(index, "done")
        collect(block=True)
    finally:
        reads.close()  # cancels the reads not started, waits for the running one
        # Results already computed are written even when the batch stops: a resume then need not redo them.
        writer.shutdown(wait=True)
        for index, written in list(pending_writes):
            if written.done() and written.exception() is None and index not in finished_now:
                results[index] = written.result()
                finished_now.append(index)
        report.done = [names[index] for index in sorted(finished_now)]
        report.elapsed_s = time.perf_counter() - start
        _write_summary(out / SUMMARY_FILE, names, folders, results, reasons)
    return report


def _write_summary(
    path: Path, names: list[str], folders: list[Path], results: dict[int, dict], reasons: dict[int, str]
) -> None:
    """summary.csv: one row per image (finished, skipped or not run), top-5 and the mean of each forward record."""
    keys: list[str] = []
    for index in sorted(results):
        for key in results[index].get("means", {}):
            if key not in keys:
                keys.append(key)
    header = ["image", "status", "reason", "folder", *(f"top{k}" for k in range(1, 6)), *(f"mean {k}" for k in keys)]
    rows = []
    for index, name in enumerate(names):
        done = results.get(index)
        if done is not None:
            top = [f"{p['index']}:{p['label']}:{p['probability']:.6g}" for p in done.get("top5", [])]
            top += [""] * (5 - len(top))
            means = done.get("means", {})
            row = [name, "done", "", folders[index].name, *top[:5], *(_number(means.get(k)) for k in keys)]
        elif index in reasons:
            row = [name, "skipped", reasons[index], "", *[""] * 5, *[""] * len(keys)]
        else:
            row = [name, "not run", "", "", *[""] * 5, *[""] * len(keys)]
        rows.append(row)
    handle, temporary = tempfile.mkstemp(prefix=".summary-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", newline="", encoding="utf-8") as stream:
            writer = csv.writer(stream)
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))

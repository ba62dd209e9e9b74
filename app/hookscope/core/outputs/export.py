"""Writing one run to a folder: manifest.json, the arrays as .npy/.npz, and one PNG mosaic per record.

The layout is the contract of ``hookscope export``; the window's whole-run export and a batch's images write the same,
through ``write_run``. ``build_manifest`` is the one place that says what manifest.json holds (the model, the hooks
and what they recorded, the edits, the target, the predictions and their changes under the edits, NaN and inf), so
that the window, the command line and a batch record a run alike.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, wait
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image

from hookscope.core.common.resources import apply_colormap
from hookscope.core.common.vocabulary import KINDS, TERMS_OF_KIND, kind_of, word_of
from hookscope.core.engine.capture import RunResult
from hookscope.core.engine.hooks import GRADIENT_KINDS, Record
from hookscope.core.engine.numeric import numeric_report
from hookscope.core.engine.tree import ModuleInfo, module_tree
from hookscope.core.models.loaded import LoadedModel
from hookscope.core.outputs.drop_behind import DropBehind
from hookscope.core.pictures.attention import rollout_maps
from hookscope.core.pictures.compare import prediction_changes
from hookscope.core.pictures.views import ChannelData, as_channels, grad_magnitude, mosaic

# One archive per hook kind, named by the vocabulary (gradients.npz for grad); a key is the record's key (path, "#k"
# for later calls, "/leaf" for leaves). An attention archive holds (batch, heads, queries, keys) per module.
ARCHIVES: dict[str, str] = {kind: TERMS_OF_KIND[kind].archive for kind in KINDS}
ROLLOUT_ARCHIVE = "attention_rollout.npz"  # with attention: "rollout" and "gradient_rollout", (rows, cols) of patches


def record_picture(record: Record, check_finite: bool = True) -> ChannelData:
    """What a panel shows for a record: the values, or |grad| per channel for gradients (``as_channels``)."""
    array = record.tensor.float().numpy()
    if record.kind in GRADIENT_KINDS:
        array = grad_magnitude(array)
    return as_channels(array, check_finite)


def picture_image(picture: ChannelData, scaling: str = "channel", order: np.ndarray | None = None) -> np.ndarray:
    """A uint8 2-D image of a picture: a mosaic of maps (channels in ``order`` if given), or a strip for a vector."""
    if picture.kind == "maps":
        return mosaic(picture.data, scaling=scaling, order=order)[0]
    strip = picture.data.reshape(1, 1, -1)
    return mosaic(strip, scaling="shared")[0]


def write_png(image: np.ndarray, path: Path, colormap: str = "viridis") -> None:
    """Save a uint8 (H, W) image through a colormap at its native resolution."""
    Image.fromarray(apply_colormap(image, colormap)).save(path, format="PNG")


def file_stem(key: str) -> str:
    return key.replace("/", "__")


def archives_of(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Which archive of an export folder holds which kind, from its manifest: one written now (keyed by the
    vocabulary's words) or before one vocabulary (keyed by the kinds, ``backward`` in ``gradients.npz``)."""
    archives = manifest.get("archives", {})
    return {kind: str(name) for key, name in archives.items() if (kind := kind_of(key)) is not None}


def picture_folder(kind: str) -> str:
    """Where an export puts a kind's PNG mosaics, beside its archive: ``png/gradients`` for ``gradients.npz``."""
    return f"png/{ARCHIVES[kind].removesuffix('.npz')}"


def save_npz(path: Path | BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """What ``np.savez(path, **arrays)`` writes (an uncompressed zip of ``KEY.npy`` files, the same bytes in every
    member), without copying the arrays.

    np.savez hands each array to the zip member in 16 MiB ``tobytes`` copies (a zip member is not a real file, so
    numpy cannot write from the array's memory); the copy runs with the GIL held, so in a batch's writer thread it
    also holds up the thread that runs the model. A C-contiguous array of a plain dtype goes to the member as it
    is, after numpy's own 1.0 header; any other array takes numpy's own path. Only the path is used as given
    (np.savez would add ``.npz``); ``path`` may also be a file open for writing.
    """
    with zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, value in arrays.items():
            array = np.asanyarray(value)
            with archive.open(f"{key}.npy", mode="w", force_zip64=True) as member:  # force_zip64 as np.savez
                if array.flags.c_contiguous and array.dtype.isbuiltin == 1 and not array.dtype.hasobject:
                    np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(array))
                    member.write(array.reshape(-1).view(np.uint8).data)  # its memory, not a copy
                else:
                    np.lib.format.write_array(member, array)


def write_run(
    result: RunResult,
    loaded: LoadedModel,
    out: Path,
    *,
    image: str,
    kinds: tuple[str, ...],
    png: bool = True,
    colormap: str = "viridis",
    scaling: str = "channel",
    tree: Sequence[ModuleInfo] | None = None,
    edits: Sequence[str] = (),
    compared: bool = True,
    extra: Mapping[str, Any] | None = None,
    helper: Executor | None = None,
    files: DropBehind | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict:
    """Write ``result`` into ``out`` and return the manifest that was written (PNGs through ``colormap``).

    The manifest is written last, so a folder whose writing stopped half way has none; what it says is
    ``build_manifest``'s (``edits``, ``compared`` and ``extra`` are passed on). ``tree``: the model's
    ``module_tree``, for a caller that writes many runs of one model (a batch works it out once). ``helper``: a
    thread that writes the array files while this one draws the pictures and puts the manifest together, then
    writes those the helper has not started; the helper's first error is raised here, after both are done.

    The array files and the manifest are written through ``files`` (``hookscope.core.outputs.drop_behind``), which the caller
    settles: a batch waits for the disk while the model runs the next image. Without it, the arrays are on disk
    before the manifest is written, and the manifest before this returns.

    ``progress(done, total, what)`` is called after each file this thread writes (an archive, a picture; ``what``
    names it), ``total`` counting the array files and the pictures: with every module hooked the pictures are most
    of the time (``hookscope export`` draws its progress line from it).
    """
    describe = partial(build_manifest, result, loaded, image=image, kinds=kinds, tree=tree, edits=edits,
                       compared=compared, extra=extra)  # fmt: skip
    if files is None:
        with DropBehind() as own:
            manifest, text = _write_files(result, out, kinds, png, colormap, scaling, describe, helper, own, progress)
            own.settle()  # the arrays are on disk before a manifest says they are there
            with own.create(out / "manifest.json") as stream:
                stream.write(text.encode())
        return manifest
    manifest, text = _write_files(result, out, kinds, png, colormap, scaling, describe, helper, files, progress)
    with files.create(out / "manifest.json") as stream:
        stream.write(text.encode())
    return manifest


def _write_files(
    result: RunResult,
    out: Path,
    kinds: tuple[str, ...],
    png: bool,
    colormap: str,
    scaling: str,
    describe: Callable[[], dict],
    helper: Executor | None,
    files: DropBehind,
    progress: Callable[[int, int, str], None] | None = None,
) -> tuple[dict, str]:
    """``write_run`` but the manifest, which it returns with its text (``describe()`` makes it)."""
    out.mkdir(parents=True, exist_ok=True)
    pictures = [(kind, record) for kind in kinds for record in result.of_kind(kind)] if png else []
    for kind in dict.fromkeys(kind for kind, _ in pictures):  # a blocked folder fails now, before any file is written
        (out / picture_folder(kind)).mkdir(parents=True, exist_ok=True)
    # contiguous first: an input straight from PIL is channels-last in memory, and np.save writes such an array
    # element by element (10x slower). input.npy is written first: it marks the folder as an output (batch.py).
    save_array(files, out / "input.npy", np.ascontiguousarray(result.input.numpy()))
    writes = _array_files(result, out, kinds, files)
    handed = [(helper.submit(save), save) for save in writes] if helper is not None else []
    total, done = len(writes) + len(pictures), 0

    def tell(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, what)

    try:
        if helper is None:
            for save in writes:
                save()
                tell(save.args[1].name)
        else:
            done = len(writes)  # the helper's: counted as they are handed over (this thread does not see them end)
        for kind, record in pictures:
            _write_picture(record, out / picture_folder(kind), colormap, scaling)
            tell(f"{picture_folder(kind)}/{file_stem(record.key)}.png")
        manifest = describe()
        text = json.dumps(manifest, indent=2)
        for future, save in reversed(handed):  # what the helper has not started yet, this thread writes itself
            if future.cancel():
                save()
    finally:  # after a failure here: what the helper has not started is dropped, and it is waited for
        wait([future for future, _ in handed if not future.cancel()])
    for future, _ in handed:
        if not future.cancelled():
            future.result()
    return manifest, text


def save_array(files: DropBehind, path: Path, array: np.ndarray) -> None:
    """``np.save(path, array)`` through ``files``."""
    with files.create(path) as stream:
        np.save(stream, array)


def _write_archive(files: DropBehind, path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    with files.create(path) as stream:
        save_npz(stream, arrays)


def _array_files(result: RunResult, out: Path, kinds: tuple[str, ...], files: DropBehind) -> list[partial[None]]:
    """A write for every array file of ``result`` but input.npy (``write.args[1]``: the file's path)."""
    writes: list[partial[None]] = []
    if result.input_grad is not None:
        writes.append(partial(save_array, files, out / "input_grad.npy", result.input_grad.numpy()))
    for kind in kinds:
        arrays = {r.key: r.tensor.numpy() for r in result.of_kind(kind)}
        writes.append(partial(_write_archive, files, out / ARCHIVES[kind], arrays))
    if "attention" in kinds:
        maps = rollout_maps(result)  # the class token's rollout over the patch grid (and its gradient-weighted form)
        if maps:
            writes.append(partial(_write_archive, files, out / ROLLOUT_ARCHIVE, maps))
    return writes


def _write_picture(record: Record, folder: Path, colormap: str, scaling: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    picture = picture_image(record_picture(record), scaling)
    write_png(picture, folder / f"{file_stem(record.key)}.png", colormap)


def build_manifest(
    result: RunResult,
    loaded: LoadedModel,
    *,
    image: str,
    kinds: tuple[str, ...],
    tree: Sequence[ModuleInfo] | None = None,
    edits: Sequence[str] = (),
    compared: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> dict:
    """What manifest.json says about ``result``, a run of ``loaded`` on ``image`` with hooks of ``kinds``: the
    model, the input and its preprocessing, the target, the top-5 predictions, the timings, the hook kinds and the
    archives they went to, why a gradient hook got nothing, NaN and inf, and every module with its records.

    ``extra`` is added next (a video frame's source). ``edits``: the specs of the edits the run had on (``zero:PATH:3``,
    as ``--edit`` takes them); with any, the manifest records them and, unless the run was not ``compared`` with one
    without them (``capture_run(..., baseline=True)``; a batch's runs are not), ``prediction_changes``: each top-5
    class's probability with and without the edits and the change (empty when the model gives no class scores).
    The window's whole-run export, ``hookscope export`` and a batch all write their manifests with this.
    """
    records_by_path: dict[str, list[dict]] = {}
    for r in result.records:
        records_by_path.setdefault(r.path, []).append(
            {
                "kind": word_of(r.kind),
                "key": r.key,
                "call": r.call,
                "leaf": r.leaf,
                "shape": list(r.data.shape),
                "method": r.method,
            }
        )
    modules = {}
    for node in module_tree(loaded.module) if tree is None else tree:
        run = result.survey.run_of(node.path)
        modules[node.path or "(model)"] = {
            "type": node.type_name,
            "params": node.params,
            "ran": run.ran,
            "calls": run.calls,
            "output_shapes": [list(s) for s in run.output_shapes],
            "records": records_by_path.get(node.path, []),
        }
    manifest = {
        "model": loaded.describe(),
        "image": image,
        "device": result.device,
        "preprocessing": loaded.preprocess.describe(),
        "input_shape": list(result.input.shape),
        "target": _target_record(result),
        "prediction_top5": [{"index": p.index, "label": p.label, "probability": p.probability} for p in result.top5],
        "timings_ms": result.timings,
        "hook_kinds": [word_of(kind) for kind in kinds],  # the vocabulary's words: act, grad...
        # Output parts a gradient hook got nothing for (they have a forward record, no gradient record): why.
        "no_gradient": {m.key: m.reason for m in result.no_gradient if m.kind in kinds},
        "archives": {word_of(kind): ARCHIVES[kind] for kind in kinds},
        # NaN or inf in the weights, the output, the input gradient or a capture (app/hookscope/core/engine/numeric.py); None when
        # every number was finite.
        "non_finite": numeric_report(loaded.module, result).describe(),
        "modules": modules,
    }
    manifest.update(extra or {})
    if edits:
        manifest["edits"] = list(edits)
        if compared:
            manifest["prediction_changes"] = [
                {"index": c.index, "label": c.label, "probability": c.probability, "without_edits": c.before,
                 "change": c.delta}
                for c in prediction_changes(result)
            ]  # fmt: skip
    return manifest


def _target_record(result: RunResult) -> dict:
    """The run's target; beyond a classifier's class (a segmentation model's pixels, a detector's box, a
    similarity), with the objective's value and what the model predicted."""
    from hookscope.core.engine.objectives import objective_record

    record: dict = {"index": result.target_index, "description": result.target}
    if result.task != "classification" or result.target.startswith("cosine similarity"):
        record["objective"] = objective_record(
            result.task, result.objective_value, result.detections, result.segmentation
        )
    return record

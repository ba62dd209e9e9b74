"""The dataset scan on a Ray cluster: the same scan as ``scan_images``, its batches spread over an actor pool.

Install with ``pip install 'hookscope[ray]'``. Ray Data runs ``map_batches`` over a pool of actors, each holding the
model (opened once per actor from the ``ModelSource``, so a model file or weights file must be readable at the same
path on every node, as must the images: a shared file system). One row of the dataset is one batch of image indexes,
the same contiguous batches ``scan_images`` makes; an actor reads and runs its batch with the very code the local
scan uses (``ChannelScanner``) and returns the batch's partial result: per module and channel the entries that can
still enter a top-k (a shard's top-k, cut by the actor's own running top-k) and the batch's moments. The driver
merges the partials in batch order with the same total order and the same float64 updates, so the result equals the
single-process scan. Then the receptive-field boxes of the final top-k go out the same way, in chunks of units.

Nothing here prints; progress comes back to ``run_scan``'s callback as the rows arrive.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from hookscope.core.common.errors import HookscopeError
from hookscope.core.models.source import ModelSource, open_model
from hookscope.core.scan.accumulators import Unit
from hookscope.core.scan.backends import BoxChunk, ScanBatch
from hookscope.core.scan.boxes import chunk_boxes
from hookscope.core.scan.channel_scanner import ChannelScanner
from hookscope.core.scan.reading import read_batch, read_units
from hookscope.core.scan.results import ScanSettings

INSTALL_HINT = "The scan on Ray needs Ray Data: pip install 'hookscope[ray]'."


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None and importlib.util.find_spec("pyarrow") is not None


class ScanActor:
    """One actor of the pool: the model, opened once; each call is a few rows of work (a batch of images to scan,
    or a chunk of units to box)."""

    def __init__(self, source: ModelSource, settings: ScanSettings, paths: list[str], device: str) -> None:
        loaded = open_model(source)
        loaded.module.to(device)
        self.preprocess = loaded.preprocess
        self.paths = [Path(p) for p in paths]
        self.scanner = ChannelScanner(loaded.module, settings, device)

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        payloads = []
        for work in rows["work"]:
            kind, items = pickle.loads(work)
            if kind == "scan":
                x, kept, skipped = read_batch(self.paths, self.preprocess, items)
                payloads.append(pickle.dumps((skipped, self.scanner.partial(x, kept) if x is not None else {})))
            else:
                units = [tuple(u) for u in items]
                read = read_units(self.paths, self.preprocess, units)
                payloads.append(pickle.dumps(chunk_boxes(self.scanner, self.preprocess, units, read)))
        return {"number": np.asarray(rows["number"]), "payload": np.array(payloads, dtype=object)}


class RayScan:
    """A scan backend on Ray (``run_scan(RayScan(...), ...)``): ``actors`` actors, each with ``cpus`` CPUs and
    ``gpus`` GPUs. Connects to ``address`` ("auto", "ray://head:10001", ...) or, when None, to the cluster
    ``RAY_ADDRESS`` names, else starts a local Ray; a Ray this object started is shut down by ``close``."""

    def __init__(
        self,
        source: ModelSource,
        settings: ScanSettings,
        paths: Sequence[Path],
        *,
        address: str | None = None,
        actors: int = 2,
        cpus: float = 1.0,
        gpus: float = 0.0,
        device: str = "cpu",
        quiet: bool = True,
    ) -> None:
        if not ray_available():
            raise HookscopeError(INSTALL_HINT)
        if actors < 1:
            raise HookscopeError(f"The Ray actor pool needs at least one actor, not {actors}.")
        import ray

        self.source, self.settings = source, settings
        self.paths = [str(p) for p in paths]
        self.actors, self.cpus, self.gpus, self.device = actors, cpus, gpus, device
        self.quiet = quiet
        self.started = False
        _quiet_loggers(quiet)
        if not ray.is_initialized():
            if quiet:  # Ray's C++ core logs to stderr too (an actor's constructor arguments, ...): fatal ones only
                os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
            try:
                with _no_stderr(quiet):  # the C++ core says so on stderr as it starts, whatever the level
                    ray.init(
                        address=address, logging_level=logging.ERROR if quiet else logging.INFO, log_to_driver=not quiet
                    )
            except Exception as error:  # a wrong address, a cluster that does not answer
                raise HookscopeError(f"Cannot connect to Ray{f' at {address}' if address else ''}: "
                                     f"{_first_line(error)}") from error  # fmt: skip
            self.started = True

    def close(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False

    def scan(self, batches: Sequence[Sequence[int]], start: int) -> Iterator[ScanBatch]:
        rows = [(n, ("scan", list(batches[n]))) for n in range(start, len(batches))]
        for number, (skipped, partials) in self._run(rows):
            yield number, skipped, partials

    def boxes(self, chunks: Sequence[Sequence[Unit]], start: int) -> Iterator[BoxChunk]:
        rows = [(n, ("boxes", [list(u) for u in chunks[n]])) for n in range(start, len(chunks))]
        yield from self._run(rows)

    def _run(self, rows: list[tuple[int, tuple[str, Any]]]) -> Iterator[tuple[int, Any]]:
        """The rows through the actor pool, results in row order (the merge must see the batches in order)."""
        if not rows:
            return
        import ray

        with _ordered_quiet_data(self.quiet):
            items = [{"number": n, "work": pickle.dumps(work)} for n, work in rows]
            # one block per row, so that every actor of the pool gets work (by default a few rows make one block)
            dataset: Any = ray.data.from_items(items, override_num_blocks=len(items))
            dataset = dataset.map_batches(
                ScanActor,
                fn_constructor_kwargs={"source": self.source, "settings": self.settings, "paths": self.paths,
                                       "device": self.device},
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(size=self.actors),
                num_cpus=self.cpus,
                num_gpus=self.gpus,
            )  # fmt: skip
            iterator = dataset.iter_rows()
            try:
                for row in iterator:
                    yield int(row["number"]), pickle.loads(row["payload"])
            except HookscopeError:
                raise
            except Exception as error:
                raise _unwrapped(error) from error


RAY_LOGGERS = ("ray", "ray.data", "ray.util", "ray._private", "ray.serve", "ray.train", "ray.tune")


def _quiet_loggers(quiet: bool) -> None:
    """Ray's and Ray Data's own logging lines (a local cluster started, an execution plan, a dataset's progress)
    go only with ``hookscope scan --ray --debug``: else their loggers say errors only."""
    import logging

    if not quiet:
        return
    import ray.data  # noqa: F401 - Ray Data sets its loggers up when imported: quieted after that

    for name in RAY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextmanager
def _no_stderr(quiet: bool) -> Iterator[None]:
    """When ``quiet``, the process's stderr (file descriptor 2, where Ray's C++ core writes) goes nowhere for a
    while: only around ``ray.init``, whose failures come back as exceptions."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def _ordered_quiet_data(quiet: bool = True) -> Iterator[None]:
    """Ray Data keeping the rows' order and drawing no progress bars (nor, when ``quiet``, the lines it prints as
    an execution starts) on the terminal, for this scan only."""
    import ray

    context = ray.data.DataContext.get_current()
    names = ("enable_progress_bars", "print_on_execution_start", "enable_operator_progress_bars")
    saved_order = context.execution_options.preserve_order
    saved = {name: getattr(context, name) for name in names if hasattr(context, name)}
    context.execution_options.preserve_order = True
    for name in saved:
        setattr(context, name, False if (quiet or name == "enable_progress_bars") else saved[name])
    _quiet_loggers(quiet)
    try:
        with warnings.catch_warnings():  # the filters of the whole process (Ray Data warns from its own threads)
            if quiet:  # Ray Data's advice (an actor pool larger than its input, ...) as warnings: with --debug only
                warnings.filterwarnings("ignore", module=r"ray(\.|$)")
            yield
    finally:
        context.execution_options.preserve_order = saved_order
        for name, value in saved.items():
            setattr(context, name, value)


def _unwrapped(error: BaseException) -> BaseException:
    """The ``HookscopeError`` an actor raised, out of Ray's wrappers; else one line saying what Ray said."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, HookscopeError):
            return current
        cause = getattr(current, "cause", None)
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return HookscopeError(f"The scan failed on Ray: {_first_line(error)}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__

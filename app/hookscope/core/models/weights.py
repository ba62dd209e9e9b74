"""Downloading the catalogue's pretrained weights into the torch hub cache, verified and all-or-nothing.

torchvision names every weights file ``NAME-HASH.pth``, where HASH is the start of the file's SHA-256. A download
streams into a hidden temporary file in the cache folder, is checked against that hash (and against the length
the server announced), and only then is moved into place with one atomic ``os.replace``. A cancelled, cut,
stalled or corrupt download deletes its temporary file, so the cache never holds a bad or partial file under the
name torchvision looks for.

Nothing here prints: progress goes to a callback and cancellation is polled, so the window (a worker thread with
a progress bar and a Cancel button) and the command line (a one-line bar on stderr) share this code.
"""

from __future__ import annotations

import glob
import hashlib
import http.client
import os
import re
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import torch
import torchvision

from hookscope.core.common.errors import DownloadCancelled, ModelError, WeightsDownloadError
from hookscope.core.models.catalogue import check_model_name, default_weights_file
from hookscope.core.models.loaded import HF_PREFIX, TIMM_PREFIX

WEIGHTS_URL_ENV = "HOOKSCOPE_WEIGHTS_URL"  # replaces the part of the address before the file name (mirrors)
CHUNK_BYTES = 64 * 1024
PROGRESS_INTERVAL_S = 0.1
STALE_PARTIAL_S = 3600  # a temporary file untouched this long belongs to a download that was killed
# A server that keeps sending a byte now and then never trips the "no data for N s" timeout, yet would take days.
# Over every RATE_WINDOW_S a download must average MIN_RATE_BYTES_S, or it gives up (45 MB at 10 kB/s: 75 min).
MIN_RATE_BYTES_S = 10_000.0
RATE_WINDOW_S = 30.0

#: ``progress(bytes_done, bytes_total_or_None, bytes_per_second)``; called from the downloading thread.
ProgressCallback = Callable[[int, int | None, float], None]
#: Polled between chunks; return True to cancel.
CancelCheck = Callable[[], bool]

_HASH_HEX = re.compile(r"[0-9a-f]{8,64}")


def checkpoints_dir() -> Path:
    """Where torchvision looks for (and keeps) downloaded weights: ``torch.hub.get_dir()/checkpoints``."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def _default_url(name: str) -> str:
    if name.startswith(HF_PREFIX):
        raise ModelError(f"'{name}' is a model from the Hugging Face Hub: its files come with "
                         "hookscope.core.models.hub.fetch_model, not with torchvision's download.")  # fmt: skip
    if name.startswith(TIMM_PREFIX):
        raise ModelError(
            f"'{name}' is a timm model: Hookscope downloads torchvision's weights only; "
            "timm's own download (timm.create_model(..., pretrained=True)) fills its cache."
        )
    check_model_name(name)
    return torchvision.models.get_model_weights(name).DEFAULT.url


def weights_url(name: str) -> str:
    """The address of ``name``'s default weights; the base is replaced by ``$HOOKSCOPE_WEIGHTS_URL`` when set."""
    url = _default_url(name)
    base = os.environ.get(WEIGHTS_URL_ENV, "").strip()
    if base:
        return base.rstrip("/") + "/" + os.path.basename(urlparse(url).path)
    return url


def expected_hash_prefix(filename: str) -> str | None:
    """The SHA-256 prefix a torch hub file name carries (``resnet18-f37072fd.pth`` -> ``f37072fd``), or None."""
    stem = Path(filename).stem
    if "-" not in stem:
        return None
    candidate = stem.rsplit("-", 1)[1].lower()
    return candidate if _HASH_HEX.fullmatch(candidate) else None


def is_cached(name: str) -> bool:
    """Whether ``name``'s default pretrained weights are already in the torch hub cache (for ``hf:ORG/NAME``: its
    files in the Hugging Face cache; for ``timm/NAME``: timm's weights in either cache)."""
    check_model_name(name)
    if name.startswith(HF_PREFIX):
        from hookscope.core.models.hub import is_cached as hub_cached

        return hub_cached(name)
    if name.startswith(TIMM_PREFIX):
        from hookscope.core.models.catalogue import _timm_cached_weights

        return _timm_cached_weights(name[len(TIMM_PREFIX) :]) is not None
    return not name.startswith(TIMM_PREFIX) and default_weights_file(name).is_file()


def download_weights(
    name: str,
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
    timeout: float = 30.0,
    force: bool = False,
    min_rate: float | None = None,
    rate_window: float | None = None,
) -> Path:
    """Download ``name``'s default weights into the torch hub cache and return the cached file.

    Returns at once when the file is already cached (unless ``force``: then it is fetched again and replaces
    the cached one only once complete and verified). Raises :class:`DownloadCancelled` or
    :class:`WeightsDownloadError` (one sentence; the cache is untouched). ``timeout``: seconds without any data;
    ``min_rate`` (bytes/s, 0: no limit; default ``MIN_RATE_BYTES_S``): the least average speed over each
    ``rate_window`` seconds (default ``RATE_WINDOW_S``).
    """
    url = weights_url(name)
    target = default_weights_file(name)
    if target.is_file() and not force:
        return target
    return download_to_cache(
        url,
        filename=target.name,
        folder=target.parent,
        label=f"{name}'s weights",
        progress=progress,
        cancelled=cancelled,
        timeout=timeout,
        min_rate=min_rate,
        rate_window=rate_window,
    )


def download_to_cache(
    url: str,
    filename: str | None = None,
    folder: Path | None = None,
    label: str | None = None,
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
    timeout: float = 30.0,
    min_rate: float | None = None,
    rate_window: float | None = None,
) -> Path:
    """Download ``url`` into ``folder`` (default: the torch hub checkpoints folder) as ``filename``.

    The file name's hash (see :func:`expected_hash_prefix`) is verified when it carries one. ``label`` names
    the download in messages (default: the file name).
    """
    filename = filename or os.path.basename(urlparse(url).path)
    if not filename:
        raise WeightsDownloadError(f"The address {url} does not end in a file name.")
    folder = Path(folder) if folder is not None else checkpoints_dir()
    label = label or filename
    host = urlparse(url).netloc or url
    expected = expected_hash_prefix(filename)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WeightsDownloadError(f"Could not create the cache folder {folder} ({_reason(error)}).") from error
    _remove_stale_partials(folder, filename)
    if cancelled is not None and cancelled():
        raise DownloadCancelled(f"The download of {label} was cancelled; nothing was saved.")

    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{filename}.", suffix=".part")
    except OSError as error:
        raise WeightsDownloadError(f"Could not write to the cache folder {folder} ({_reason(error)}).") from error
    try:
        with os.fdopen(handle, "wb") as out:
            digest, done, total = _stream(
                url,
                out,
                host,
                filename,
                folder,
                label,
                progress,
                cancelled,
                timeout,
                _RateFloor(
                    MIN_RATE_BYTES_S if min_rate is None else min_rate,
                    RATE_WINDOW_S if rate_window is None else rate_window,
                ),
            )
        if total is not None and done != total:
            raise WeightsDownloadError(
                f"The download of {label} from {host} was cut short after {_mb(done)} of {_mb(total)}; "
                "nothing was saved to the cache, try again."
            )
        actual = digest.hexdigest()
        if expected is not None and not actual.startswith(expected):
            raise WeightsDownloadError(
                f"The file downloaded for {label} from {host} is not the one its name promises (its SHA-256 "
                f"starts with {actual[: len(expected)]}, {filename} says {expected}), so it was discarded: "
                "a corrupt download or a wrong mirror."
            )
        os.replace(temporary, folder / filename)
    except BaseException:  # cancel, errors, Ctrl-C, SIGTERM (the CLI raises there): never leave the file behind
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return folder / filename


# long because: one HTTP response from the request to the last chunk: its error wording, resume check, rate floor and
# progress share the response's state
def _stream(
    url: str,
    out: BinaryIO,
    host: str,
    filename: str,
    folder: Path,
    label: str,
    progress: ProgressCallback | None,
    cancelled: CancelCheck | None,
    timeout: float,
    floor: _RateFloor,
) -> tuple[hashlib._Hash, int, int | None]:
    from hookscope._version import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"hookscope/{__version__}"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:  # urllib gave up following redirects: a loop, or a chain longer than 10
            raise WeightsDownloadError(
                f"The server {host} sends the address of {filename} round in a redirect loop, so nothing was "
                f"downloaded; try again later or use another mirror (${WEIGHTS_URL_ENV})."
            ) from error
        raise WeightsDownloadError(
            f"The server {host} answered '{error.code} {_reason(error.reason)}' for {filename}"
            + (f" (is ${WEIGHTS_URL_ENV} right?)." if os.environ.get(WEIGHTS_URL_ENV) else ".")
        ) from error
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        cause = getattr(error, "reason", error)
        reason = _reason(cause)
        if isinstance(cause, ssl.SSLError):  # reachable, but not trusted: not an offline problem
            raise WeightsDownloadError(
                f"Could not download {label} from {host}: the secure connection failed ({reason})."
            ) from error
        # Reached, but what answered is not a web server that serves the file: not an offline problem either.
        if isinstance(cause, http.client.RemoteDisconnected):
            raise WeightsDownloadError(
                f"The server {host} closed the connection without an answer, so nothing was downloaded; try again "
                f"later, or check the address (or ${WEIGHTS_URL_ENV})."
            ) from error
        if isinstance(cause, http.client.HTTPException):
            raise WeightsDownloadError(
                f"The server {host} answered with something that is not HTTP ({_printable(str(cause))}), so nothing "
                f"was downloaded: is the address (or ${WEIGHTS_URL_ENV}) right?"
            ) from error
        raise WeightsDownloadError(
            f"Could not reach {host} to download {label} ({reason}): you appear to be offline; connect to the "
            f"network, set {WEIGHTS_URL_ENV} to a mirror, or copy {filename} into {folder}."
        ) from error

    digest = hashlib.sha256()
    done = 0
    with response:
        total = _content_length(response)
        start = last = time.monotonic()
        floor.begin(start)
        if progress is not None:
            progress(0, total, 0.0)
        while True:
            if cancelled is not None and cancelled():
                raise DownloadCancelled(f"The download of {label} was cancelled; nothing was saved.")
            try:
                # read1, not read: read(n) waits until n bytes have come, so a server that trickles a byte at a time
                # showed no progress and never tripped the timeout; read1 returns whatever one receive brought.
                chunk = response.read1(CHUNK_BYTES)
            except TimeoutError as error:
                raise WeightsDownloadError(
                    f"The download of {label} from {host} stalled (no data for {timeout:g} s) after {_mb(done)}; "
                    "nothing was saved to the cache, try again."
                ) from error
            except (OSError, http.client.HTTPException) as error:
                raise WeightsDownloadError(
                    f"The connection to {host} broke after {_mb(done)} of {label} ({_reason(error)}); "
                    "nothing was saved to the cache, try again."
                ) from error
            if not chunk:
                break
            try:
                out.write(chunk)
            except OSError as error:
                raise WeightsDownloadError(
                    f"Could not write {label} into {folder} ({_reason(error)}); nothing was saved."
                ) from error
            digest.update(chunk)
            done += len(chunk)
            now = time.monotonic()
            if progress is not None and now - last >= PROGRESS_INTERVAL_S:
                last = now
                progress(done, total, done / max(now - start, 1e-6))
            too_slow = floor.check(now, done)
            if too_slow is not None:
                raise WeightsDownloadError(
                    f"The download of {label} from {host} is too slow to finish ({too_slow}, under the "
                    f"{_rate(floor.min_rate)} minimum{_eta(done, total, floor.last_rate)}); nothing was saved "
                    f"to the cache: try again later, or set {WEIGHTS_URL_ENV} to a faster mirror."
                )
        if progress is not None:
            progress(done, total, done / max(time.monotonic() - start, 1e-6))
    return digest, done, total


class _RateFloor:
    """The least average speed a download must keep over every window of ``window`` seconds (0: no floor)."""

    def __init__(self, min_rate: float, window: float) -> None:
        self.min_rate = max(float(min_rate), 0.0)
        self.window = max(float(window), 1e-3)
        self._since = 0.0
        self._bytes = 0
        self.last_rate = 0.0

    def begin(self, now: float) -> None:
        self._since, self._bytes = now, 0

    def check(self, now: float, done: int) -> str | None:
        """None while fast enough; else what the last window brought, in words."""
        elapsed = now - self._since
        if not self.min_rate or elapsed < self.window:
            return None
        got = done - self._bytes
        self.last_rate = got / elapsed
        if self.last_rate >= self.min_rate:
            self._since, self._bytes = now, done
            return None
        return f"{_count(got)} in the last {elapsed:.0f} s"


def _count(count: int) -> str:
    return f"{count} bytes" if count < 10_000 else _mb(count)


def _rate(rate: float) -> str:
    return f"{rate / 1000:g} kB/s"


def _eta(done: int, total: int | None, rate: float) -> str:
    """ "; the remaining 44.6 MB would take 9 hours at that speed", when the length is known."""
    if not total or total <= done:
        return ""
    left = total - done
    if rate <= 0:
        return f"; the remaining {_mb(left)} would never arrive at that speed"
    seconds = left / rate
    when = (
        f"{seconds / 86400:.0f} days"
        if seconds >= 2 * 86400
        else (f"{seconds / 3600:.0f} hours" if seconds >= 2 * 3600 else f"{seconds / 60:.0f} minutes")
    )
    return f"; the remaining {_mb(left)} would take {when} at that speed"


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.headers.get("Content-Length")
    try:
        return int(value) if value is not None and int(value) >= 0 else None
    except ValueError:
        return None


def _remove_stale_partials(folder: Path, filename: str) -> None:
    """Temporary files of downloads that were killed (no exception ran): remove them once clearly abandoned."""
    now = time.time()
    for partial in folder.glob(f".{glob.escape(filename)}.*.part"):
        try:
            if now - partial.stat().st_mtime > STALE_PARTIAL_S:
                partial.unlink()
        except OSError:
            pass


def _reason(error: object) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if isinstance(error, BaseException):
        text = str(error).strip().splitlines()
        return text[0] if text else type(error).__name__
    return str(error)


def _printable(text: str, limit: int = 40) -> str:
    """What a server sent, safe for one line of text: control bytes as '?', at most ``limit`` characters."""
    shown = "".join(c if c.isprintable() else "?" for c in text.strip().strip("'\""))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _mb(count: int) -> str:
    return f"{count / 1e6:.1f} MB"

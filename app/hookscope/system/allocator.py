"""Keep the memory one run frees for the next run (glibc's malloc, on Linux).

A run that keeps every hooked module's output and gradient holds a few hundred MB more than a bare run, and frees
it all when its result is dropped. By default glibc then gives the top of its heap back to the system (its trim
threshold adapts to the blocks freed, a few MB), so the next run takes the same memory again page by page: on
ResNet-50 with every module hooked that is about 160 MB of fresh pages, and brk calls, a run. With the mmap
threshold fixed at its maximum (32 MiB: blocks below it come from the heap and go back to it) and a trim threshold
of 1 GiB, a steady run makes no memory system call at all (counted with ``strace -f -e brk,mmap,munmap``). This
is what PyTorch's own GPU caching allocator does for device memory; the price is that the process keeps up to
1 GiB of freed heap for reuse instead of returning it.

Elsewhere (macOS, Windows, musl) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENA_MAX = 2  # see keep_freed_memory
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper limit on 64-bit systems (a larger value is refused)
TRIM_THRESHOLD = 1024 * 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def trim() -> bool:
    """Give malloc's free pages back to the system (glibc's ``malloc_trim``), in every arena: a pool thread that
    ran a model leaves its own arena full of freed blocks, which glibc returns only from the top of each heap.
    A millisecond or so; True when it gave memory back. The window calls it after a full collection (a model
    switch), not the command line, whose runs keep their memory for the next (``keep_freed_memory``)."""
    libc = _libc()
    malloc_trim = getattr(libc, "malloc_trim", None)
    if malloc_trim is None:  # not glibc
        return False
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(malloc_trim(0))


def keep_freed_memory() -> bool:
    """Tune glibc's malloc as described above; True when it took the settings."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # not Linux, or not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # At most ARENA_MAX arenas: each thread that runs a model (the window's pool threads take runs in turn) would
    # otherwise open an arena of its own, and with the trim threshold above each arena keeps what its runs freed. A
    # window playing a video grew +44 MB in one step when a run landed on a new pool thread (+63 MB over 2,000
    # frames); with two arenas, +10 MB (python -m hookscope.ui.bench_live --frames 2000).
    return (
        bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
        and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        and bool(mallopt(M_ARENA_MAX, ARENA_MAX))
    )

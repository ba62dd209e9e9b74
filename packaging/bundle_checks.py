"""Checks of a built bundle that need no Python packages beyond the standard library.

    python packaging/bundle_checks.py floor DIR        every ELF file's GLIBC_/GLIBCXX_/CXXABI_ needs within FLOOR
    python packaging/bundle_checks.py no-cuda DIR      fails when a CUDA library is in the bundle (the CPU variant)
    python packaging/bundle_checks.py max-size DIR...  fails when a file is 2 GiB or larger (release hosts refuse it)
    python packaging/bundle_checks.py sha256 FILE      writes FILE.sha256 ("HASH  NAME", for sha256sum -c)
    python packaging/bundle_checks.py write-video FILE.avi   a small video for the bundle's video check (this one
                                                        command needs OpenCV: the build environment's 'live' extra)
    python packaging/bundle_checks.py left-out DIR     fails when a file the spec leaves out (LEFT_OUT) is in DIR
    python packaging/bundle_checks.py audit DIR        what a bundle carries: headers, static libraries, test
                                                        folders, duplicate copies, libraries linked at start-up and
                                                        those loaded on first use (docs/installers.md's figures)

Each prints one line per problem and exits 1 when there is one. The ELF reader is a small one of our own (the
version-needs table, ``.gnu.version_r``, is all it reads), so the check runs where neither binutils' ``objdump``
nor pyelftools is installed; ``tests/packaging/test_bundle_checks.py`` compares it with ``objdump -T``.

The spec (``hookscope.spec``) loads this file too, for ``HOST_LIBRARIES``: the build host's libraries that the
bundle leaves out so that the target system's own (compatible, and usually newer) copies load instead.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The oldest Linux systems the bundle supports: glibc 2.35 with GCC 12's libstdc++ (Ubuntu 22.04, Linux Mint 21,
# Debian 12, Fedora 36). README "For people who never open a terminal" states the same; a fast test keeps the two
# equal, and the bundle test fails when any bundled ELF file needs more.
FLOOR: dict[str, tuple[int, ...]] = {"GLIBC": (2, 35), "GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13)}

# Left out of the bundle (by soname) when they come from the build host's system folders: every desktop Linux has
# them, and the host's copies are newer than the floor (Debian 12's libstdc++ and libexpat need GLIBC_2.36).
# libstdc++ and libgcc_s must come from the target anyway: its graphics drivers load them too, and two copies of
# libstdc++ in one process is a known source of crashes. The X11/fontconfig stack follows the system's own
# configuration files, which a bundled copy of another version may not read.
HOST_LIBRARIES = frozenset({
    "libstdc++.so.6", "libgcc_s.so.1", "libexpat.so.1", "libz.so.1",
    "libfontconfig.so.1", "libfreetype.so.6",
    "libX11.so.6", "libX11-xcb.so.1", "libxcb.so.1", "libXau.so.6", "libXdmcp.so.6", "libXext.so.6",
    "libXrender.so.1",
})  # fmt: skip
SYSTEM_FOLDERS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/")

# File names of NVIDIA's CUDA libraries and of torch's CUDA parts, on Linux (libcudart.so.13) and Windows
# (cudart64_13.dll, torch_cuda.dll): a CPU-only torch has none of them.
CUDA_NAMES = re.compile(
    r"^(lib)?(cuda|cudart|cublas|cublasLt|cufft|cufile|curand|cusolver|cusparse|cudnn|nccl|nvrtc|nvJitLink|"
    r"nvToolsExt|nvtx|cupti|nvshmem|nvperf|torch_cuda|c10_cuda|caffe2_nvrtc|triton)[^/]*\.(so|dll)(\.[0-9.]+)?$"
)
GIB = 1 << 30
MAX_FILE_BYTES = 2 * GIB  # GitHub releases and many other hosts refuse a file of 2 GiB or more

# Files the collected packages bring that no code path of Hookscope loads; hookscope.spec leaves them out and
# `left-out` checks that none got in. Measured on the CUDA bundle (`audit`, figures in docs/installers.md); the
# bundle's self-test and video check run after they are gone. Patterns are matched against a file's path inside the
# bundle's _internal folder, with '/' separators.
LEFT_OUT: dict[str, str] = {
    # protobuf's compiler (twice: the versioned name is a copy, not a link), for building torch's .proto files;
    # nothing in torch, torchvision or Hookscope runs it (torch_shm_manager beside it is run, and stays)
    r"^torch/bin/protoc(-[0-9.]+)?$": "protobuf's compiler, a build tool",
    # Qt's own translations: read only through a QTranslator, which Hookscope never installs (its words are English)
    r"^PySide6/Qt/translations/.*\.qm$": "Qt's translations, never loaded",
}

SHT_DYNAMIC = 6
DT_NEEDED = 1
SHT_GNU_VERNEED = 0x6FFFFFFE


def is_host_library(name: str, source: str) -> bool:
    """Whether a binary PyInstaller collected (``name`` in the bundle, from ``source``) is left to the target."""
    return os.path.basename(name) in HOST_LIBRARIES and source.startswith(SYSTEM_FOLDERS)


def is_left_out(name: str) -> bool:
    """Whether a file at ``name`` (its path inside the bundle) is one of LEFT_OUT's."""
    return any(re.search(pattern, name.replace(os.sep, "/")) for pattern in LEFT_OUT)


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Need:
    """One versioned symbol set an ELF file needs: ``GLIBC_2.34`` from ``libc.so.6``."""

    library: str
    name: str  # "GLIBC_2.34"

    @property
    def family(self) -> str:
        return self.name.rsplit("_", 1)[0]

    @property
    def version(self) -> tuple[int, ...]:
        return parse_version(self.name.rsplit("_", 1)[1]) if "_" in self.name else ()


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def version_needs(path: Path) -> list[Need]:
    """The ``.gnu.version_r`` entries of an ELF file (what ``objdump -p`` lists under "Version References")."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _version_needs(path, data)  # mapped, not read: libtorch_cuda.so alone is over 1 GB


def _version_needs(path: Path, data: mmap.mmap) -> list[Need]:
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    wide = data[4] == 2  # ELFCLASS64
    order = "<" if data[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        section = order + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        section = order + "IIIIIIIIII"
    sections = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
    needs: list[Need] = []
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strings = sections[link][4]

        def text(at: int, base: int = strings) -> str:
            end = data.find(b"\0", base + at)
            return data[base + at:end].decode("ascii", "replace")

        entry = offset
        for _ in range(info):  # sh_info: the number of Verneed entries
            _version, count, file_at, aux, next_entry = struct.unpack_from(order + "HHIII", data, entry)
            library = text(file_at)
            at = entry + aux
            for _ in range(count):
                _hash, _flags2, _other, name_at, next_aux = struct.unpack_from(order + "IHHII", data, at)
                needs.append(Need(library, text(name_at)))
                if not next_aux:
                    break
                at += next_aux
            if not next_entry:
                break
            entry += next_entry
    return needs


def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF file's dynamic section (what ``objdump -p`` lists as NEEDED): the
    libraries the dynamic loader loads with it."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF":
            raise ValueError(f"{path} is not an ELF file")
        wide = data[4] == 2
        order = "<" if data[5] == 1 else ">"
        if wide:
            shoff, = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
            section, entry_format = order + "IIQQQQIIQQ", order + "qQ"
        else:
            shoff, = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
            section, entry_format = order + "IIIIIIIIII", order + "iI"
        sections = [struct.unpack_from(section, data, shoff + i * shentsize) for i in range(shnum)]
        needed = []
        for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
            if kind != SHT_DYNAMIC:
                continue
            strings = sections[link][4]
            step = struct.calcsize(entry_format)
            for at in range(offset, offset + size, step):
                tag, value = struct.unpack_from(entry_format, data, at)
                if tag == 0:  # DT_NULL ends the table
                    break
                if tag == DT_NEEDED:
                    end = data.find(b"\0", strings + value)
                    needed.append(data[strings + value:end].decode("ascii", "replace"))
        return needed


def elf_files(folder: Path) -> Iterator[Path]:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink() and is_elf(path):
                yield path


def floor_problems(folder: Path, floor: dict[str, tuple[int, ...]] = FLOOR) -> list[str]:
    """One line per ELF file that needs a newer GLIBC_ (GLIBCXX_, CXXABI_) version than ``floor``."""
    problems = []
    for path in elf_files(folder):
        worst: dict[str, tuple[int, ...]] = {}
        for need in version_needs(path):
            limit = floor.get(need.family)
            if limit is not None and need.version > limit and need.version > worst.get(need.family, ()):
                worst[need.family] = need.version
        for family, version in sorted(worst.items()):
            problems.append(f"{path.relative_to(folder)} needs {family}_{version_text(version)} "
                            f"(the stated floor is {family}_{version_text(floor[family])})")
    return problems


def highest_needs(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """The highest version of each family any ELF file in ``folder`` needs, and one file that needs it."""
    highest: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in elf_files(folder):
        for need in version_needs(path):
            if need.family in FLOOR and need.version > highest.get(need.family, ((), ""))[0]:
                highest[need.family] = (need.version, str(path.relative_to(folder)))
    return highest


def bundled_host_libraries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name in HOST_LIBRARIES)


def cuda_libraries(folder: Path) -> list[str]:
    """CUDA libraries (or an ``nvidia`` package folder) in a bundle: none belong in the CPU variant."""
    found = []
    for path in folder.rglob("*"):
        if CUDA_NAMES.match(path.name) or (path.is_dir() and path.name == "nvidia"):
            found.append(str(path.relative_to(folder)))
    return sorted(found)


def oversized(paths: Iterable[Path], limit: int = MAX_FILE_BYTES) -> list[str]:
    """Files of ``limit`` bytes or more among ``paths`` (files, or folders walked)."""
    found = []
    for start in paths:
        files = [start] if start.is_file() else (p for p in start.rglob("*") if p.is_file() and not p.is_symlink())
        for path in files:
            size = path.stat().st_size
            if size >= limit:
                found.append(f"{path} is {size / GIB:.2f} GiB (the limit is {limit / GIB:.2f} GiB)")
    return found


def left_out_found(folder: Path) -> list[str]:
    """Files of LEFT_OUT's that are in a bundle (searched under its _internal folder, or the folder itself)."""
    inside = folder / "_internal" if (folder / "_internal").is_dir() else folder
    return sorted(str(p.relative_to(inside)) for p in inside.rglob("*") if is_left_out(str(p.relative_to(inside))))


def left_out_size(folder: Path) -> str:
    inside = folder / "_internal" if (folder / "_internal").is_dir() else folder
    found = [inside / name for name in left_out_found(folder)]
    return f"{len(found)} files, {sum(p.stat().st_size for p in found if p.is_file()) / 1e6:.1f} MB"


@dataclass
class Audit:
    """What a bundle carries, in bytes (symbolic links count nothing: they point at a file counted once)."""

    total: int = 0
    files: int = 0
    headers: list[tuple[int, str]] | None = None
    static_libraries: list[tuple[int, str]] | None = None
    test_folders: list[tuple[int, str]] | None = None
    duplicates: list[tuple[int, str, str]] | None = None  # (bytes, the copy, the file it repeats)
    linked: list[tuple[int, str]] | None = None  # ELF files another bundled ELF file names as DT_NEEDED
    not_linked: list[tuple[int, str]] | None = None  # ELF files nothing names: extension modules, plugins, dlopen'd


def audit(folder: Path) -> Audit:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    result = Audit(total=sum(p.stat().st_size for p in files), files=len(files))

    def sized(paths: Iterable[Path]) -> list[tuple[int, str]]:
        return sorted(((p.stat().st_size, str(p.relative_to(folder))) for p in paths), reverse=True)

    result.headers = sized(p for p in files if p.suffix in (".h", ".hpp", ".cuh", ".hxx"))
    result.static_libraries = sized(p for p in files if p.suffix in (".a", ".lib") and is_elf(p) is False)
    result.test_folders = sized(
        p for p in files if {"test", "tests"} & set(p.relative_to(folder).parts[:-1]) and "licenses" not in p.parts
        and not any(part.endswith(".dist-info") for part in p.parts)
    )
    by_size: dict[int, list[Path]] = {}
    for path in files:
        by_size.setdefault(path.stat().st_size, []).append(path)
    result.duplicates = []
    for size, same in by_size.items():
        if len(same) < 2 or size < 4096:
            continue
        seen: dict[str, Path] = {}
        for path in sorted(same):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in seen:
                result.duplicates.append((size, str(path.relative_to(folder)), str(seen[digest].relative_to(folder))))
            else:
                seen[digest] = path
    result.duplicates.sort(reverse=True)
    elves = [p for p in files if is_elf(p)]
    names = {name for path in elves for name in needed_libraries(path)}
    # a library is found by its soname, which a symbolic link beside it may carry (libcudnn.so.9 -> ...)
    linked_names = {p.name for p in elves if p.name in names}
    linked_names |= {p.resolve().name for p in folder.rglob("*") if p.is_symlink() and p.name in names}
    result.linked = sized(p for p in elves if p.name in linked_names)
    result.not_linked = sized(p for p in elves if p.name not in linked_names)
    return result


def audit_lines(folder: Path) -> list[str]:
    found = audit(folder)

    def mb(entries: Iterable[tuple[int, ...]]) -> str:
        entries = list(entries)
        return f"{len(entries)} files, {sum(e[0] for e in entries) / 1e6:.1f} MB"

    def biggest(entries: list, count: int = 4) -> str:
        return "; ".join(f"{e[1]} {e[0] / 1e6:.1f} MB" for e in entries[:count])

    nvidia = [e for e in (found.linked or []) if e[1].split(os.sep)[:2] == ["_internal", "nvidia"]]
    lazy_nvidia = [e for e in (found.not_linked or []) if e[1].split(os.sep)[:2] == ["_internal", "nvidia"]]
    lines = [
        f"bundle: {found.total / 1e6:.1f} MB in {found.files} files",
        f"headers: {mb(found.headers or [])}",
        f"static libraries: {mb(found.static_libraries or [])}",
        f"in test folders: {mb(found.test_folders or [])} {biggest(found.test_folders or [], 2)}",
        f"duplicate copies: {mb(found.duplicates or [])}: "
        + "; ".join(f"{copy} = {first} {size / 1e6:.1f} MB" for size, copy, first in (found.duplicates or [])[:5]),
        f"NVIDIA libraries linked at start-up (DT_NEEDED): {mb(nvidia)}: {biggest(nvidia)}",
        f"NVIDIA libraries loaded on first use (dlopen): {mb(lazy_nvidia)}: {biggest(lazy_nvidia)}",
        f"left out by the spec (LEFT_OUT), yet found: {left_out_size(folder)}",
    ]
    return lines


def write_sha256(path: Path) -> Path:
    """``path.sha256`` in sha256sum's format, so that ``sha256sum -c`` checks the file (or the joined parts)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    out = path.with_name(path.name + ".sha256")
    out.write_text(f"{digest.hexdigest()}  {path.name}\n", newline="\n")  # LF on Windows too: sha256sum -c reads it
    return out


def write_video(path: Path, frames: int = 8, fps: float = 10.0) -> Path:
    """A small MJPG .avi (moving stripes) for the bundle's video check, written with the build environment's
    OpenCV (the 'live' extra)."""
    import cv2  # only this command needs it
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (160, 120))
    if not writer.isOpened():
        raise SystemExit(f"bundle_checks: OpenCV cannot write {path}")
    for index in range(frames):
        stripes = (np.indices((120, 160)).sum(axis=0) + index * 8) % 64 * 4
        writer.write(np.repeat(stripes[..., None], 3, axis=2).astype(np.uint8))
    writer.release()
    return path


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "write-video":
        print(f"wrote {write_video(Path(argv[1]))}")
        return 0
    if len(argv) < 2 or argv[0] not in ("floor", "no-cuda", "max-size", "sha256", "left-out", "audit"):
        print("usage: bundle_checks.py floor|no-cuda|max-size|sha256|left-out|audit DIR... | write-video FILE.avi",
              file=sys.stderr)  # fmt: skip
        return 2
    command, folders = argv[0], [Path(a) for a in argv[1:]]
    missing = [str(f) for f in folders if not f.exists()]
    if missing:
        print(f"bundle_checks: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if command == "floor":
        problems = [line for folder in folders for line in floor_problems(folder)]
        problems += [f"{name} is bundled: it must come from the target system"
                     for folder in folders for name in bundled_host_libraries(folder)]
        if not problems:
            for folder in folders:
                needs = highest_needs(folder)
                print("ELF floor ok: highest needs " + ", ".join(
                    f"{family}_{version_text(v)} ({where})" for family, (v, where) in sorted(needs.items())))
    elif command == "sha256":
        problems = []
        for path in folders:
            print(write_sha256(path).read_text().strip())
    elif command == "audit":
        problems = []
        for folder in folders:
            print("\n".join(audit_lines(folder)))
    elif command == "left-out":
        problems = [f"left out by hookscope.spec, yet in the bundle: {name}" for f in folders for name in left_out_found(f)]
        if not problems:
            print(f"none of the {len(LEFT_OUT)} kinds of file the spec leaves out is in the bundle")
    elif command == "no-cuda":
        problems = [f"CUDA library in the CPU variant: {name}" for f in folders for name in cuda_libraries(f)]
        if not problems:
            print("no CUDA library in the bundle")
    else:
        problems = oversized(folders)
        if not problems:
            print("no file of 2 GiB or more")
    for line in problems:
        print(f"bundle_checks: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

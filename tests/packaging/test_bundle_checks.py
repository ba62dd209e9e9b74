"""The post-build checks, on real files and without a build: the ELF reader against binutils, the glibc floor on a
real library of this system, the CPU variant's CUDA check, the 2 GiB limit, and the README's stated floor."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SYSTEM_ELF = Path(sys.executable).resolve()  # this Python: an ELF file that links libc on every Linux


def objdump_needs(path: Path) -> set[tuple[str, str]]:
    """``objdump -p``'s "Version References": (library, version) pairs."""
    text = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    needs, library = set(), None
    for line in text.split("Version References:")[-1].splitlines():
        if match := re.match(r"\s+required from (\S+):", line):
            library = match.group(1)
        elif match := re.match(r"\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)", line):
            needs.add((library, match.group(1)))
    return needs


def system_library(name: str) -> Path | None:
    for folder in (
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ):
        if (Path(folder) / name).is_file():
            return (Path(folder) / name).resolve()
    return None


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF files are Linux's")


def test_the_elf_reader_finds_the_glibc_versions_a_real_file_needs(checks) -> None:
    needs = checks.version_needs(SYSTEM_ELF)
    assert any(n.family == "GLIBC" and n.library.startswith("libc.so") for n in needs)
    assert all(n.version for n in needs if n.family == "GLIBC")
    if shutil.which("objdump"):
        assert {(n.library, n.name) for n in needs} == objdump_needs(SYSTEM_ELF)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump is the reference")
def test_the_elf_reader_agrees_with_objdump_on_a_cxx_library(checks) -> None:
    library = system_library("libstdc++.so.6")
    if library is None:
        pytest.skip("no libstdc++ here")
    assert {(n.library, n.name) for n in checks.version_needs(library)} == objdump_needs(library)


def test_a_library_that_needs_a_newer_glibc_than_the_floor_fails_the_scan(checks, tmp_path: Path) -> None:
    bundle = tmp_path / "hookscope"
    (bundle / "_internal").mkdir(parents=True)
    shutil.copy(SYSTEM_ELF, bundle / "_internal" / "tool")
    (bundle / "_internal" / "notes.txt").write_text("not an ELF file")
    highest = max(n.version for n in checks.version_needs(SYSTEM_ELF) if n.family == "GLIBC")
    assert checks.floor_problems(bundle, {"GLIBC": highest}) == []
    below = (*highest[:-1], highest[-1] - 1)
    problems = checks.floor_problems(bundle, {"GLIBC": below})
    assert problems == [
        f"_internal/tool needs GLIBC_{checks.version_text(highest)} "
        f"(the stated floor is GLIBC_{checks.version_text(below)})"
    ]


def test_a_bundled_host_libstdcxx_is_refused_and_the_command_exits_1(checks, tmp_path: Path) -> None:
    library = system_library("libstdc++.so.6")
    if library is None:
        pytest.skip("no libstdc++ here")
    bundle = tmp_path / "hookscope"
    bundle.mkdir()
    shutil.copy(library, bundle / "libstdc++.so.6")
    done = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "bundle_checks.py"), "floor", str(bundle)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "libstdc++.so.6 is bundled: it must come from the target system" in done.stderr


def test_only_host_copies_of_system_libraries_are_left_out(checks) -> None:
    assert checks.is_host_library("libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
    assert checks.is_host_library("libexpat.so.1", "/lib/x86_64-linux-gnu/libexpat.so.1")
    assert not checks.is_host_library("libstdc++.so.6", "/tmp/build/venv/lib/python3.11/site-packages/x/libstdc++.so.6")
    assert not checks.is_host_library("libxcb-cursor.so.0", "/lib/x86_64-linux-gnu/libxcb-cursor.so.0")


def test_the_cpu_variant_check_finds_cuda_libraries(checks, tmp_path: Path) -> None:
    cpu = tmp_path / "cpu" / "_internal" / "torch" / "lib"
    cpu.mkdir(parents=True)
    for name in ("libtorch_cpu.so", "libc10.so", "libgomp-a34b3233.so.1", "libshm.so"):
        (cpu / name).write_bytes(b"\x7fELF")
    assert checks.cuda_libraries(tmp_path / "cpu") == []
    cuda = tmp_path / "cuda" / "_internal"
    (cuda / "nvidia" / "cublas" / "lib").mkdir(parents=True)
    (cuda / "nvidia" / "cublas" / "lib" / "libcublasLt.so.13").write_bytes(b"\x7fELF")
    (cuda / "torch" / "lib").mkdir(parents=True)
    (cuda / "torch" / "lib" / "libtorch_cuda.so").write_bytes(b"\x7fELF")
    (cuda / "torch" / "lib" / "torch_cuda.dll").write_bytes(b"MZ")
    found = checks.cuda_libraries(tmp_path / "cuda")
    assert "_internal/nvidia" in found and "_internal/torch/lib/libtorch_cuda.so" in found
    assert "_internal/torch/lib/torch_cuda.dll" in found
    done = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "bundle_checks.py"), "no-cuda", str(tmp_path / "cuda")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "CUDA library in the CPU variant" in done.stderr


def test_a_file_of_2_gib_is_refused_and_one_byte_less_is_not(checks, tmp_path: Path) -> None:
    big = tmp_path / "part-01"
    with big.open("wb") as handle:
        handle.truncate(checks.MAX_FILE_BYTES - 1)  # sparse: no disk used
    assert checks.oversized([tmp_path]) == []
    with big.open("r+b") as handle:
        handle.truncate(checks.MAX_FILE_BYTES)
    assert len(checks.oversized([tmp_path])) == 1


def test_the_readme_states_the_floor_the_checks_enforce(checks) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    glibc = re.search(r"needs glibc (\d+\.\d+) or newer", readme)
    cxx = re.search(r"GLIBCXX_(\d+\.\d+\.\d+)", readme)
    assert glibc and cxx, "README must state the Linux floor ('needs glibc X.Y or newer', GLIBCXX_X.Y.Z)"
    assert checks.parse_version(glibc.group(1)) == checks.FLOOR["GLIBC"]
    assert checks.parse_version(cxx.group(1)) == checks.FLOOR["GLIBCXX"]
    for system in ("Ubuntu 22.04", "Debian 12", "Fedora 36"):
        assert system in readme

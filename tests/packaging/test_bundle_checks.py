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


# --- what a bundle carries and what the spec leaves out (issue 47, item 5) ---------------------------------------


def torch_lib() -> Path:
    import torch

    return Path(torch.__file__).parent / "lib"


def objdump_needed(path: Path) -> list[str]:
    text = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^\s+NEEDED\s+(\S+)$", text, re.M)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump is the reference")
def test_the_needed_reader_agrees_with_objdump(checks) -> None:
    for path in (SYSTEM_ELF, torch_lib() / "libshm.so", torch_lib() / "libc10.so"):
        assert checks.needed_libraries(path) == objdump_needed(path), path
    assert "libc10.so" in checks.needed_libraries(torch_lib() / "libshm.so")


def test_the_left_out_files_are_refused_in_a_bundle_and_nothing_else_is(checks, tmp_path: Path) -> None:
    bundle = tmp_path / "hookscope"
    keep = ["torch/bin/torch_shm_manager", "PySide6/Qt/lib/libQt6Core.so.6", "resources/chelsea.png"]
    for name in keep:
        (bundle / "_internal" / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / "_internal" / name).write_bytes(b"kept")
    command = [sys.executable, str(ROOT / "packaging" / "bundle_checks.py"), "left-out", str(bundle)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("none of the"), done.stderr
    for name in ("torch/bin/protoc", "torch/bin/protoc-3.21.12.0", "PySide6/Qt/translations/qtbase_de.qm"):
        (bundle / "_internal" / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / "_internal" / name).write_bytes(b"left out")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"bundle_checks: left out by hookscope.spec, yet in the bundle: {name}"
        for name in ("PySide6/Qt/translations/qtbase_de.qm", "torch/bin/protoc", "torch/bin/protoc-3.21.12.0")
    ]
    assert not any(checks.is_left_out(name) for name in keep)


def test_the_spec_leaves_them_out_of_binaries_and_data_before_the_splash(checks) -> None:
    spec = (ROOT / "packaging" / "hookscope.spec").read_text()
    assert "a.binaries = [entry for entry in a.binaries if not checks.is_left_out(entry[0])]" in spec
    assert "a.datas = [entry for entry in a.datas if not checks.is_left_out(entry[0])]" in spec
    assert spec.index("checks.is_left_out") < spec.index("splash = Splash(")
    lines = [line for line in subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), "--print-commands"],
             capture_output=True, text=True, timeout=60).stdout.splitlines() if not line.startswith("#")]  # fmt: skip
    left_out = lines.index("build/venv-cpu/bin/python packaging/bundle_checks.py left-out dist/hookscope")
    assert left_out < next(i for i, line in enumerate(lines) if line.endswith("--self-test"))
    assert '"left-out", "dist\\hookscope"' in (ROOT / "packaging" / "build-windows.ps1").read_text()


def test_the_audit_measures_headers_tests_duplicates_and_what_is_linked(checks, tmp_path: Path) -> None:
    bundle = tmp_path / "hookscope"
    inside = bundle / "_internal"
    (inside / "torch" / "lib").mkdir(parents=True)
    (inside / "torch" / "include").mkdir()
    (inside / "torch" / "tests").mkdir()
    shutil.copy(torch_lib() / "libshm.so", inside / "torch" / "lib")  # needs libc10.so
    shutil.copy(torch_lib() / "libc10.so", inside / "torch" / "lib")
    shutil.copy(torch_lib() / "libc10.so", inside / "libc10-copy.so")  # a duplicate copy
    (inside / "torch" / "include" / "a.h").write_text("int a;\n" * 100)
    (inside / "torch" / "tests" / "test_a.py").write_text("x = 1\n" * 1000)
    found = checks.audit(bundle)
    assert [name for _size, name in found.headers] == ["_internal/torch/include/a.h"]
    assert [name for _size, name in found.test_folders] == ["_internal/torch/tests/test_a.py"]
    assert found.duplicates == [
        ((torch_lib() / "libc10.so").stat().st_size, "_internal/torch/lib/libc10.so", "_internal/libc10-copy.so")
    ]
    # libc10.so is linked (libshm.so names it); libshm.so is named by nothing here
    assert {name for _size, name in found.linked} == {"_internal/torch/lib/libc10.so"}
    assert "_internal/torch/lib/libshm.so" in {name for _size, name in found.not_linked}
    lines = checks.audit_lines(bundle)
    assert lines[0] == f"bundle: {found.total / 1e6:.1f} MB in 5 files" and lines[1].startswith("headers: 1 files")

"""build.sh's commands per variant, printed with --print-commands (nothing is installed or built), and the same
torch pins in the Windows script. The CPU index itself is not reachable from this project's machines."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BUILD = ROOT / "packaging" / "build.sh"


def plan(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(BUILD), "--print-commands", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


def commands(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


def test_the_cpu_variant_is_the_default_and_pins_the_cpu_wheels_from_pytorchs_cpu_index() -> None:
    lines = commands(plan())
    torch = [line for line in lines if "pip install" in line and "torch==" in line]
    assert torch == [
        "build/venv-cpu/bin/python -m pip install --quiet torch==2.14.1+cpu torchvision==0.29.1+cpu "
        "--index-url https://download.pytorch.org/whl/cpu"
    ]
    assert "build/venv-cpu/bin/python packaging/bundle_checks.py no-cuda dist/hookscope" in lines
    assert "build/venv-cpu/bin/python packaging/bundle_checks.py floor dist/hookscope" in lines
    assert any(
        "tar -C dist -czf dist/hookscope-" in line and "-linux-" in line and line.endswith("-cpu.tar.gz hookscope")
        for line in lines
    )
    assert not any(line.startswith("split ") for line in lines)  # a CPU archive (about 0.3 GB) stays one file


def test_the_cuda_variant_takes_pypis_torch_and_splits_its_archive_below_2_gib() -> None:
    lines = commands(plan("--variant", "cuda"))
    torch = [line for line in lines if "pip install" in line and "torch==" in line]
    assert torch == ["build/venv-cuda/bin/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1"]
    assert not any("no-cuda" in line for line in lines)
    split = [line for line in lines if line.startswith("split ")]
    assert len(split) == 1 and "--bytes=1900M" in split[0] and split[0].endswith(".tar.gz.part-")
    assert any(line.startswith("rm -f dist/hookscope-") and line.endswith("-cuda.tar.gz") for line in lines)
    assert lines[-1].endswith("bundle_checks.py max-size dist")  # the parts are checked too


def test_the_self_test_runs_with_an_empty_environment() -> None:
    lines = commands(plan("--variant=cuda"))
    self_test = [line for line in lines if line.endswith("--self-test")]
    assert len(self_test) == 1 and self_test[0].startswith("env -i ") and "PATH=/nonexistent" in self_test[0]


def test_weights_to_ship_are_collected_before_pyinstaller() -> None:
    lines = commands(plan("--with-weights", "resnet18,vgg16"))
    collect = lines.index(
        "build/venv-cpu/bin/python -m hookscope.core.models.bundled_weights build/weights resnet18 vgg16"
    )
    assert collect < next(i for i, line in enumerate(lines) if "PyInstaller" in line)


def test_a_splash_build_checks_for_tkinter_and_no_splash_does_not() -> None:
    assert any(line.endswith("-c import\\ tkinter") for line in commands(plan()))
    assert not any("tkinter" in line for line in commands(plan("--no-splash")))


def test_macos_has_no_cuda_variant_and_its_cpu_variant_uses_pypi() -> None:
    refused = plan("--variant", "cuda", BUILD_OS="macos")
    assert refused.returncode == 2 and refused.stderr.strip().startswith("build.sh: there is no CUDA variant on macOS")
    lines = commands(plan(BUILD_OS="macos"))
    assert "build/venv-cpu/bin/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1" in lines


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variant", "gpu"], "build.sh: --variant takes cpu or cuda (not 'gpu')"),
        (["--variant"], "build.sh: --variant takes cpu or cuda"),
        (["--fast"], "build.sh: unknown option '--fast' (see packaging/build.sh --help)"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args, message) -> None:
    done = plan(*args)
    assert done.returncode == 2 and done.stderr.strip() == message and done.stdout.count("\n") <= 1


def test_windows_pins_the_same_versions_and_the_same_cpu_index() -> None:
    script = (ROOT / "packaging" / "build-windows.ps1").read_text()
    shell = BUILD.read_text()
    for name in ("TORCH_VERSION", "TORCHVISION_VERSION"):
        unix = re.search(rf"^{name}=(\S+)", shell, re.M).group(1)
        windows = re.search(rf'^\${name.title().replace("_", "")} = "(\S+)"', script, re.M).group(1)
        assert unix == windows
    assert re.search(r"^CPU_INDEX_URL=(\S+)", shell, re.M).group(1) in script
    assert '"torch==$TorchVersion+cpu", "torchvision==$TorchvisionVersion+cpu"' in script


def test_the_join_command_in_the_readme_matches_the_part_names() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(
        r"cat hookscope-[\w.]+-linux-x86_64-cuda\.tar\.gz\.part-\* > hookscope-[\w.]+-linux-x86_64-cuda\.tar\.gz",
        readme,
    ), "README must give the one-line join of the CUDA archive's parts"


def test_help_lists_the_options() -> None:
    done = subprocess.run(["bash", str(BUILD), "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for option in ("--variant cpu", "--variant cuda", "--with-weights", "--no-splash", "--print-commands"):
        assert option in done.stdout


def test_the_spec_leaves_host_libraries_out_and_has_a_splash() -> None:
    spec = (ROOT / "packaging" / "hookscope.spec").read_text()
    assert "_without_host_libraries(a.binaries)" in spec and "splash.binaries = _without_host_libraries" in spec
    assert "Splash(" in spec and (ROOT / "packaging" / "splash.png").is_file()
    assert Path(ROOT / "LICENSE").read_text().startswith("MIT License")

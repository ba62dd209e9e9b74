"""The forge's workflows (.github/workflows), checked here as far as they can be without the forge's runners:
actionlint (with shellcheck on the shell steps) passes on every workflow and catches a broken one; the release
workflow builds every bundle by calling the build scripts a person runs, never a copy of their commands; every
version it uses is read from the project's own files; its Linux jobs run on the oldest image that matches the
bundle's glibc floor; every bundle goes to a draft release with its .sha256; and ci.yml runs .ci/run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CI = WORKFLOWS / "ci.yml"

# The glibc of each hosted Ubuntu image (the images' own release notes: Ubuntu 22.04 has glibc 2.35, 24.04 2.39).
UBUNTU_GLIBC = {"ubuntu-22.04": (2, 35), "ubuntu-24.04": (2, 39)}


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in workflow:  # YAML 1.1 reads the key `on` as a boolean
        workflow["on"] = workflow.pop(True)
    return workflow


def run_lines(job: dict) -> list[str]:
    """Every line of every `run:` step of a job, joined where a line ends in a backslash."""
    text = "\n".join(step["run"] for step in job["steps"] if "run" in step)
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def actionlint() -> str:
    beside = Path(sys.executable).with_name("actionlint")
    found = str(beside) if beside.is_file() else shutil.which("actionlint")
    assert found, "actionlint is missing: pip install -e '.[test]' (the test extra brings it)"
    return found


def lint(*paths: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(actionlint()).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([actionlint(), *map(str, paths)], capture_output=True, text=True, env=env, timeout=120)


def build_sh_commands(*args: str, **env: str) -> list[str]:
    done = subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), "--print-commands", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line and not line.startswith("#")]


def test_actionlint_passes_on_every_workflow():
    workflows = sorted(WORKFLOWS.glob("*.yml"))
    assert {path.name for path in workflows} >= {"release.yml", "ci.yml"}
    done = lint(*workflows)
    assert done.returncode == 0, done.stdout + done.stderr
    assert shutil.which("shellcheck", path=str(Path(actionlint()).parent)), "shellcheck reads the run: steps"


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The check has teeth: a job with an undefined output and a shell step with an unquoted variable fail it."""
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    text = RELEASE.read_text(encoding="utf-8")
    text = text.replace("needs.version.outputs.version", "needs.version.outputs.versoin", 1)
    text = text.replace('cat "$joined".part-* > "$joined"', "cat $joined.part-* > $joined", 1)
    broken.write_text(text, encoding="utf-8")
    done = lint(broken)
    assert done.returncode == 1
    assert 'property "versoin" is not defined' in done.stdout
    assert "SC2086" in done.stdout  # shellcheck's "double quote to prevent globbing", from the run: step


def test_the_release_runs_on_a_version_tag_and_by_hand():
    triggers = load(RELEASE)["on"]
    assert triggers["push"]["tags"] == ["v*"] and "workflow_dispatch" in triggers


def signature(line: str) -> tuple[str, ...]:
    """A command's first three words, the build environment's Python written as `python` (build/venv-cuda/bin/python
    and a runner's python are the same program here)."""
    words = shlex.split(line)
    while words and (words[0] == "sudo" or "=" in words[0]):
        words = words[1:]
    return tuple("python" if re.search(r"(^|/)python3?$", word) else word for word in words[:3])


def test_the_linux_jobs_call_build_sh_and_copy_none_of_its_commands():
    job = load(RELEASE)["jobs"]["linux"]
    variants = job["strategy"]["matrix"]["variant"]
    assert sorted(variants) == ["cpu", "cuda"]
    lines = run_lines(job)
    calls = [line for line in lines if "packaging/build.sh" in line]
    assert calls == ["PYTHON=python bash packaging/build.sh --variant ${{ matrix.variant }}"]
    # Nothing that build.sh runs for either variant is run by the workflow itself (no pip install of torch, no
    # PyInstaller, no bundle check, self-test or tar): the script does them all, as for a person.
    script = {signature(line) for variant in variants for line in build_sh_commands("--variant", variant)}
    assert len(script) > 15
    copied = [line for line in lines if signature(line) in script]
    assert copied == [], f"the workflow copies build.sh's commands: {copied}"
    text = "\n".join(lines)
    for word in ("PyInstaller", "bundle_checks.py", "--self-test", "mkdocs", "pip install", "tar "):
        assert word not in text, f"the workflow runs '{word}' itself"


def test_the_macos_job_calls_build_sh_on_apple_silicon():
    job = load(RELEASE)["jobs"]["macos"]
    assert job["runs-on"] == "macos-14"  # GitHub's first Apple silicon image
    assert [line for line in run_lines(job) if "packaging/" in line] == ["PYTHON=python bash packaging/build.sh"]
    # on macOS the script builds the CPU (+ MPS) variant from PyPI and the disk image, with its checksum
    lines = build_sh_commands(BUILD_OS="macos")
    assert any(line.startswith("hdiutil create") for line in lines)
    assert any("bundle_checks.py sha256 dist/Hookscope-" in line and line.endswith(".dmg") for line in lines)


def test_the_windows_job_calls_build_windows_ps1():
    job = load(RELEASE)["jobs"]["windows"]
    assert job["runs-on"].startswith("windows-")
    calls = [line for line in run_lines(job) if "build-windows.ps1" in line]
    assert calls == ["powershell -ExecutionPolicy Bypass -File packaging\\build-windows.ps1 -Variant cpu"]
    assert not any("PyInstaller" in line or "hookscope.iss" in line for line in run_lines(job))
    script = (ROOT / "packaging" / "build-windows.ps1").read_text(encoding="utf-8")
    assert '"sha256", $Setup' in script  # the setup .exe gets its .sha256, as the archives do


def test_the_linux_image_is_the_oldest_that_matches_the_glibc_floor():
    source = (ROOT / "packaging" / "bundle_checks.py").read_text(encoding="utf-8")
    floor = tuple(map(int, re.search(r'"GLIBC": \((\d+), (\d+)\)', source).groups()))
    image = load(RELEASE)["jobs"]["linux"]["runs-on"]
    assert UBUNTU_GLIBC[image] == floor, f"{image} has glibc {UBUNTU_GLIBC[image]}, the floor is {floor}"
    older = [name for name, glibc in UBUNTU_GLIBC.items() if glibc < UBUNTU_GLIBC[image]]
    assert older == []


def test_no_version_is_written_in_the_workflows():
    """The project's version comes from pyproject.toml (its dynamic attribute), the torch pins from packaging/:
    neither is written in a workflow, and the one Python version equals the one the project's types are checked
    for."""
    from hookscope import __version__

    build_sh = (ROOT / "packaging" / "build.sh").read_text(encoding="utf-8")
    pins = re.findall(r"^TORCH(?:VISION)?_VERSION=(\S+)", build_sh, re.M)
    assert len(pins) == 2
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for path in WORKFLOWS.glob("*.yml"):
        text = path.read_text(encoding="utf-8")
        for version in (__version__, *pins):
            assert not re.search(rf"(?<![\d.]){re.escape(version)}(?![\d.])", text), (path.name, version)
        assert load(path)["env"]["PYTHON_VERSION"] == project["tool"]["mypy"]["python_version"]
    version_job = load(RELEASE)["jobs"]["version"]
    assert any(
        line.startswith("version=$(python packaging/project_version.py --tag") for line in run_lines(version_job)
    )


def test_project_version_follows_pyprojects_attribute_to_its_file(tmp_path):
    """packaging/project_version.py on a copy of the project's files whose version was changed: it prints the new
    one, accepts the tag that names it and refuses another (exit 1, one line)."""
    copy = tmp_path / "project"
    (copy / "packaging").mkdir(parents=True)
    shutil.copy(ROOT / "packaging" / "project_version.py", copy / "packaging")
    shutil.copy(ROOT / "pyproject.toml", copy)
    (copy / "app" / "hookscope").mkdir(parents=True)
    source = (ROOT / "app" / "hookscope" / "_version.py").read_text(encoding="utf-8")
    (copy / "app" / "hookscope" / "_version.py").write_text(re.sub(r'"[^"]+"\n', '"7.8.9"\n', source))

    def version(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(copy / "packaging" / "project_version.py"), *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    assert version().stdout == "7.8.9\n"
    assert version("--tag", "v7.8.9").stdout == "7.8.9\n"
    refused = version("--tag", "v7.8.10")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().startswith("project_version: the tag v7.8.10 does not name version 7.8.9")
    from hookscope import __version__

    here = subprocess.run([sys.executable, str(ROOT / "packaging" / "project_version.py")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert here.stdout.strip() == __version__


def test_every_bundle_goes_to_a_draft_release_with_its_checksum():
    jobs = load(RELEASE)["jobs"]
    for name in ("linux", "windows", "macos"):
        uploads = [step for step in jobs[name]["steps"] if step.get("uses", "").startswith("actions/upload-artifact")]
        assert len(uploads) == 1, name
        assert "sha256" in uploads[0]["with"]["path"] and uploads[0]["with"]["if-no-files-found"] == "error", name
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"version", "linux", "windows", "macos"}  # nothing is published unless all passed
    assert publish["permissions"] == {"contents": "write"} and load(RELEASE)["permissions"] == {"contents": "read"}
    lines = run_lines(publish)
    assert "sha256sum -c ./*.sha256" in lines
    assert any(line.startswith('gh release create "$TAG" --draft') for line in lines)
    assert 'gh release upload "$TAG" dist/* --clobber' in lines


def test_pip_downloads_are_cached():
    for path in (RELEASE, CI):
        for name, job in load(path)["jobs"].items():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/setup-python") and name not in ("version",):
                    assert step["with"]["cache"] == "pip", (path.name, name)


def test_ci_runs_the_projects_test_script_on_every_push_and_pull_request():
    workflow = load(CI)
    assert set(workflow["on"]) == {"push", "pull_request"}
    (job,) = workflow["jobs"].values()
    assert run_lines(job) == ["bash .ci/run"]
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert script.index("actionlint .github/workflows/*.yml") < script.index("python -m pytest")

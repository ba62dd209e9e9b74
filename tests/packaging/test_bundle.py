"""The installer bundle, built from a clean checkout and checked as a download: `python -m pytest -m bundle -s`.

It clones the committed tree (so an untracked file the bundle needs makes it fail, as it would for a user), runs
``packaging/build.sh --variant cuda`` there (PyPI's torch: the variant this project's machines can build; the CPU
index is not reachable from them), and then, on the result moved into a folder with a space in its name:

- the bundle's own ``--self-test`` passes in an empty environment (no Python, nothing on PATH);
- no ELF file needs a newer GLIBC_ / GLIBCXX_ version than the README states, and the build host's libstdc++,
  libgcc_s, libexpat, ... are not in it;
- the CUDA libraries are there (so the CPU variant's check, which refuses them, is shown to find them), and none
  of the files the spec leaves out (bundle_checks.LEFT_OUT); what it carries is printed (`audit`);
- ``--help`` names the project's address (Hookscope's own metadata is in the bundle);
- ``--install-desktop-entry`` in a temporary HOME writes an entry whose Exec path exists and runs the self-test;
- the licence files are in it; no file is 2 GiB or more, and the archive's parts join to the checksummed archive;
- started without a display, it exits 1 with one line in the per-user log; under Xvfb (when installed) the splash
  is on screen within a second, and the time to the main window is printed.

It takes 15-25 minutes on two cores and about 15 GB of disk in the temporary folder, all removed at the end.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from hookscope.system.desktop_entry import read_exec

ROOT = Path(__file__).resolve().parents[2]
NEEDED_BYTES = 15 << 30


def build_python() -> tuple[str, bool]:
    """The Python to build with: this one's base interpreter (not the test venv), and whether it has Tcl/Tk."""
    python = os.environ.get("HOOKSCOPE_BUILD_PYTHON") or getattr(sys, "_base_executable", sys.executable)
    has_tk = subprocess.run([python, "-c", "import tkinter"], capture_output=True).returncode == 0
    return python, has_tk


def empty_env(home: Path, **more: str) -> dict[str, str]:
    """What a person's double-click gives, less: a HOME, a PATH with nothing in it, no Python anywhere."""
    nothing = home / "empty-path"
    nothing.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": str(nothing), **more}


def self_test(launcher: Path, home: Path) -> str:
    report = home / "self-test.txt"
    done = subprocess.run(
        [str(launcher), "--self-test"],
        env=empty_env(home, HOOKSCOPE_SELF_TEST_REPORT=str(report)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    text = report.read_text() if report.exists() else ""
    assert done.returncode == 0 and "hookscope self-test: ok" in text, done.stdout[-2000:] + done.stderr[-2000:]
    return text.strip()


def stated_floor(readme: Path) -> dict[str, tuple[int, ...]]:
    text = readme.read_text(encoding="utf-8")
    glibc = re.search(r"needs glibc (\d+\.\d+) or newer", text)
    cxx = re.search(r"GLIBCXX_(\d+\.\d+\.\d+)", text)
    assert glibc and cxx, "the README states no Linux floor"
    return {"GLIBC": tuple(map(int, glibc.group(1).split("."))), "GLIBCXX": tuple(map(int, cxx.group(1).split(".")))}


def windows_on(display: str) -> list[str]:
    out = subprocess.run(
        ["xwininfo", "-root", "-children"], env={**os.environ, "DISPLAY": display}, capture_output=True, text=True
    ).stdout
    return re.findall(r'^\s+0x[0-9a-f]+ "([^"]*)"', out, re.M)


def time_to_screen(launcher: Path, home: Path) -> tuple[float | None, float | None]:
    """Seconds from start to the splash window ("tk") and to the main window (title ends in Hookscope)."""
    display = f":{90 + os.getpid() % 9}"
    server = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1600x1000x24"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    app = None
    try:
        time.sleep(1.0)
        start = time.perf_counter()
        app = subprocess.Popen(
            [str(launcher)], env=empty_env(home, DISPLAY=display), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        splash = window = None
        while time.perf_counter() - start < 240 and window is None and app.poll() is None:
            names = windows_on(display)
            now = time.perf_counter() - start
            if splash is None and "tk" in names:
                splash = now
            if any(name.endswith("Hookscope") for name in names):
                window = now
            time.sleep(0.05)
        return splash, window
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=30)
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.bundle
def test_cuda_bundle_from_a_clean_checkout_works_as_a_download(tmp_path: Path, checks) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed to make a clean checkout")
    free = shutil.disk_usage(tmp_path).free
    if free < NEEDED_BYTES:
        pytest.fail(f"the bundle test needs about 15 GB free in {tmp_path} ({free / 1e9:.1f} GB are)")
    checkout = tmp_path / "hookscope"
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(checkout)], check=True)
        python, has_tk = build_python()
        started = time.perf_counter()
        done = subprocess.run(
            ["bash", "packaging/build.sh", "--variant", "cuda", *([] if has_tk else ["--no-splash"])],
            cwd=checkout,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()), "PYTHON": python},
            capture_output=True,
            text=True,
            timeout=3600,
        )
        print(f"\nbuild.sh --variant cuda: {time.perf_counter() - started:.0f} s, exit {done.returncode}")
        print(done.stdout[-3000:])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "hookscope self-test: ok" in done.stdout and "ELF floor ok" in done.stdout

        # Moved, as a person moves a download: into a folder with a space in its name.
        dist = checkout / "dist"
        bundle = tmp_path / "My Downloads" / "hookscope"
        bundle.parent.mkdir()
        os.rename(dist / "hookscope", bundle)
        launcher = bundle / "hookscope"
        print(self_test(launcher, tmp_path / "home"))

        floor = stated_floor(checkout / "README.md")
        assert checks.floor_problems(bundle, {**checks.FLOOR, **floor}) == []
        assert checks.bundled_host_libraries(bundle) == []
        print("highest needs:", {f: checks.version_text(v) for f, (v, _) in checks.highest_needs(bundle).items()})
        cuda = checks.cuda_libraries(bundle)
        assert any("libtorch_cuda" in name for name in cuda), "the CUDA variant lost torch's CUDA library"
        assert checks.left_out_found(bundle) == [], "a file the spec leaves out is in the bundle"
        print("\n".join(checks.audit_lines(bundle)))

        # --help names the version and the project's address: the bundle carries Hookscope's metadata
        helped = subprocess.run([str(launcher), "--help"], env=empty_env(tmp_path / "help-home"),
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        urls = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
        assert (
            helped.returncode == 0
            and f"Downloads (installers for Linux, Windows and macOS): {urls['Releases']}" in (helped.stdout)
        ), helped.stdout[-1000:] + helped.stderr[-1000:]

        home = tmp_path / "desktop-home"
        installed = subprocess.run(
            [str(launcher), "--install-desktop-entry"], env=empty_env(home), capture_output=True, text=True, timeout=300
        )
        assert installed.returncode == 0, installed.stderr
        entry = home / ".local" / "share" / "applications" / "hookscope.desktop"
        command = read_exec(entry)
        assert command[-1] == "%F" and Path(command[0]) == launcher.resolve() and Path(command[0]).is_file()
        icon = next(line[5:] for line in entry.read_text().splitlines() if line.startswith("Icon="))
        assert Path(icon).is_file() and Path(icon).is_relative_to(bundle.resolve())
        print("desktop entry:", self_test(Path(command[0]), home))
        removed = subprocess.run(
            [str(launcher), "--uninstall-desktop-entry"],
            env=empty_env(home),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert removed.returncode == 0 and not entry.exists()

        licences = bundle / "_internal" / "resources" / "licenses"
        for name in ("LICENSE", "THIRD-PARTY-NOTICES.md", "LGPL-3.0.txt", "GPL-3.0.txt", "third-party/torch/LICENSE"):
            assert (licences / name).is_file(), f"{name} is missing from the bundle's licences"
        assert (licences / "LICENSE").read_text().startswith("MIT License")
        assert list((licences / "third-party").glob("nvidia-*/License.txt")), "NVIDIA's licence texts are missing"
        # read as text beside app/hookscope/core/teaching/script_export.py by --script and "Copy whole script"
        templates = Path("hookscope") / "core" / "teaching" / "script_templates" / "standalone.py"
        assert (bundle / "_internal" / templates).read_text() == (ROOT / "app" / templates).read_text(), "templates"

        parts = sorted(dist.glob("hookscope-*-linux-*-cuda.tar.gz.part-*"))
        assert len(parts) >= 2 and not list(dist.glob("*.tar.gz")), [p.name for p in dist.iterdir()]
        assert checks.oversized([bundle, dist]) == []
        print("parts:", ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in parts))
        digest = hashlib.sha256()
        for part in parts:  # what `cat ...part-* > ...tar.gz` makes
            with part.open("rb") as handle:
                for chunk in iter(lambda h=handle: h.read(1 << 24), b""):
                    digest.update(chunk)
        expected = next(dist.glob("*.tar.gz.sha256")).read_text().split()[0]
        assert digest.hexdigest() == expected

        ours = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
        bundled = {path.name for path in bundle.rglob("test_*.py")}  # torch ships test helpers of its own: not ours
        assert not ours & bundled and not (bundle / "_internal" / "tests").exists(), "our tests must stay out"

        # A double-click without a desktop session: exit 1, one line in the per-user log, no libxcb-cursor0 hint.
        nobody = tmp_path / "no-display-home"
        started = subprocess.run([str(launcher)], env=empty_env(nobody), capture_output=True, text=True, timeout=300)
        log = nobody / ".local" / "share" / "Hookscope" / "Hookscope" / "hookscope-errors.log"
        assert started.returncode == 1 and "xcb-cursor" not in started.stderr, started.stderr
        assert len(log.read_text().splitlines()) == 1 and "graphical desktop" in log.read_text()

        if shutil.which("Xvfb") and shutil.which("xwininfo"):
            splash, window = time_to_screen(launcher, tmp_path / "xvfb-home")
            print(f"on screen: splash after {splash} s, main window after {window} s")
            assert window is not None, "the main window never appeared"
            if has_tk:
                assert splash is not None and splash < 1.0, f"the splash took {splash} s"
        else:
            print("Xvfb or xwininfo missing: time to the splash not measured")
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
        shutil.rmtree(tmp_path / "My Downloads", ignore_errors=True)

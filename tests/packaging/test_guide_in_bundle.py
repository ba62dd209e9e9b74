"""The installer ships the built user guide, so Help > User guide works offline: build.sh and the Windows script
build it (strict) before PyInstaller, and the spec puts it where the app looks (resources/guide/)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hookscope.core.teaching.guide import GUIDE_FOLDER, find_guide

ROOT = Path(__file__).resolve().parents[2]


def _commands(*args: str) -> list[str]:
    done = subprocess.run(["bash", str(ROOT / "packaging" / "build.sh"), "--print-commands", *args],
                          capture_output=True, text=True, env=dict(os.environ), timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("#")]


def test_build_sh_builds_the_guide_strict_before_pyinstaller():
    for variant in ("cpu", "cuda"):
        lines = _commands("--variant", variant)
        build = next(i for i, line in enumerate(lines) if "-m mkdocs build --strict --site-dir build/guide" in line)
        install = next(i for i, line in enumerate(lines) if "pip install --quiet .\\[docs\\]" in line)
        pyinstaller = next(i for i, line in enumerate(lines) if "-m PyInstaller" in line)
        assert install < build < pyinstaller


def test_the_windows_script_builds_it_too():
    script = (ROOT / "packaging" / "build-windows.ps1").read_text()
    build = script.index('"mkdocs", "build", "--strict", "--site-dir", "build\\guide"')
    assert script.index('$env:HOOKSCOPE_GUIDE_DIR = "$PWD\\build\\guide"') > build
    assert build < script.index('"-m", "PyInstaller"')


def test_the_spec_ships_the_built_guide_where_the_app_looks(tmp_path):
    spec = (ROOT / "packaging" / "hookscope.spec").read_text()
    assert 'os.environ.get("HOOKSCOPE_GUIDE_DIR")' in spec
    assert f'Path("resources/{GUIDE_FOLDER}") / p.relative_to(guide_dir).parent' in spec
    # laid out as the spec lays it out, the bundle's resources/guide/index.html is what Help > User guide opens
    resources = tmp_path / "_internal" / "resources"
    (resources / GUIDE_FOLDER).mkdir(parents=True)
    (resources / GUIDE_FOLDER / "index.html").write_text("<html></html>")
    guide = find_guide(resources)
    assert guide is not None and guide.built and guide.path == resources / GUIDE_FOLDER / "index.html"

"""The installer bundle, built from a clean checkout and self-tested: `python -m pytest -m bundle` (10-20 min).

It clones the committed tree (so an untracked file the bundle needs makes it fail, as it would for a user),
runs packaging/build.sh there, and checks that the bundled app's own `--self-test` passed, with no Python of
the build environment on PATH.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.bundle
def test_bundle_builds_from_a_clean_checkout_and_passes_its_self_test(tmp_path):
    if shutil.which("git") is None:
        pytest.fail("git is needed to make a clean checkout")
    checkout = tmp_path / "hookscope"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(checkout)], check=True)
    done = subprocess.run(
        ["bash", "packaging/build.sh"],
        cwd=checkout,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()), "SKIP_TARBALL": "1"},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "hookscope self-test: ok" in done.stdout
    launcher = checkout / "dist" / "hookscope" / "hookscope"
    assert launcher.is_file()
    bundle = checkout / "dist" / "hookscope"
    ours = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    bundled = {path.name for path in bundle.rglob("test_*.py")}  # torch ships test helpers of its own: not ours
    assert not ours & bundled and not (bundle / "_internal" / "tests").exists(), "our tests must stay out"

#!/usr/bin/env bash
# Build Hookscope's self-contained one-folder bundle and test it.
#
#   packaging/build.sh            -> dist/hookscope/ (launcher dist/hookscope/hookscope)
#                                    dist/hookscope-VERSION-linux-ARCH.tar.gz (or -macos-ARCH.tar.gz, plus .dmg)
#
# Environment:
#   TORCH_INDEX_URL   install torch/torchvision from this index, e.g. https://download.pytorch.org/whl/cpu for
#                     the CPU-only build (about 0.9 GB instead of about 5 GB with PyPI's CUDA build on Linux)
#   BUILD_VENV        where to create the build environment (default: build/venv)
#   SKIP_TARBALL=1    only build and self-test the folder
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' app/__init__.py)
VENV=${BUILD_VENV:-build/venv}
OS=$(uname -s | tr '[:upper:]' '[:lower:]'); [ "$OS" = darwin ] && OS=macos
ARCH=$(uname -m)

echo "== build environment: $VENV"
python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  python -m pip install --quiet torch torchvision --index-url "$TORCH_INDEX_URL"
else
  python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
fi
python -m pip install --quiet . pyinstaller

echo "== PyInstaller"
rm -rf dist/hookscope
pyinstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller packaging/hookscope.spec

echo "== self-test of the bundle (no Python from the build environment on PATH)"
deactivate
report=$(mktemp)
HOOKSCOPE_SELF_TEST_REPORT="$report" env -u PYTHONPATH PATH=/usr/bin:/bin dist/hookscope/hookscope --self-test
cat "$report"; rm -f "$report"
du -sh dist/hookscope | awk '{print "bundle size: " $1}'

if [ "${SKIP_TARBALL:-0}" != 1 ]; then
  tarball="dist/hookscope-$VERSION-$OS-$ARCH.tar.gz"
  tar -C dist -czf "$tarball" hookscope
  du -sh "$tarball" | awk '{print "compressed: " $1}'
  if [ "$OS" = macos ] && [ -d dist/Hookscope.app ]; then
    hdiutil create -volname Hookscope -srcfolder dist/Hookscope.app -ov -format UDZO "dist/Hookscope-$VERSION.dmg"
  fi
fi
echo "== done: $ROOT/dist/hookscope"

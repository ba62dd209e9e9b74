#!/usr/bin/env bash
# Build Hookscope's self-contained one-folder bundle, check it, self-test it and pack it.
#
#   packaging/build.sh [--variant cpu|cuda] [--with-weights NAME[,NAME]] [--no-splash] [--skip-tarball]
#                      [--print-commands]
#
#   --variant cpu     (default) torch/torchvision from PyTorch's CPU index: the download for most people
#   --variant cuda    PyPI's torch (the CUDA build on Linux, with NVIDIA's libraries: about 4 GB unpacked);
#                     its archive is split into parts below 2 GiB (join: cat FILE.tar.gz.part-* > FILE.tar.gz)
#   --with-weights    ship these models' pretrained weights from this machine's torch hub cache (SHA-256
#                     checked), so the app starts on a trained network offline; a model not cached is skipped
#   --no-splash       no start-up splash (it needs Tcl/Tk, i.e. `python -c "import tkinter"`, at build time)
#   --skip-tarball    only build, check and self-test the folder (also SKIP_TARBALL=1)
#   --print-commands  print the commands this build would run, run nothing
#
# Output: dist/hookscope/ (launcher dist/hookscope/hookscope) and dist/hookscope-VERSION-OS-ARCH-VARIANT.tar.gz
# (or its .part-NN files and a .sha256 of the joined archive); on macOS also dist/Hookscope.app and a .dmg.
#
# Environment: PYTHON (the Python to build with; default python3), BUILD_VENV (default build/venv-VARIANT),
# TORCH_INDEX_URL (another index with the same +cpu wheels, e.g. a mirror; the versions stay pinned),
# BUILD_OS (linux or macos: the pip commands for another system, with --print-commands).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
CPU_INDEX_URL=https://download.pytorch.org/whl/cpu
PART_SIZE=1900M  # release hosts refuse files of 2 GiB (2048 MiB) or more

die() { echo "build.sh: $*" >&2; exit 2; }

VARIANT=cpu
WEIGHTS=()
PRINT=0
SPLASH=1
SKIP=${SKIP_TARBALL:-0}
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) [ $# -ge 2 ] || die "--variant takes cpu or cuda"; VARIANT=$2; shift ;;
    --variant=*) VARIANT=${1#--variant=} ;;
    --with-weights) [ $# -ge 2 ] || die "--with-weights takes model names, e.g. resnet18"; IFS=, read -r -a more <<< "$2"; WEIGHTS+=("${more[@]}"); shift ;;
    --with-weights=*) IFS=, read -r -a more <<< "${1#--with-weights=}"; WEIGHTS+=("${more[@]}") ;;
    --no-splash) SPLASH=0 ;;
    --skip-tarball) SKIP=1 ;;
    --print-commands|--dry-run) PRINT=1 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see packaging/build.sh --help)" ;;
  esac
  shift
done
case "$VARIANT" in cpu|cuda) ;; *) die "--variant takes cpu or cuda (not '$VARIANT')" ;; esac

VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' app/hookscope/_version.py)
OS=${BUILD_OS:-$(uname -s | tr '[:upper:]' '[:lower:]')}; [ "$OS" = darwin ] && OS=macos
ARCH=$(uname -m)
PYTHON=${PYTHON:-python3}
VENV=${BUILD_VENV:-build/venv-$VARIANT}
VPY="$VENV/bin/python"
[ "$OS" = macos ] && SPLASH=0  # PyInstaller has no splash on macOS

# The torch/torchvision install, per variant (the same pins as build-windows.ps1).
if [ "$VARIANT" = cuda ]; then
  [ "$OS" = macos ] && die "there is no CUDA variant on macOS (PyPI's torch there is the CPU/MPS build): use --variant cpu"
  TORCH_INSTALL=("$VPY" -m pip install --quiet "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION")
elif [ "$OS" = macos ]; then
  # PyPI's macOS wheels are already CPU (+ MPS) builds, with no "+cpu" in their version.
  TORCH_INSTALL=("$VPY" -m pip install --quiet "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION")
else
  TORCH_INSTALL=("$VPY" -m pip install --quiet "torch==$TORCH_VERSION+cpu" "torchvision==$TORCHVISION_VERSION+cpu"
                 --index-url "${TORCH_INDEX_URL:-$CPU_INDEX_URL}")
fi
SUFFIX="-$VARIANT"; [ "$OS" = macos ] && SUFFIX=""
TARBALL="dist/hookscope-$VERSION-$OS-$ARCH$SUFFIX.tar.gz"

run() {  # run a command, or print it (shell-quoted) with --print-commands
  if [ "$PRINT" = 1 ]; then printf '%q ' "$@" | sed 's/ $//'; echo; else "$@"; fi
}
step() { [ "$PRINT" = 1 ] && echo "# $*" || echo "== $*"; }

step "build environment: $VENV ($VARIANT variant, $OS-$ARCH)"
run "$PYTHON" -m venv "$VENV"
run "$VPY" -m pip install --quiet --upgrade pip
run "${TORCH_INSTALL[@]}"
run "$VPY" -m pip install --quiet ".[live]" "pyinstaller>=6.10,<7"  # live: OpenCV, for video files and cameras
if [ "$SPLASH" = 1 ]; then
  if [ "$PRINT" = 1 ]; then
    run "$VPY" -c "import tkinter"
  elif ! "$VPY" -c "import tkinter" 2>/dev/null; then
    die "the start-up splash needs Tcl/Tk in the build Python ('$PYTHON -c \"import tkinter\"' fails): install it (Debian/Ubuntu: sudo apt-get install python3-tk for the system Python; tk-dev before building a pyenv Python), or build with --no-splash"
  fi
fi

export HOOKSCOPE_SPLASH=$SPLASH
unset HOOKSCOPE_WEIGHTS_DIR
if [ ${#WEIGHTS[@]} -gt 0 ]; then
  step "pretrained weights to ship: ${WEIGHTS[*]}"
  run rm -rf build/weights
  run "$VPY" -m hookscope.core.models.bundled_weights build/weights "${WEIGHTS[@]}"
  export HOOKSCOPE_WEIGHTS_DIR="$ROOT/build/weights"
fi

step "user guide (shipped in the bundle: Help > User guide opens it offline)"
run "$VPY" -m pip install --quiet ".[docs]"
run rm -rf build/guide
run env NO_MKDOCS_2_WARNING=1 "$VPY" -m mkdocs build --strict --site-dir build/guide
export HOOKSCOPE_GUIDE_DIR="$ROOT/build/guide"

step "PyInstaller"
run rm -rf dist/hookscope
run "$VPY" -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath "build/pyinstaller-$VARIANT" packaging/hookscope.spec

step "checks of the bundle"
if [ "$OS" = linux ]; then
  run "$VPY" packaging/bundle_checks.py floor dist/hookscope
fi
if [ "$VARIANT" = cpu ]; then
  run "$VPY" packaging/bundle_checks.py no-cuda dist/hookscope
fi
run "$VPY" packaging/bundle_checks.py max-size dist/hookscope
run "$VPY" packaging/bundle_checks.py left-out dist/hookscope

step "self-test of the bundle (an empty environment: no Python, nothing on PATH)"
report=build/self-test.txt
run rm -f "$report"
run env -i "HOME=$HOME" PATH=/nonexistent "HOOKSCOPE_SELF_TEST_REPORT=$ROOT/$report" dist/hookscope/hookscope --self-test
[ "$PRINT" = 1 ] || { cat "$report"; du -sh dist/hookscope | awk '{print "bundle size: " $1}'; }

step "video check of the bundle (its OpenCV and FFmpeg play a video written here through the hooks)"
run "$VPY" packaging/bundle_checks.py write-video build/check-video.avi
run env -i "HOME=$HOME" PATH=/nonexistent dist/hookscope/hookscope live --video build/check-video.avi --layers layer1 --frames 2 --unpaced --bare-runs 1

if [ "$SKIP" != 1 ]; then
  step "archive"
  run rm -f "$TARBALL" "$TARBALL".part-* "$TARBALL.sha256"
  run tar -C dist -czf "$TARBALL" hookscope
  run "$VPY" packaging/bundle_checks.py sha256 "$TARBALL"
  if [ "$VARIANT" = cuda ]; then
    # One file of 2 GiB or more is refused by release hosts: parts, joined with
    #   cat hookscope-...tar.gz.part-* > hookscope-...tar.gz   (then: sha256sum -c hookscope-...tar.gz.sha256)
    run split --bytes="$PART_SIZE" --numeric-suffixes=1 --suffix-length=2 "$TARBALL" "$TARBALL.part-"
    run rm -f "$TARBALL"
  fi
  run "$VPY" packaging/bundle_checks.py max-size dist
  [ "$PRINT" = 1 ] || ls -l "$TARBALL"* | awk '{printf "%s %.0f MB\n", $NF, $5 / 1e6}'
  if [ "$OS" = macos ] && { [ "$PRINT" = 1 ] || [ -d dist/Hookscope.app ]; }; then
    run hdiutil create -volname Hookscope -srcfolder dist/Hookscope.app -ov -format UDZO "dist/Hookscope-$VERSION.dmg"
    run "$VPY" packaging/bundle_checks.py sha256 "dist/Hookscope-$VERSION.dmg"
  fi
fi
step "done: $ROOT/dist/hookscope"

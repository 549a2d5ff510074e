#!/usr/bin/env bash
# Set up the OpenCL backend run: Debian's OpenCL runtime (PoCL, a CPU OpenCL device), and a
# virtual environment with torch 2.11.0, torch-opencl (PrivateUse1 device "opencl") and detconf's
# other requirements. Prints what it installs and how long each step took.
#
#   scripts/setup-opencl.sh [--venv DIR] [--base-venv DIR] [--no-apt] [--apt-only]
#
#   --venv DIR       the environment to create (default: .venv-opencl in the repository root)
#   --base-venv DIR  reuse the torch 2.11.0 of an existing environment instead of downloading it
#                    (its site-packages is put on the new environment's path; nothing is copied)
#   --no-apt         do not install Debian packages (they must be there already)
#   --apt-only       install the Debian packages only (for `tox -e opencl`, which makes its own env)
set -u

TORCH_VERSION=2.11.0
TORCH_OPENCL_VERSION=0.1.0.dev23
APT_PACKAGES=(pocl-opencl-icd ocl-icd-libopencl1 clinfo)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="$ROOT/.venv-opencl"
BASE_VENV=""
APT=1
APT_ONLY=0
PYTHON=${PYTHON:-python3}

die() { echo "setup-opencl: error: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --venv) [ $# -ge 2 ] && [ -n "$2" ] || die "--venv needs a directory"; VENV=$2; shift 2 ;;
    --base-venv) [ $# -ge 2 ] && [ -n "$2" ] || die "--base-venv needs a directory"; BASE_VENV=$2; shift 2 ;;
    --no-apt) APT=0; shift ;;
    --apt-only) APT_ONLY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$APT" = 0 ] && [ "$APT_ONLY" = 1 ] && die "--no-apt and --apt-only exclude each other"
if [ -n "$BASE_VENV" ]; then
  [ -x "$BASE_VENV/bin/python" ] || die "--base-venv $BASE_VENV: no $BASE_VENV/bin/python"
  base_torch=$("$BASE_VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
    || die "--base-venv $BASE_VENV: torch does not import there"
  case "$base_torch" in
    "$TORCH_VERSION"|"$TORCH_VERSION"+*) ;;
    *) die "--base-venv $BASE_VENV has torch $base_torch; torch-opencl $TORCH_OPENCL_VERSION needs $TORCH_VERSION" ;;
  esac
fi
if [ "$APT_ONLY" = 0 ] && [ -e "$VENV" ]; then
  die "$VENV exists; remove it or pass another --venv"
fi

START=$(date +%s)
step_start=$START
step() {  # close the previous step: print its time
  now=$(date +%s)
  echo "setup-opencl: $1 done in $((now - step_start)) s"
  step_start=$now
}

if [ "$APT" = 1 ]; then
  echo "setup-opencl: Debian packages: ${APT_PACKAGES[*]}"
  if [ "$(id -u)" != 0 ]; then
    die "installing Debian packages needs root: run 'sudo apt-get install -y ${APT_PACKAGES[*]}', then this script with --no-apt"
  fi
  command -v apt-get >/dev/null || die "apt-get not found: install an OpenCL ICD loader and a CPU ICD (PoCL) by hand, then use --no-apt"
  apt-get install -y "${APT_PACKAGES[@]}" >/dev/null || die "apt-get install ${APT_PACKAGES[*]} failed (try 'apt-get update' first)"
  step "Debian packages"
fi
if [ "$APT_ONLY" = 1 ]; then
  echo "setup-opencl: total $(( $(date +%s) - START )) s"
  exit 0
fi
if command -v clinfo >/dev/null; then
  clinfo -l || die "clinfo cannot list OpenCL devices"
fi

echo "setup-opencl: virtual environment $VENV (from $("$PYTHON" --version 2>&1))"
"$PYTHON" -m venv "$VENV" || die "could not create $VENV"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -n "$BASE_VENV" ]; then
  base_site=$("$BASE_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "setup-opencl: torch $base_torch reused from $base_site (a .pth file, nothing copied)"
  echo "$base_site" > "$site/_base_venv.pth"
else
  echo "setup-opencl: pip install torch==$TORCH_VERSION (the registry's CUDA build, several GB; runs on the CPU)"
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" || die "pip install torch==$TORCH_VERSION failed"
  step "torch $TORCH_VERSION"
fi
echo "setup-opencl: pip install torch-opencl==$TORCH_OPENCL_VERSION -r requirements-base.txt"
"$VENV/bin/python" -m pip install -q "torch-opencl==$TORCH_OPENCL_VERSION" "torch==$TORCH_VERSION" \
  -r "$ROOT/requirements-base.txt" || die "pip install torch-opencl / requirements-base.txt failed"
step "torch-opencl and detconf's requirements"

echo "setup-opencl: checking that torch loads the backend"
(cd "$ROOT" && "$VENV/bin/python" -c '
import json, torch
from detconf.engine.devices import backends
backend = backends().get("opencl")
if backend is None or not backend.describe()["available"]:
    raise SystemExit("setup-opencl: error: torch " + torch.__version__ + " did not load an available opencl device")
print(json.dumps(backend.describe(), indent=1))
') || die "the opencl device is not available in $VENV"
echo "setup-opencl: ready: $VENV/bin/python -m pytest conformance -n 2 --hypothesis-profile ci --device opencl"
echo "setup-opencl: total $(( $(date +%s) - START )) s"

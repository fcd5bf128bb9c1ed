#!/usr/bin/env bash
# scripts/setup.sh: sets up a Debian 12 machine for zerotune, from nothing, in three parts:
#   1. Debian packages (compilers, Open MPI, HDF5, Boost, OpenBLAS, SentencePiece, PCRE2, ICU,
#      nlohmann-json, protobuf, the Python test oracles' torch/numpy/h5py, and Slurm + OpenSSH
#      for the system tests);
#      skipped when all are installed already;
#   2. the test-oracle venv at REPO/.venv (Debian's python3 + system site packages, plus the pinned
#      PyPI packages of tests/oracle/requirements.txt); skipped when it is up to date;
#   3. the build: cmake -S . -B build (Release; the CUDA backend when nvcc is found) and make.
# Idempotent: a second run finds everything in place and only re-checks and rebuilds.
# Usage: scripts/setup.sh [--no-apt] [--no-build] [--check]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
BUILD="$REPO/build"
REQUIREMENTS="$REPO/tests/oracle/requirements.txt"
# Holds the sha256 of the requirements file the venv was last installed from.
VENV_STAMP="$VENV/.zerotune-requirements.sha256"
CUDA_BIN=/usr/local/cuda/bin

APT_PACKAGES=(
  build-essential cmake pkg-config git
  libopenmpi-dev openmpi-bin
  libhdf5-dev zlib1g-dev
  libboost-program-options-dev libboost-test-dev libboost-context-dev
  libopenblas-openmp-dev
  libsentencepiece-dev sentencepiece
  libpcre2-dev libicu-dev
  nlohmann-json3-dev
  # TensorBoard event files (DeepSpeed's "tensorboard" monitor): the protobuf library and protoc
  libprotobuf-dev protobuf-compiler
  # the test oracles: Debian's torch 1.13 and friends; the venv sees them (--system-site-packages)
  python3-torch python3-h5py python3-numpy python3-venv python3-pip
  python3-yaml python3-requests python3-psutil python3-typing-extensions
  # the system tests (tests/system): a single-node Slurm, and sshd for the two-host launch
  slurm-wlm openssh-server openssh-client
)

usage() {
  cat <<EOF
usage: scripts/setup.sh [--no-apt] [--no-build] [--check]
  --no-apt    do not install Debian packages (they must be there already)
  --no-build  do not configure and build zerotune
  --check     change nothing; exit 0 if packages, venv and build directory are all in place
EOF
}

do_apt=1
do_build=1
check_only=0
for arg in "$@"; do
  case "$arg" in
    --no-apt) do_apt=0 ;;
    --no-build) do_build=0 ;;
    --check) check_only=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "scripts/setup.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

say() { printf '[setup] %s\n' "$*"; }
# Prints a command, then runs it.
run() { say "+ $*"; "$@"; }
as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then run "$@"; else run sudo "$@"; fi
}

# The names of the APT_PACKAGES that are not installed, separated by spaces.
missing_apt_packages() {
  local package
  for package in "${APT_PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" != "install ok installed" ]]; then
      printf '%s ' "$package"
    fi
  done
}

requirements_hash() { sha256sum "$REQUIREMENTS" | cut -d' ' -f1; }

venv_is_current() {
  [[ -x "$VENV/bin/python" && -f "$VENV_STAMP" && "$(cat "$VENV_STAMP")" == "$(requirements_hash)" ]]
}

# --check: report what is missing, change nothing (scripts/test.sh uses it to decide whether
# to run this script first).
if [[ "$check_only" -eq 1 ]]; then
  ok=0
  missing="$(missing_apt_packages)"
  if [[ -n "$missing" ]]; then say "missing Debian packages: $missing"; ok=1; fi
  if ! venv_is_current; then say "the venv $VENV is missing or older than $REQUIREMENTS"; ok=1; fi
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then say "the build directory $BUILD is not configured"; ok=1; fi
  exit "$ok"
fi

started=$(date +%s)

# 1. Debian packages
if [[ "$do_apt" -eq 1 ]]; then
  missing="$(missing_apt_packages)"
  if [[ -z "$missing" ]]; then
    say "Debian packages: all ${#APT_PACKAGES[@]} installed already"
  else
    say "Debian packages to install: $missing"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update
    as_root apt-get install -y "${APT_PACKAGES[@]}"
  fi
else
  say "Debian packages: skipped (--no-apt)"
fi

# 2. The test-oracle venv. --no-deps: see the comment at the top of the requirements file; the
#    check below makes sure the venv really uses Debian's torch and numpy.
if venv_is_current; then
  say "venv $VENV: up to date with $REQUIREMENTS"
else
  if [[ ! -x "$VENV/bin/python" ]]; then
    run /usr/bin/python3 -m venv --system-site-packages "$VENV"
  fi
  run "$VENV/bin/python" -m pip install --no-input --no-deps -r "$REQUIREMENTS"
fi
say "checking the venv's packages"
"$VENV/bin/python" - "$REQUIREMENTS" <<'EOF'
# Every pin of the requirements file is installed at its version, and torch/numpy/h5py are
# Debian's (a PyPI torch in the venv would shadow them).
import importlib.metadata, sys
problems = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, wanted = line.split("==")
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != wanted:
        problems.append(f"{name}: want {wanted}, have {have}")
import torch, numpy, h5py, transformers, peft, safetensors, tokenizers, accelerate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # its imports are pinned too
debian = "/usr/lib/python3/dist-packages/"
for module in (torch, numpy, h5py):
    if not module.__file__.startswith(debian):
        problems.append(f"{module.__name__} comes from {module.__file__}, not from Debian ({debian})")
if not torch.__version__.startswith("1.13"):
    problems.append(f"torch is {torch.__version__}, want Debian's 1.13")
if problems:
    sys.exit("scripts/setup.sh: the venv is not as expected (remove .venv and run again):\n  "
             + "\n  ".join(problems))
print(f"[setup] venv ok: torch {torch.__version__}, numpy {numpy.__version__}, "
      f"h5py {h5py.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
EOF
requirements_hash > "$VENV_STAMP"

# 3. The build
if [[ "$do_build" -eq 1 ]]; then
  if [[ -x "$CUDA_BIN/nvcc" && ":$PATH:" != *":$CUDA_BIN:"* ]]; then
    say "found nvcc in $CUDA_BIN: adding it to PATH (ZT_CUDA=AUTO builds the CUDA backend)"
    export PATH="$CUDA_BIN:$PATH"
  fi
  run cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
  run cmake --build "$BUILD" -j"$(nproc)"
else
  say "build: skipped (--no-build)"
fi

say "done in $(( $(date +%s) - started )) s"

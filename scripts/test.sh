#!/usr/bin/env bash
# scripts/test.sh: the one test command (CI runs it from a clean clone through .ci/run).
# Runs scripts/setup.sh first when packages, the venv or the build directory are missing,
# rebuilds, then runs every ctest test except the gpu-labelled ones. Extra arguments go to
# ctest, e.g. `scripts/test.sh -R unit` or `scripts/test.sh -L oracle`.
# Exits non-zero if setup, the build or any test fails, or if the selection matches no test.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
started=$(date +%s)

if ! bash scripts/setup.sh --check; then
  echo "[test] setting up first: scripts/setup.sh"
  bash scripts/setup.sh
fi

echo "[test] + cmake --build build -j$(nproc)"
cmake --build build -j"$(nproc)"

# mpiexec refuses to run as root without these (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two tests run at once (-j2); tests that do not set their own thread count use 2 threads.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

status=0
echo "[test] + ctest --test-dir build --output-on-failure --no-tests=error -j2 -LE '^gpu$' $*"
ctest --test-dir build --output-on-failure --no-tests=error -j2 -LE "^gpu$" "$@" || status=$?

echo "[test] total time $(( $(date +%s) - started )) s; ctest exit status $status"
exit "$status"

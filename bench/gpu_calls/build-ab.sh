#!/bin/bash
# Builds bench_kernels at another commit (a git worktree under /tmp, CUDA without the emulator)
# into .gpu-ab/bench_kernels-<commit>.xz (git-ignored; 2.8 MB: with the pack's 57.5 MB and the
# tree's 6 MB, 63 of the 64 MiB a call may carry, so one at a time): a GPU call carrying
# [".gpu", ".gpu-ab"] then times the kernels of both
# commits in one run on one machine (next-call.sh runs every binary it finds there), which
# compares kernel changes without the 5-8% between machines.
#   bash bench/gpu_calls/build-ab.sh d836b3c    # 40-60 minutes on 2 cores, no device time
set -euo pipefail
commit=${1:?usage: build-ab.sh COMMIT}
root=$(git rev-parse --show-toplevel)
short=$(git -C "$root" rev-parse --short=7 "$commit")
work=/tmp/zt-ab-$short
[[ -d "$work" ]] || git -C "$root" worktree add --detach "$work" "$short"
cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DZT_EMULATE=OFF \
  -DZT_PYTHON="$root/.venv/bin/python" -DZT_CUDNN_FRONTEND_HEADER="$root/.venv/lib/python3.11/site-packages/include" >/dev/null
nice cmake --build "$work/build" -j2 --target bench_kernels
mkdir -p "$root/.gpu-ab"
xz -T0 -9e -c "$work/build/bench/bench_kernels" >"$root/.gpu-ab/bench_kernels-$short.xz"
echo "$root/.gpu-ab/bench_kernels-$short.xz"

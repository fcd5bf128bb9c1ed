#!/usr/bin/env bash
# CPU training-step benchmark: zerotune's CPU backend against PyTorch (HF LlamaForCausalLM)
# on the same cores and thread count, run one after the other in one go; prints the ratio.
#   bench/run_cpu_bench.sh [BUILD_DIR] [THREADS]   (defaults: build, 2)
# OpenBLAS 0.3.21 does not know newer CPUs (e.g. Zen 5) and falls back to its Haswell kernels;
# OPENBLAS_CORETYPE=SkylakeX in the environment selects its AVX-512 kernels for both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-2}
python=${ZT_PYTHON:-.venv/bin/python}
shape=(--hidden 512 --layers 4 --seq 256 --batch 4 --vocab 32000 --steps 5)
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), threads $threads, $(date -u +%F)"
zt=$(OMP_NUM_THREADS=$threads "$build/bench/bench_train_step" "${shape[@]}")
echo "$zt" | grep -v ZT_STEP_SECONDS
zt_lora=$(OMP_NUM_THREADS=$threads "$build/bench/bench_train_step" "${shape[@]}" --lora-r 16)
echo "$zt_lora" | grep -v ZT_STEP_SECONDS
pt=$(OMP_NUM_THREADS=$threads "$python" bench/torch_train_step.py "${shape[@]}" --threads "$threads")
echo "$pt" | grep -v TORCH_STEP_SECONDS
zt_s=$(echo "$zt" | awk '/ZT_STEP_SECONDS/{print $2}')
pt_s=$(echo "$pt" | awk '/TORCH_STEP_SECONDS/{print $2}')
awk -v z="$zt_s" -v p="$pt_s" 'BEGIN { printf "full fine-tune step: torch / zerotune = %.2f (above 1: zerotune is faster)\n", p / z }'

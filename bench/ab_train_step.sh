#!/usr/bin/env bash
# A/B of the CPU training step between two builds (e.g. a worktree of the commit before a change and
# the current build): bench/bench_train_step of each, alternated REPS times so that the machine's
# drift falls on both, for full fine-tuning and LoRA r 16; prints each side's median of the runs'
# median step times and the ratio before / after (above 1: the change made the step faster).
#   bench/ab_train_step.sh BEFORE_BUILD AFTER_BUILD [REPS] [THREADS]   (defaults: 5, 2)
# The shape is bench/run_cpu_bench.sh's (the small LLaMA of BENCHMARKS.md's first table).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/ab_train_step.sh BEFORE_BUILD AFTER_BUILD [REPS] [THREADS]}
after=${2:?usage: bench/ab_train_step.sh BEFORE_BUILD AFTER_BUILD [REPS] [THREADS]}
reps=${3:-5}
threads=${4:-2}
shape=(--hidden 512 --layers 4 --seq 256 --batch 4 --vocab 32000 --steps 5)
for build in "$before" "$after"; do
  [[ -x "$build/bench/bench_train_step" ]] || { echo "bench/ab_train_step.sh: no $build/bench/bench_train_step" >&2; exit 1; }
done
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), threads $threads, $(date -u +%F)"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
step_seconds() {  # $1: build, the rest: extra flags
  local build=$1
  shift
  OMP_NUM_THREADS=$threads "$build/bench/bench_train_step" "${shape[@]}" "$@" | awk '/ZT_STEP_SECONDS/ { print $2 }'
}
for mode in full lora; do
  extra=()
  if [[ "$mode" == lora ]]; then extra=(--lora-r 16); fi
  a_times=() b_times=()
  for ((i = 0; i < reps; ++i)); do
    a_times+=("$(step_seconds "$before" "${extra[@]}")")
    b_times+=("$(step_seconds "$after" "${extra[@]}")")
  done
  a=$(printf '%s\n' "${a_times[@]}" | median)
  b=$(printf '%s\n' "${b_times[@]}" | median)
  echo "$mode: before ${a_times[*]} s (median $a); after ${b_times[*]} s (median $b)"
  awk -v a="$a" -v b="$b" -v m="$mode" 'BEGIN { printf "AB %s before/after = %.3f\n", m, a / b }'
done

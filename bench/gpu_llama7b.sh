#!/usr/bin/env bash
# bench/gpu_llama7b.sh: the GPU benchmark of issues 6 and 8 in one command. On one GPU, for a
# llama-7B-shaped model with random weights (zerotune init), seq 2048, bf16, it measures
#   gemm    the bf16 GEMM peak (bench_gemm_peak, 8192^3), the denominator of every MFU below;
#   kernels every hot kernel alone at the 7B shapes, checked against the CPU first (bench_kernels:
#           both attention versions, tensor cores and CUDA cores), the table in OUT/kernels.txt;
#   lora    zerotune LoRA r16 all-linear (bench/configs/lora.json: ZeRO-0): tokens/s, MFU, peak memory;
#   full    zerotune full fine-tuning, ZeRO-2 + offload_optimizer cpu (bench/configs/full_offload.json);
#   hf      the same LoRA step in HF transformers + PEFT (bench/hf_peft_step.py), and zerotune/HF;
#   search  the largest seq whose LoRA run (ZeRO-3 + offload_optimizer + offload_param cpu, falling
#           back to offload_optimizer only if zerotune refuses offload_param, + activation
#           checkpointing) stays within BUDGET_GIB of device memory (bench/seq_search.py).
# It prints a table and writes OUT/results.json (figures, machine, date, exact commands),
# OUT/table.md and OUT/bench.log. Any failure stops it with a non-zero status naming the step.
#
#   bench/gpu_llama7b.sh                                   # on the GPU node (see bench/README.md)
#   DEVICE=cpu MODEL=tiny PYTHON=.venv/bin/python BUILD=build bench/gpu_llama7b.sh   # CPU dry run
# Settings (environment): DEVICE cuda|cpu, MODEL 7b|tiny, BUILD (a configured CMake build dir,
# default build), WORK (models, data, runs, logs; default build-bench), OUT (default WORK/results),
# PYTHON (with torch, transformers, peft; default python3), PARTS (default "gemm lora full hf
# search"), SEQ, BATCH (micro-batch, 1), STEPS (4; the first is a warm-up), BUDGET_GIB, GEMM_SIZE,
# SEARCH_START, SEARCH_MAX, SEARCH_GRANULARITY, SEARCH_STEPS, PEAK_TFLOPS (MFU peak without the
# gemm part), ACT_CKPT=1 (activation checkpointing in lora, full and hf too; the search always has it). On DEVICE=cpu there is no device memory: the search reads the peak host RSS instead.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
driver_command="$(for v in DEVICE MODEL BUILD WORK OUT PYTHON PARTS SEQ BATCH STEPS BUDGET_GIB GEMM_SIZE SEARCH_START \
  SEARCH_MAX SEARCH_GRANULARITY SEARCH_STEPS PEAK_TFLOPS ACT_CKPT; do [[ -z "${!v:-}" ]] || printf '%s=%q ' "$v" "${!v}"; done)bench/gpu_llama7b.sh"

DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-7b}
BUILD=$(realpath -m "${BUILD:-build}")
WORK=$(realpath -m "${WORK:-build-bench}")
OUT=$(realpath -m "${OUT:-$WORK/results}")
PYTHON=${PYTHON:-python3}
PARTS=${PARTS:-gemm kernels lora full hf search}
BATCH=${BATCH:-1}
STEPS=${STEPS:-4}
ACT_CKPT=${ACT_CKPT:-0}
LORA_R=16
LORA_ALPHA=32
case "$MODEL" in
  7b) model_config=bench/configs/llama-7b.json; seq_default=2048; budget_default=24
      search_defaults=(2048 65536 256) ;;
  tiny) model_config=data/tour-llama/config.json; seq_default=128; budget_default=0.05
        search_defaults=(64 4096 64) ;;
  *) echo "gpu_llama7b.sh: MODEL must be 7b or tiny, not '$MODEL'" >&2; exit 2 ;;
esac
case "$DEVICE" in
  cuda) gemm_dtype=bf16; gemm_default=8192; hf_dtype=bf16; mem_key=mem_device_peak ;;
  cpu) gemm_dtype=fp32; gemm_default=512; hf_dtype=fp32; mem_key=mem_host_peak ;;
  *) echo "gpu_llama7b.sh: DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2 ;;
esac
SEQ=${SEQ:-$seq_default}
BUDGET_GIB=${BUDGET_GIB:-$budget_default}
GEMM_SIZE=${GEMM_SIZE:-$gemm_default}
SEARCH_START=${SEARCH_START:-${search_defaults[0]}}
SEARCH_MAX=${SEARCH_MAX:-${search_defaults[1]}}
SEARCH_GRANULARITY=${SEARCH_GRANULARITY:-${search_defaults[2]}}
SEARCH_STEPS=${SEARCH_STEPS:-2}
for part in $PARTS; do
  [[ " gemm kernels lora full hf search " == *" $part "* ]] ||
    { echo "gpu_llama7b.sh: PARTS: unknown part '$part' (gemm kernels lora full hf search)" >&2; exit 2; }
done
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 2 ]] ||
  { echo "gpu_llama7b.sh: STEPS must be at least 2 (the first step is a warm-up), not '$STEPS'" >&2; exit 2; }
case "$ACT_CKPT" in
  0) zt_ckpt=(); hf_ckpt=() ;;
  1) zt_ckpt=(--activation-checkpointing); hf_ckpt=(--gradient-checkpointing) ;;
  *) echo "gpu_llama7b.sh: ACT_CKPT must be 0 or 1, not '$ACT_CKPT'" >&2; exit 2 ;;
esac
want() { [[ " $PARTS " == *" $1 "* ]]; }

mkdir -p "$WORK/logs" "$WORK/parts" "$WORK/runs" "$OUT"
rm -f "$WORK/parts/"*.json "$WORK/commands.tsv"
exec > >(tee "$OUT/bench.log") 2>&1
export ZT_PROGRESS=lines  # plain step lines in the logs, no progress bar

current_step=setup
fail() {
  echo "gpu_llama7b.sh: FAILED in step '$current_step': $*" >&2
  exit 1
}
trap 'fail "a command exited with status $? (line $LINENO)"' ERR
step() {
  current_step=$1
  printf '\n== %s: %s\n' "$1" "$2"
}
# run_logged NAME COMMAND...: records the exact command (commands.tsv, for results.json), runs it
# with its output in WORK/logs/NAME.log, shows the log's key lines; on failure its last lines.
run_logged() {
  local name=$1 log="$WORK/logs/$1.log" quoted
  shift
  quoted="$(printf '%q ' "$@")"
  printf '%s\t%s\n' "$current_step" "${quoted% }" >>"$WORK/commands.tsv"
  echo "\$ ${quoted% }"
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    fail "$(basename "$1") exited non-zero (log: $log)"
  fi
  grep -E '^(step [0-9]|bench_gemm_peak|zerotune init|make_bench_data|hf step|hf:|seq_search)' "$log" || true
}
# json_file PATH KEY VALUE ...: a flat JSON object (values that read as numbers become numbers).
json_file() {
  "$PYTHON" -c 'import json, sys
def value(text):
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text
pairs = sys.argv[2:]
with open(sys.argv[1], "w") as out:
    json.dump({k: value(v) for k, v in zip(pairs[::2], pairs[1::2])}, out, indent=2)' "$@"
}

step setup "what this run is"
printf '%s\t%s\n' driver "$driver_command" >>"$WORK/commands.tsv"
if [[ "$DEVICE" == cuda ]]; then
  machine="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0)" ||
    fail "nvidia-smi could not name GPU 0"
else
  machine="$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores"
fi
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit+local changes"
vocab="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$model_config")"
json_file "$WORK/parts/settings.json" machine "$machine" device "$DEVICE" date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  commit "$commit" model "$MODEL" model_config "$model_config" seq "$SEQ" batch "$BATCH" steps "$STEPS" \
  lora "r $LORA_R, alpha $LORA_ALPHA, all-linear, dropout 0" parts "$PARTS" host "$(hostname)" \
  activation_checkpointing "$([[ $ACT_CKPT == 1 ]] && echo "on in lora, full and hf" || echo "off in lora, full and hf (on in search)")"
echo "machine: $machine | model $MODEL | seq $SEQ | micro-batch $BATCH | $STEPS steps | parts: $PARTS"

step build "zerotune, bench_gemm_peak, bench_kernels and make_bench_data in $BUILD"
[[ -f "$BUILD/CMakeCache.txt" ]] ||
  fail "$BUILD is not a configured CMake build (cmake -S . -B $BUILD, or the offline bundle's build: bench/README.md)"
run_logged configure "${CMAKE:-cmake}" "$BUILD"  # picks up bench/*.cpp added since the tree was configured
run_logged build "${CMAKE:-cmake}" --build "$BUILD" -j "$(nproc)" --target zerotune bench_gemm_peak bench_kernels make_bench_data
zerotune="$BUILD/zerotune"

peak="${PEAK_TFLOPS:-}"
if want gemm; then
  step gemm "measured $gemm_dtype GEMM peak, $GEMM_SIZE^3"
  run_logged gemm "$BUILD/bench/bench_gemm_peak" "$DEVICE" "$gemm_dtype" --m "$GEMM_SIZE" --n "$GEMM_SIZE" --k "$GEMM_SIZE"
  peak="$(sed -n 's/^ZT_GEMM_TFLOPS //p' "$WORK/logs/gemm.log")"
  [[ -n "$peak" ]] || fail "no ZT_GEMM_TFLOPS line in $WORK/logs/gemm.log"
  json_file "$WORK/parts/gemm.json" tflops "$peak" what "$(sed -n 's/^bench_gemm_peak: //p' "$WORK/logs/gemm.log")"
fi

if want kernels; then
  step kernels "every hot kernel at the $MODEL shapes, checked against the CPU, then timed"
  kernel_shape=$([[ $MODEL == 7b ]] && echo 7b || echo tiny)
  run_logged kernels "$BUILD/bench/bench_kernels" "$DEVICE" --shape "$kernel_shape" --dtype "$gemm_dtype" \
    ${peak:+--peak-tflops "$peak"}
  cp "$WORK/logs/kernels.log" "$OUT/kernels.txt"
fi

model_dir="$WORK/model-$MODEL"
if want lora || want full || want hf || want search; then
  step model "random $MODEL model in HF layout (bf16 safetensors) from $model_config"
  if [[ -f "$model_dir/.bench-complete" ]] && cmp -s "$model_config" "$model_dir/config.json"; then
    echo "reusing $model_dir (written by an earlier run from the same config)"
  else
    rm -rf "$model_dir"
    run_logged init "$zerotune" init --config "$model_config" --out "$model_dir" --seed 1 --dtype bf16
    touch "$model_dir/.bench-complete"
  fi
fi

data_dir="$WORK/data-seq$SEQ-n$((BATCH * STEPS))"
if want lora || want full; then
  step data "$((BATCH * STEPS)) samples of exactly $SEQ tokens"
  run_logged data "$BUILD/bench/make_bench_data" "$data_dir" --seq "$SEQ" --samples "$((BATCH * STEPS))" --vocab "$vocab"
fi

# zerotune_run NAME LABEL DS_CONFIG [EXTRA FLAGS...]: STEPS steps, then its summary as a part.
zerotune_run() {
  local name=$1 label=$2 config=$3
  shift 3
  rm -rf "$WORK/runs/$name"
  run_logged "$name" "$zerotune" train --model "$model_dir" --data "$data_dir" --out "$WORK/runs/$name" \
    --deepspeed "$config" --micro-batch-size "$BATCH" --max-steps "$STEPS" --device "$DEVICE" --seed 1 --log-every 1 \
    --no-save-at-end ${peak:+--peak-tflops "$peak"} "${zt_ckpt[@]}" "$@"
  "$PYTHON" bench/bench_results.py summarize "$WORK/runs/$name" --label "$label" >"$WORK/parts/$name.json"
}
if want lora; then
  step lora "zerotune LoRA r$LORA_R all-linear, bench/configs/lora.json"
  zerotune_run zt_lora "zerotune LoRA r$LORA_R all-linear (ZeRO-0, bf16)" bench/configs/lora.json \
    --lora-r "$LORA_R" --lora-alpha "$LORA_ALPHA" --lora-targets all-linear
fi
if want full; then
  step full "zerotune full fine-tuning, bench/configs/full_offload.json"
  zerotune_run zt_full "zerotune full fine-tuning (ZeRO-2 + offload_optimizer cpu, bf16)" bench/configs/full_offload.json
fi

if want hf; then
  step hf "HF transformers + PEFT, the same LoRA step"
  run_logged hf_lora "$PYTHON" bench/hf_peft_step.py --model "$model_dir" --device "$DEVICE" --dtype "$hf_dtype" \
    --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --lora-r "$LORA_R" --lora-alpha "$LORA_ALPHA" "${hf_ckpt[@]}"
  sed -n 's/^HF_RESULT //p' "$WORK/logs/hf_lora.log" >"$WORK/parts/hf_lora.json"
  [[ -s "$WORK/parts/hf_lora.json" ]] || fail "no HF_RESULT line in $WORK/logs/hf_lora.log"
fi

if want search; then
  step search "largest seq within $BUDGET_GIB GiB ($mem_key), LoRA + ZeRO-3 + offload + activation checkpointing"
  run_logged seq_search "$PYTHON" bench/seq_search.py --make-data "$BUILD/bench/make_bench_data" --work "$WORK/search" \
    --vocab "$vocab" --budget-gib "$BUDGET_GIB" --mem-key "$mem_key" --config bench/configs/lora_z3_offload_param.json \
    --fallback-config bench/configs/lora_z3_offload.json --start "$SEARCH_START" --max "$SEARCH_MAX" \
    --granularity "$SEARCH_GRANULARITY" --steps "$SEARCH_STEPS" --out "$WORK/parts/seq_search.json" -- \
    "$zerotune" train --model "$model_dir" --device "$DEVICE" --lora-r "$LORA_R" --lora-alpha "$LORA_ALPHA" \
    --lora-targets all-linear --activation-checkpointing --seed 1 --log-every 1 --no-save-at-end
fi

step report "table and $OUT/results.json"
"$PYTHON" bench/bench_results.py report --parts "$WORK/parts" --commands "$WORK/commands.tsv" --out "$OUT"
echo "gpu_llama7b.sh: done; results in $OUT/results.json, $OUT/table.md, $OUT/bench.log"

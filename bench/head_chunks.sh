#!/usr/bin/env bash
# Chunked LM head + cross-entropy benchmark (issue 18): the peak memory of a training step with
# the whole [tokens, vocab] logits (--head-chunk-rows larger than the micro-batch's tokens) and
# with the automatic chunks (ceil(vocab / hidden) chunks of rows, at least 256 rows), at vocab 32000 (LLaMA-2) and
# 128256 (Llama 3), one run after the other in one go:
#   cpu   host peak RSS (metrics.jsonl mem_host_peak, the process's VmHWM) of 2 steps, micro-batch
#         4 x 512 tokens (2048 rows)
#   cuda  the emulated device's peak memory in use (mem_device_peak, the caching allocator's) of
#         1 step, micro-batch 1 x 1024 tokens (4 chunks of 256 rows; the emulated GEMMs are slow);
#         ZEROTUNE must then be an emulated build (build/zerotune-emu) or run where a GPU is
#   estimate  `zerotune estimate --model` for the CPU run's shape (the memory model's peak per
#         GPU for ZeRO-0, as the train-time check predicts it)
# Model: a 2-layer LLaMA, hidden 128, MLP 344, 4 heads, random fp32 weights; LoRA r8 on q_proj,
# v_proj (the head and embeddings frozen, so the logits dominate what a step allocates).
#   bench/head_chunks.sh [ZEROTUNE] [DEVICES]   (defaults: build/zerotune, "cpu cuda")
set -euo pipefail
cd "$(dirname "$0")/.."
zerotune=${1:-build/zerotune}
devices=${2:-cpu cuda}
python=${ZT_PYTHON:-.venv/bin/python}
work=$(mktemp -d /tmp/zt-bench-head-chunks.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u +%F)"

peak() {  # the largest value of a metrics.jsonl key over the steps, in MiB
  "$python" - "$1/metrics.jsonl" "$2" <<'EOF_PY'
import json, sys
values = [r[sys.argv[2]] for r in map(json.loads, open(sys.argv[1])) if r.get(sys.argv[2]) is not None]
print(f"{max(values) / 2**20:.0f}")
EOF_PY
}

printf "%-7s %-6s %-9s %10s %10s %8s\n" vocab device measure whole chunked ratio
for vocab in 32000 128256; do
  model="$work/model-$vocab"
  cat > "$work/config-$vocab.json" <<EOF_JSON
{"model_type": "llama", "vocab_size": $vocab, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 1024, "bos_token_id": 1,
 "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32"}
EOF_JSON
  "$zerotune" init --config "$work/config-$vocab.json" --out "$model" --seed 1 >/dev/null
  for seq in 512 1024; do
    "$python" tests/oracle/make_token_shard.py --out "$work/data-$vocab-$seq" --samples 8 --vocab "$vocab" \
      --min-len "$seq" --max-len "$seq" --seed 2 >/dev/null
  done
  for device in $devices; do
    if [ "$device" = cpu ]; then micro=4 seq=512 steps=2 key=mem_host_peak; else micro=1 seq=1024 steps=1 key=mem_device_peak; fi
    cat > "$work/ds-$micro.json" <<EOF_JSON
{"train_batch_size": $micro, "train_micro_batch_size_per_gpu": $micro,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 0}}
EOF_JSON
    declare -A measured=()
    for layout in whole chunked; do
      rows=0
      [ "$layout" = whole ] && rows=100000000
      OMP_NUM_THREADS=2 "$zerotune" train --model "$model" --data "$work/data-$vocab-$seq" --out "$work/$vocab-$device-$layout" \
        --deepspeed "$work/ds-$micro.json" --max-steps "$steps" --seed 1 --no-save-at-end --device "$device" \
        --lora-r 8 --lora-alpha 16 --head-chunk-rows "$rows" >/dev/null
      measured[$layout]=$(peak "$work/$vocab-$device-$layout" "$key")
    done
    printf "%-7s %-6s %-9s %7s MiB %6s MiB %7.2fx\n" "$vocab" "$device" "$key" "${measured[whole]}" "${measured[chunked]}" \
      "$(awk -v w="${measured[whole]}" -v c="${measured[chunked]}" 'BEGIN { print w / c }')"
  done
  declare -A estimated=()
  for layout in whole chunked; do
    rows=0
    [ "$layout" = whole ] && rows=100000000
    estimated[$layout]=$("$zerotune" estimate --model "$model" --seq-len 512 --micro-batch 4 --lora-r 8 \
      --compute-dtype fp32 --head-chunk-rows "$rows" --json | "$python" -c '
import json, sys
report = json.load(sys.stdin)
row = next(r for r in report["rows"] if r["stage"] == 0)
value = row["zerotune_run"]["device_peak_bytes"]
print(f"{value / 2**20:.0f}")')
  done
  printf "%-7s %-6s %-9s %7s MiB %6s MiB %7.2fx\n" "$vocab" "-" estimate "${estimated[whole]}" "${estimated[chunked]}" \
    "$(awk -v w="${estimated[whole]}" -v c="${estimated[chunked]}" 'BEGIN { print w / c }')"
done

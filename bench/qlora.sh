#!/usr/bin/env bash
# QLoRA (issue 19): the figures of BENCHMARKS.md "QLoRA". On the CPU backend:
#   1. bytes per parameter of the frozen 4-bit base (the layout's bytes over its elements, from
#      run.json: the frozen group of a one-rank run, 4-bit vs fp32);
#   2. the loss trajectory of QLoRA (NF4, double quantization) against LoRA on the fp32 base over
#      the tour's data (the README's tour model and data, samples up to 256 tokens, the tour's
#      settings, QLORA_BENCH_STEPS steps, default 12);
#   3. the CPU step time of both (median seconds per step from metrics.jsonl, OMP_NUM_THREADS=2);
#   4. `zerotune estimate` per GPU for llama-2-7b and a 65B LLaMA, QLoRA vs LoRA (bf16 base).
# Usage: bench/qlora.sh [build/zerotune]   (needs the tour's spm_train; run from the repository root)
set -euo pipefail
zerotune=${1:-build/zerotune}
python=${ZT_PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=2
"$zerotune" init --config data/tour-llama/config.json --out "$work/model" --seed 1 >/dev/null
"$python" -c '
import json, sys
with open(sys.argv[1], "w") as out:
    for line in open("data/rm-static-sample.jsonl"):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
' "$work/corpus.txt"
spm_train --input="$work/corpus.txt" --model_prefix="$work/model/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2 >/dev/null 2>&1
"$zerotune" prep --input data/rm-static-sample.jsonl --tokenizer "$work/model" --out "$work/data" --max-seq-len 256 \
  --shard-samples 128 >/dev/null
tour=(--data "$work/data" --deepspeed data/tiny-llama/ds_config.json --max-steps "${QLORA_BENCH_STEPS:-12}" --seed 1 --lora-r 8 --lora-alpha 16
      --lora-targets all-linear)
"$zerotune" train --model "$work/model" --out "$work/lora" "${tour[@]}" >/dev/null
"$zerotune" train --model "$work/model" --out "$work/qlora" "${tour[@]}" --quantize nf4 --double-quant >/dev/null
"$python" - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def run(name):
    records = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl") if '"loss"' in l]
    return json.load(open(f"{work}/{name}/run.json")), records
lora_run, lora = run("lora")
for name, label in (("qlora", "nf4 + double quant"),):
    q_run, q = run(name)
    frozen_q = q_run["zero_layout"]["all_elements"] - q_run["zero_layout"]["trainable_elements"]
    frozen_f = lora_run["zero_layout"]["all_elements"] - lora_run["zero_layout"]["trainable_elements"]
    print(f"{label}: frozen group {4 * frozen_q} B vs fp32 {4 * frozen_f} B")
    rel = [abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(q, lora)]
    print(f"{label}: loss step 1 {q[0]['loss']:.4f} (LoRA {lora[0]['loss']:.4f}), step {len(q)} {q[-1]['loss']:.4f} "
          f"(LoRA {lora[-1]['loss']:.4f}); max |QLoRA - LoRA| / LoRA over {len(q)} steps {max(rel):.4f}")
    for step in sorted({1, len(q) // 4, len(q) // 2, 3 * len(q) // 4, len(q)}):
        print(f"  step {step:2d}: QLoRA {q[step-1]['loss']:.4f}  LoRA {lora[step-1]['loss']:.4f}")
    tq = statistics.median(1.0 / r["samples_per_sec"] * 8 for r in q[2:])
    tl = statistics.median(1.0 / r["samples_per_sec"] * 8 for r in lora[2:])
    print(f"{label}: median step time {tq:.3f} s vs LoRA {tl:.3f} s (ratio {tq / tl:.2f})")
PY
for model in job_scripts/deepspeed-chat/models/llama-2-7b bench/configs/llama-65b; do
  for quant in "" "--quantize nf4 --double-quant"; do
    "$zerotune" estimate --model "$model" --lora-r 64 --lora-targets all-linear --seq-len 512 --micro-batch 1 \
      --activation-checkpointing $quant --json > "$work/estimate.json"
    "$python" - "$work/estimate.json" "$model" "${quant:-bf16 base}" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
gib = 1024.0 ** 3
for row in report["rows"]:
    if row["offload_optimizer"] != "none" or row["offload_param"] != "none":
        continue
    run = row["zerotune_run"]
    print(f"{sys.argv[2]} ({sys.argv[3]}), 1 GPU, stage {row['stage']}: device set-up "
          f"{run['device_setup_bytes'] / gib:.2f} GiB, step peak {run['device_peak_bytes'] / gib:.2f} GiB")
PY
  done
done

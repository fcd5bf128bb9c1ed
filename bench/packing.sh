#!/usr/bin/env bash
# --packing benchmark (issue 18): useful (non-padding) tokens per second of CPU training with and
# without packing, one run after the other in one go, on
#   rm-static   data/rm-static-sample.jsonl tokenized by `zerotune prep` (SentencePiece BPE 1000
#               trained on it with spm_train, --max-seq-len 512)
#   rm-lengths  1024 samples of random ids whose lengths are drawn from rm-static's
# with a 4-layer LLaMA (bench/configs/packing-llama.json: hidden 256, GQA 8/4 heads, vocab 1000),
# micro-batch 8 samples, ZeRO 0, fp32, one rank. Figures are the mean over steps 2.. of
# metrics.jsonl's tokens_per_sec (real tokens / step time) and padding_fraction.
#   bench/packing.sh [ZEROTUNE] [THREADS] [STEPS]   (defaults: build/zerotune, 1, 8)
# One thread: on a shared 2-core machine OpenMP threads that wait on each other at every barrier
# make both layouts slower and noisier than one thread does.
set -euo pipefail
cd "$(dirname "$0")/.."
zerotune=${1:-build/zerotune}
threads=${2:-1}
steps=${3:-8}
python=${ZT_PYTHON:-.venv/bin/python}
work=$(mktemp -d /tmp/zt-bench-packing.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
command -v spm_train >/dev/null || { echo "spm_train not found (Debian package sentencepiece)" >&2; exit 1; }
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), threads $threads, $(date -u +%F)"

"$zerotune" init --config bench/configs/packing-llama.json --out "$work/model" --seed 3 >/dev/null
"$python" - data/rm-static-sample.jsonl "$work/corpus.txt" <<'EOF_PY'
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
EOF_PY
spm_train --input="$work/corpus.txt" --model_prefix="$work/model/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2
"$zerotune" prep --input data/rm-static-sample.jsonl --tokenizer "$work/model" --out "$work/rm-static" \
  --max-seq-len 512 >/dev/null
"$python" bench/packing_lengths.py "$work/rm-static" "$work/rm-lengths" 1024 7

cat > "$work/ds.json" <<'EOF_JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
 "zero_optimization": {"stage": 0}}
EOF_JSON

summary() {  # mean tokens_per_sec and padding_fraction over steps 2..
  "$python" - "$1/metrics.jsonl" <<'EOF_PY'
import json, sys
records = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and "step" in r][1:]
print(f"{sum(r['tokens_per_sec'] for r in records) / len(records):.1f} "
      f"{sum(r['padding_fraction'] for r in records) / len(records):.3f} "
      f"{sum(r['loss'] for r in records) / len(records):.6f}")
EOF_PY
}

printf "%-11s %-9s %14s %9s %10s\n" data layout "useful tok/s" padding "mean loss"
for data in rm-static rm-lengths; do
  declare -A rate=()
  for layout in padded packed; do
    extra=()
    [ "$layout" = packed ] && extra=(--packing)
    OMP_NUM_THREADS=$threads "$zerotune" train --model "$work/model" --data "$work/$data" --out "$work/$data-$layout" \
      --deepspeed "$work/ds.json" --max-steps "$steps" --seed 1 --no-save-at-end --device cpu "${extra[@]}" >/dev/null
    read -r tokens padding loss < <(summary "$work/$data-$layout")
    rate[$layout]=$tokens
    printf "%-11s %-9s %14s %9s %10s\n" "$data" "$layout" "$tokens" "$padding" "$loss"
  done
  awk -v p="${rate[packed]}" -v u="${rate[padded]}" -v d="$data" \
    'BEGIN { printf "%s: packed / padded useful tokens/s = %.2f\n", d, p / u }'
done

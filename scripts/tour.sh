#!/usr/bin/env bash
# scripts/tour.sh: the main job end to end on the shipped sample, in one command (after
# scripts/setup.sh): a tiny random LLaMA and a SentencePiece tokenizer trained on the sample's
# text (no download), `zerotune prep` of data/rm-static-sample.jsonl into token shards, training
# on 2 MPI ranks with ZeRO stage 2 (the DeepSpeed config data/tiny-llama/ds_config.json), export
# of the last checkpoint as an HF model directory, and the HTML report. The README's tour
# explains each step.
# Usage: scripts/tour.sh [WORK_DIR]   (default /tmp/zt-tour-quick; removed first)
# Environment: ZEROTUNE (default build/zerotune), PYTHON (default .venv/bin/python),
#              ZT_TOUR_STEPS (optimizer steps, default 16), ZT_TOUR_RANKS (default 2).
# mpirun as root needs OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (Open MPI
# refuses root otherwise); this script sets them when run as root.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-/tmp/zt-tour-quick}"
ZEROTUNE="${ZEROTUNE:-$REPO/build/zerotune}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
STEPS="${ZT_TOUR_STEPS:-16}"
RANKS="${ZT_TOUR_RANKS:-2}"
for tool in "$ZEROTUNE" "$PYTHON"; do
  [[ -x "$tool" ]] || { echo "scripts/tour.sh: $tool is missing: run scripts/setup.sh first" >&2; exit 1; }
done
for tool in spm_train mpirun; do
  command -v "$tool" >/dev/null || { echo "scripts/tour.sh: $tool is not on PATH: run scripts/setup.sh first" >&2; exit 1; }
done
if [[ "$(id -u)" -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

step() { echo; echo "== $*"; }
rm -rf "$WORK"
mkdir -p "$WORK"

step "1/5 a tiny random LLaMA and its tokenizer (trained on the sample's text)"
"$ZEROTUNE" init --config "$REPO/data/tour-llama/config.json" --out "$WORK/model" --seed 1
"$PYTHON" - "$REPO/data/rm-static-sample.jsonl" "$WORK/corpus.txt" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
PY
spm_train --input="$WORK/corpus.txt" --model_prefix="$WORK/model/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2

step "2/5 prep: the sample's rows -> token shards"
"$ZEROTUNE" prep --input "$REPO/data/rm-static-sample.jsonl" --tokenizer "$WORK/model" --out "$WORK/data" \
  --max-seq-len 512 --shard-samples 128

step "3/5 train: $RANKS ranks, ZeRO stage 2, $STEPS steps"
mpirun -np "$RANKS" --oversubscribe "$ZEROTUNE" train --model "$WORK/model" --data "$WORK/data" --out "$WORK/run" \
  --deepspeed "$REPO/data/tiny-llama/ds_config.json" --zero-stage 2 --max-steps "$STEPS" --save-every 8 --seed 1

step "4/5 export: the newest checkpoint as an HF model directory"
"$ZEROTUNE" export --checkpoint "$WORK/run" --model "$WORK/model" --out "$WORK/hf-model" --format hf

step "5/5 report"
"$ZEROTUNE" report "$WORK/run"

echo
echo "done: metrics $WORK/run/metrics.jsonl, checkpoints $WORK/run/checkpoints, HF model $WORK/hf-model,"
echo "      report $WORK/run/report.html"

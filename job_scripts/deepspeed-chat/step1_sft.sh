#!/usr/bin/env bash
# job_scripts/deepspeed-chat/step1_sft.sh: DeepSpeed-Chat step 1 (supervised fine-tuning on
# Dahoas/rm-static) with zerotune, end to end: `zerotune prep` (DeepSpeed-Chat's sample layout),
# `zerotune train` through job_scripts/mpirun/train.sh (one rank per GPU, nodes from a hostfile),
# then `zerotune export` of the last checkpoint (an HF model, or a PEFT adapter for LoRA runs).
# docs/deepspeed-chat.md explains the runs of the study (opt-1.3b with ZeRO-2 on 2 nodes x 2 GPUs,
# llama2-7b with LoRA) and what to expect.
#
#   ZT_MODEL=/models/opt-1.3b ZT_RM_STATIC=/data/rm-static/train.jsonl ZT_WORK=/runs/opt-sft \
#   ZT_HOSTFILE=hostfiles/two-nodes-two-gpus.txt job_scripts/deepspeed-chat/step1_sft.sh
#
# Environment (besides what job_scripts/mpirun/train.sh reads: ZT_BIN, ZT_NP, ZT_MPIRUN_ARGS, ...):
#   ZT_MODEL      HF model directory with its tokenizer (tokenizer.json / vocab.json + merges.txt
#                 for OPT, tokenizer.model for LLaMA)                                     [required]
#   ZT_RM_STATIC  the rm-static rows (JSONL with prompt/chosen columns: the train split of
#                 Dahoas/rm-static saved as JSON lines)                                   [required]
#   ZT_WORK       working directory: data/ (shards), run/ (train output), export/         [required]
#   ZT_DS_CONFIG  DeepSpeed JSON (default: ds_config_step1_zero2.json beside this script)
#   ZT_MAX_SEQ_LEN  prep --max-seq-len (default 512, DeepSpeed-Chat's)
#   ZT_PREP_ARGS  more `zerotune prep` flags, e.g. "--loss-on all" (train on the prompt too, as
#                 DeepSpeed-Chat does) or "--eot-token <|endoftext|>" (its older end marker)
#   ZT_ARGS       `zerotune train` flags (default: DeepSpeed-Chat's step-1 choices:
#                 "--epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500")
#   ZT_EXPORT     hf (default), peft (LoRA runs) or none
#   ZT_EXPORT_ARGS  more `zerotune export` flags, e.g. "--merge --dtype bf16" (an HF model of a LoRA run)
set -euo pipefail

job="deepspeed-chat/step1_sft.sh"
say() { printf '[%s] %s\n' "$job" "$*"; }
die() { printf '%s: error: %s\n' "$job" "$*" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

ZT_BIN="${ZT_BIN:-zerotune}"
command -v "$ZT_BIN" >/dev/null 2>&1 || die "ZT_BIN='$ZT_BIN': no such executable"
[[ -n "${ZT_MODEL:-}" && -f "$ZT_MODEL/config.json" ]] || die "ZT_MODEL='${ZT_MODEL:-}': an HF model directory (config.json + safetensors + tokenizer) is needed"
[[ -n "${ZT_RM_STATIC:-}" && -e "$ZT_RM_STATIC" ]] || die "ZT_RM_STATIC='${ZT_RM_STATIC:-}': the rm-static JSONL rows are needed"
[[ -n "${ZT_WORK:-}" ]] || die "ZT_WORK is not set: the working directory (data/, run/, export/)"
ZT_DS_CONFIG="${ZT_DS_CONFIG:-$here/ds_config_step1_zero2.json}"
[[ -f "$ZT_DS_CONFIG" ]] || die "ZT_DS_CONFIG='$ZT_DS_CONFIG': no such file"
ZT_MAX_SEQ_LEN="${ZT_MAX_SEQ_LEN:-512}"
ZT_ARGS="${ZT_ARGS:---epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500}"
ZT_EXPORT="${ZT_EXPORT:-hf}"
[[ "$ZT_EXPORT" == hf || "$ZT_EXPORT" == peft || "$ZT_EXPORT" == none ]] || die "ZT_EXPORT='$ZT_EXPORT': hf, peft or none"
mkdir -p "$ZT_WORK"

# 1. Tokenize once (a rerun of the job reuses the shards).
if compgen -G "$ZT_WORK/data/train-*.h5" >/dev/null; then
  say "reusing the shards in $ZT_WORK/data"
else
  say "prep: $ZT_RM_STATIC -> $ZT_WORK/data (max_seq_len $ZT_MAX_SEQ_LEN)"
  "$ZT_BIN" prep --input "$ZT_RM_STATIC" --tokenizer "$ZT_MODEL" --out "$ZT_WORK/data" --max-seq-len "$ZT_MAX_SEQ_LEN" ${ZT_PREP_ARGS:-}
fi

# 2. Train (resumes from the newest checkpoint when run again).
ZT_DATA="$ZT_WORK/data" ZT_OUT="$ZT_WORK/run" ZT_DS_CONFIG="$ZT_DS_CONFIG" ZT_ARGS="$ZT_ARGS" \
  ZT_BIN="$ZT_BIN" ZT_MODEL="$ZT_MODEL" bash "$here/../mpirun/train.sh"

# 3. Export the last checkpoint.
[[ "$ZT_EXPORT" == none ]] && exit 0
latest="$(cat "$ZT_WORK/run/checkpoints/latest")"
say "export --format $ZT_EXPORT: $ZT_WORK/run/checkpoints/$latest -> $ZT_WORK/export"
"$ZT_BIN" export --checkpoint "$ZT_WORK/run/checkpoints/$latest" --model "$ZT_MODEL" --out "$ZT_WORK/export" \
  --format "$ZT_EXPORT" ${ZT_EXPORT_ARGS:-}

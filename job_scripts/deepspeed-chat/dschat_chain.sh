# job_scripts/deepspeed-chat/dschat_chain.sh: the chain that DeepSpeed-Chat's steps share, sourced
# by step1_sft.sh and step2_reward.sh (not run on its own): `zerotune prep` (a training split and
# an evaluation split of the rm-static rows), `zerotune train` (evaluation before the first step
# and after each epoch), then `zerotune export` of the last checkpoint. Without a batch system the
# three run here, training through job_scripts/mpirun/train.sh (one rank per GPU, nodes from a
# hostfile); with ZT_SCHEDULER=slurm the step script, run on the login node, submits them as one
# chain of Slurm jobs and returns:
#   prep (1 task) -> train (job_scripts/slurm/train.sbatch, --dependency=afterok:prep)
#   -> export (1 task, --dependency=afterok:train)
# so that one command is the whole step; a failed job cancels the ones after it
# (--kill-on-invalid-dep).
#
# What the step script sets before sourcing this file:
#   job             its name in messages ("deepspeed-chat/step1_sft.sh")
#   step            the Slurm job names' prefix (step1 -> step1-prep, step1-train, step1-export)
#   here            the folder of the step scripts
#   step_ds_config  the default ZT_DS_CONFIG, a file in $here
#   step_args       the default ZT_ARGS (the step's DeepSpeed-Chat choices)
#   step_prep       an array of prep flags the step always passes (e.g. --pairs)
#   step_train      train flags the step always passes (e.g. --objective reward)
#   step_exports    the ZT_EXPORT values the step offers ("hf peft none")
#
# Environment (besides what job_scripts/mpirun/train.sh or slurm/train.sbatch read: ZT_BIN,
# ZT_NP, ZT_MPIRUN_ARGS, ZT_LAUNCHER, ...):
#   ZT_MODEL      HF model directory with its tokenizer (tokenizer.json / vocab.json + merges.txt
#                 for OPT, tokenizer.model for LLaMA)                                     [required]
#   ZT_RM_STATIC  the rm-static rows (JSONL with prompt/chosen(/rejected) columns: the train split
#                 of Dahoas/rm-static saved as JSON lines)                                [required]
#   ZT_RM_STATIC_TEST  the evaluation rows: rm-static's test split as JSON lines (what
#                 DeepSpeed-Chat evaluates on). Without it, ZT_EVAL_FRACTION of the ZT_RM_STATIC
#                 rows are held out instead
#   ZT_EVAL_FRACTION  the share held out when there is no ZT_RM_STATIC_TEST (default 0.1:
#                 DeepSpeed-Chat's "9,1" train_eval split of a dataset without its own eval
#                 rows, the same rows for seed 1234); 0: no evaluation split
#   ZT_WORK       working directory: data/ (shards), run/ (train output), export/         [required]
#   ZT_DS_CONFIG  DeepSpeed JSON (default: the step's, beside the step script)
#   ZT_MAX_SEQ_LEN  prep --max-seq-len (default 512, DeepSpeed-Chat's)
#   ZT_PREP_ARGS  more `zerotune prep` flags, e.g. "--loss-on all" (step 1: train on the prompt
#                 too, as DeepSpeed-Chat does), "--eot-token <|endoftext|>" (its older end
#                 marker) or "--data-split 2,4,4 --data-phase 2" (its share of a dataset per step)
#   ZT_ARGS       `zerotune train` flags (default: the step's); the chain adds "--split train
#                 --eval-split eval --eval-at-start" (unless ZT_ARGS names its own --eval-data or
#                 --eval-split)
#   ZT_EXPORT     the export format (default hf; the step lists what it offers) or none
#   ZT_EXPORT_ARGS  more `zerotune export` flags, e.g. "--merge" (an HF model of a LoRA run) or
#                 "--dtype fp32" (default: the run's dtype, fp16 for DeepSpeed-Chat's configs)
#   ZT_SCHEDULER  none (default: run everything here) or slurm (submit the chain above)
#   ZT_SBATCH_ARGS  slurm: sbatch options of the training job (nodes, GPUs, partition, time)
#   ZT_SBATCH_PREP_ARGS  slurm: sbatch options of the prep and export jobs (e.g. a partition)
say() { printf '[%s] %s\n' "$job" "$*"; }
die() { printf '%s: error: %s\n' "$job" "$*" >&2; exit 2; }

ZT_BIN="${ZT_BIN:-zerotune}"
command -v "$ZT_BIN" >/dev/null 2>&1 || die "ZT_BIN='$ZT_BIN': no such executable"
[[ -n "${ZT_MODEL:-}" && -f "$ZT_MODEL/config.json" ]] || die "ZT_MODEL='${ZT_MODEL:-}': an HF model directory (config.json + safetensors + tokenizer) is needed"
[[ -n "${ZT_RM_STATIC:-}" && -e "$ZT_RM_STATIC" ]] || die "ZT_RM_STATIC='${ZT_RM_STATIC:-}': the rm-static JSONL rows are needed"
[[ -n "${ZT_WORK:-}" ]] || die "ZT_WORK is not set: the working directory (data/, run/, export/)"
ZT_DS_CONFIG="${ZT_DS_CONFIG:-$here/$step_ds_config}"
[[ -f "$ZT_DS_CONFIG" ]] || die "ZT_DS_CONFIG='$ZT_DS_CONFIG': no such file"
ZT_MAX_SEQ_LEN="${ZT_MAX_SEQ_LEN:-512}"
ZT_ARGS="${ZT_ARGS:-$step_args}"
ZT_EXPORT="${ZT_EXPORT:-hf}"
[[ " $step_exports " == *" $ZT_EXPORT "* ]] || die "ZT_EXPORT='$ZT_EXPORT': one of: $step_exports"
ZT_SCHEDULER="${ZT_SCHEDULER:-none}"
[[ "$ZT_SCHEDULER" == none || "$ZT_SCHEDULER" == slurm ]] || die "ZT_SCHEDULER='$ZT_SCHEDULER': none or slurm"
if [[ -n "${ZT_RM_STATIC_TEST:-}" ]]; then
  [[ -e "$ZT_RM_STATIC_TEST" ]] || die "ZT_RM_STATIC_TEST='$ZT_RM_STATIC_TEST': no such file (rm-static's test split as JSON lines)"
  ZT_EVAL_FRACTION=0
fi
ZT_EVAL_FRACTION="${ZT_EVAL_FRACTION:-0.1}"
[[ "$ZT_EVAL_FRACTION" =~ ^(0|0?\.[0-9]+)$ ]] || die "ZT_EVAL_FRACTION='$ZT_EVAL_FRACTION': a share of the rows in [0, 1), e.g. 0.1"
mkdir -p "$ZT_WORK"
ZT_WORK="$(cd "$ZT_WORK" && pwd)"  # jobs may start elsewhere
ZT_BIN="$(command -v "$ZT_BIN")"

# 1. Tokenize once (a rerun of the job reuses the shards): the training split, and the
# evaluation split from rm-static's test rows or held out of the training rows.
prep=("$ZT_BIN" prep "${step_prep[@]}" --input "$ZT_RM_STATIC" --tokenizer "$ZT_MODEL" --out "$ZT_WORK/data"
      --split train --max-seq-len "$ZT_MAX_SEQ_LEN")
evaluation=1
if [[ -n "${ZT_RM_STATIC_TEST:-}" ]]; then prep+=(--eval-input "$ZT_RM_STATIC_TEST" --eval-split eval)
elif [[ "$ZT_EVAL_FRACTION" =~ ^0?\.?0*$ ]]; then evaluation=0
else prep+=(--eval-fraction "$ZT_EVAL_FRACTION" --eval-split eval)
fi
read -r -a prep_args <<< "${ZT_PREP_ARGS:-}"
prep+=("${prep_args[@]}")
need_prep=1
if compgen -G "$ZT_WORK/data/train-*.h5" >/dev/null && { [[ "$evaluation" == 0 ]] || compgen -G "$ZT_WORK/data/eval-*.h5" >/dev/null; }; then
  say "reusing the shards in $ZT_WORK/data"
  need_prep=0
else
  prep+=(--force)  # shards of an interrupted earlier prep are replaced
fi

# 2. Train (resumes from the newest checkpoint when run again), with perplexity on the
# evaluation split before the first step and after each epoch, as DeepSpeed-Chat's steps 1
# and 2 evaluate.
train_args="$step_train $ZT_ARGS --split train"
if [[ "$evaluation" == 1 && ! " $ZT_ARGS " =~ \ --eval-(data|split)[\ =] ]]; then
  train_args+=" --eval-split eval --eval-at-start"
fi
export ZT_BIN ZT_MODEL ZT_DS_CONFIG
export ZT_DATA="$ZT_WORK/data" ZT_OUT="$ZT_WORK/run" ZT_ARGS="$train_args"

# 3. Export the last checkpoint (the run directory: its `latest`).
export_cmd=("$ZT_BIN" export --checkpoint "$ZT_WORK/run" --model "$ZT_MODEL" --out "$ZT_WORK/export" --format "$ZT_EXPORT")
read -r -a export_args <<< "${ZT_EXPORT_ARGS:-}"
export_cmd+=("${export_args[@]}")

if [[ "$ZT_SCHEDULER" == none ]]; then
  if [[ "$need_prep" == 1 ]]; then say "prep: + ${prep[*]}"; "${prep[@]}"; fi
  bash "$here/../mpirun/train.sh"
  [[ "$ZT_EXPORT" == none ]] && exit 0
  say "export: + ${export_cmd[*]}"
  "${export_cmd[@]}"
  exit 0
fi

# ZT_SCHEDULER=slurm: the same three steps as a chain of jobs. Prep and export are one task each
# (their job scripts are written to $ZT_WORK/slurm/); training is job_scripts/slurm/train.sbatch.
command -v sbatch >/dev/null 2>&1 || die "ZT_SCHEDULER=slurm: sbatch not found (run this on a Slurm login node)"
mkdir -p "$ZT_WORK/slurm"
# job_file NAME COMMAND...: a bash job script running COMMAND, its path on stdout.
job_file() {
  local path="$ZT_WORK/slurm/$1.sh"; shift
  { echo '#!/usr/bin/env bash'; echo 'set -euo pipefail'; printf '%q ' "$@"; echo; } > "$path"
  echo "$path"
}
read -r -a small_job_args <<< "${ZT_SBATCH_PREP_ARGS:-}"
read -r -a train_job_args <<< "${ZT_SBATCH_ARGS:-}"
small_job=(--nodes=1 --ntasks=1 "${small_job_args[@]}")
dependency=()
if [[ "$need_prep" == 1 ]]; then
  prep_job="$(sbatch --parsable --job-name="$step-prep" --output="$ZT_WORK/slurm/prep-%j.out" "${small_job[@]}" \
    "$(job_file prep "${prep[@]}")")" || die "sbatch of the prep job failed"
  prep_job="${prep_job%%;*}"
  say "submitted the prep job $prep_job"
  dependency=(--dependency="afterok:$prep_job" --kill-on-invalid-dep=yes)
fi
train_job="$(sbatch --parsable --job-name="$step-train" --output="$ZT_WORK/slurm/train-%j.out" "${dependency[@]}" \
  "${train_job_args[@]}" "$here/../slurm/train.sbatch")" || die "sbatch of the training job failed"
train_job="${train_job%%;*}"
say "submitted the training job $train_job${dependency:+ (after job ${prep_job})}"
if [[ "$ZT_EXPORT" != none ]]; then
  export_job="$(sbatch --parsable --job-name="$step-export" --output="$ZT_WORK/slurm/export-%j.out" \
    --dependency="afterok:$train_job" --kill-on-invalid-dep=yes "${small_job[@]}" \
    "$(job_file export "${export_cmd[@]}")")" || die "sbatch of the export job failed"
  export_job="${export_job%%;*}"
  say "submitted the export job $export_job (after job $train_job)"
fi
say "logs in $ZT_WORK/slurm/; squeue --me shows the chain"

#!/usr/bin/env bash
# job_scripts/deepspeed-chat/step1_sft.sh: DeepSpeed-Chat step 1 (supervised fine-tuning on
# Dahoas/rm-static) with zerotune, end to end: `zerotune prep` (DeepSpeed-Chat's sample layout,
# a training split and an evaluation split), `zerotune train` (perplexity on the evaluation split
# before training and after each epoch, "ppl: P, loss: L" as DeepSpeed-Chat's step-1 log), then
# `zerotune export` of the last checkpoint (an HF model in the run's dtype, or a PEFT adapter for
# LoRA runs). Here or as a chain of Slurm jobs (ZT_SCHEDULER=slurm): dschat_chain.sh, which also
# lists the environment it reads. docs/deepspeed-chat.md explains the runs of the study
# (opt-1.3b with ZeRO-2 on 2 nodes x 2 GPUs, llama2-7b with LoRA) and what to expect.
# Step 2 (a reward model on the same rows): step2_reward.sh.
#
#   ZT_MODEL=/models/opt-1.3b ZT_RM_STATIC=/data/rm-static/train.jsonl \
#   ZT_RM_STATIC_TEST=/data/rm-static/test.jsonl ZT_WORK=/runs/opt-sft \
#   ZT_HOSTFILE=hostfiles/two-nodes-two-gpus.txt job_scripts/deepspeed-chat/step1_sft.sh
#
#   ZT_SCHEDULER=slurm ZT_SBATCH_ARGS="--nodes=2 --ntasks-per-node=2 --gpus-per-node=2" \
#   ZT_MODEL=... ZT_RM_STATIC=... ZT_RM_STATIC_TEST=... ZT_WORK=... job_scripts/deepspeed-chat/step1_sft.sh
#
# This step's defaults:
#   ZT_DS_CONFIG  ds_config_step1_zero2.json (ZeRO-2, fp16, AdamW lr 9.65e-6, betas 0.9/0.95)
#   ZT_ARGS       "--epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500"
#   ZT_EXPORT     hf (default), peft (LoRA runs) or none
set -euo pipefail

job="deepspeed-chat/step1_sft.sh"
step=step1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
step_ds_config=ds_config_step1_zero2.json
step_args="--epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500"
step_prep=()
step_train=""
step_exports="hf peft none"
source "$here/dschat_chain.sh"

#!/usr/bin/env bash
# job_scripts/deepspeed-chat/step2_reward.sh: DeepSpeed-Chat step 2 (a reward model on the
# preference pairs of Dahoas/rm-static) with zerotune, end to end: `zerotune prep --pairs` (per
# row the prompt, the chosen and the rejected response; a training split and an evaluation
# split), `zerotune train --objective reward` (the decoder plus the value head v_head, the pairwise
# loss; the reward accuracy and the mean chosen/rejected scores on the evaluation split before
# training and after each epoch, as DeepSpeed-Chat's step-2 log prints them), then `zerotune
# export` of the last checkpoint as transformers' <Family>ForSequenceClassification (num_labels 1).
# Here or as a chain of Slurm jobs (ZT_SCHEDULER=slurm): dschat_chain.sh, which also lists the
# environment it reads. docs/reward-model.md: the objective, and DeepSpeed-Chat's opt-350m recipe.
#
#   ZT_MODEL=/models/opt-350m ZT_RM_STATIC=/data/rm-static/train.jsonl \
#   ZT_RM_STATIC_TEST=/data/rm-static/test.jsonl ZT_WORK=/runs/opt-rm ZT_NP=8 \
#   job_scripts/deepspeed-chat/step2_reward.sh
#
#   ZT_SCHEDULER=slurm ZT_SBATCH_ARGS="--nodes=1 --ntasks-per-node=8 --gpus-per-node=8" \
#   ZT_MODEL=... ZT_RM_STATIC=... ZT_RM_STATIC_TEST=... ZT_WORK=... job_scripts/deepspeed-chat/step2_reward.sh
#
# This step's defaults (DeepSpeed-Chat's training_scripts/opt/single_node/run_350m.sh for step 2):
#   ZT_DS_CONFIG  ds_config_step2_reward.json (ZeRO-0, fp16, micro-batch 8 pairs per GPU: global
#                 batch 64 on 8 GPUs, AdamW lr 5e-5, betas 0.9/0.95, weight decay 0.1)
#   ZT_ARGS       "--epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500"
#   ZT_EXPORT     hf (default: <Family>ForSequenceClassification) or none
# DeepSpeed-Chat's step 2 also passes --disable_dropout: OPT's residual dropout comes from the
# model's config.json (`dropout`), so set it to 0 there to train as it does.
set -euo pipefail

job="deepspeed-chat/step2_reward.sh"
step=step2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
step_ds_config=ds_config_step2_reward.json
step_args="--epochs 1 --lr-scheduler cosine --warmup-steps 0 --seed 1234 --save-every 500"
step_prep=(--pairs)
step_train="--objective reward"
step_exports="hf none"
source "$here/dschat_chain.sh"

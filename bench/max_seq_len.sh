#!/usr/bin/env bash
# The longest sequence each ZeRO stage x offload x activation-checkpointing choice fits into 24,
# 40 and 80 GiB per GPU (issue 20): llama-2-7b with LoRA r 8 on 1 and 2 GPUs, and full fine-tuning
# on 1 and 8 GPUs, DeepSpeed-Chat's step-1 JSON (bf16, AdamW, micro-batch 1). Computed by the
# memory model (`zerotune estimate --max-seq-len`), not measured. Usage: bench/max_seq_len.sh [build/zerotune]
set -euo pipefail
zerotune=${1:-build/zerotune}
model=job_scripts/deepspeed-chat/models/llama-2-7b
ds=job_scripts/deepspeed-chat/ds_config_llama2_lora.json
for run in "lora 1" "lora 2" "full 1" "full 8"; do
  read -r kind gpus <<< "$run"
  lora=()
  if [[ "$kind" == "lora" ]]; then lora=(--lora-r 8); fi
  echo "== llama-2-7b, $kind, $gpus GPU(s)"
  "$zerotune" estimate --model "$model" --deepspeed "$ds" "${lora[@]}" --gpus-per-node "$gpus" \
    --max-seq-len --device-memory 24GiB,40GiB,80GiB --seq-len-limit 65536
done

#!/usr/bin/env bash
# tests/cli/test_run_identity.sh (issue 17): what a resume must not silently accept, and the HF
# model at the end of training.
#  - A LoRA checkpoint resumed on another base model of the same shape (same config, other
#    weights): refused, naming both models (the manifest records a sampled digest of the weights).
#  - A full-fine-tuning DPO checkpoint resumed on another model of the same shape: refused (its
#    reference, a frozen copy of the initial weights, is rebuilt from --model).
#  - A checkpoint resumed on other data with the same number of samples: refused, naming
#    --allow-data-change, which then lets it continue.
#  - --save-hf-at-end: OUT/hf holds the model `zerotune export --format hf --merge` writes from the
#    final checkpoint (LoRA merged, bf16 as trained), byte for byte, and transformers loads it;
#    DeepSpeed's stage3_gather_16bit_weights_on_model_save asks for the same (with a note);
#    --no-save-at-end with it is an error.
# Usage: test_run_identity.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs

# --- another base under a LoRA checkpoint --------------------------------------------------------
"$ZEROTUNE" init --config "$REPO/data/tiny-llama/config.json" --out "$WORK/model-b" --seed 2 >/dev/null \
  || fatal "zerotune init of the second base failed"
L="$WORK/lora"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$L" --deepspeed "$WORK/ds.json" --max-steps 2 --lora-r 4 >"$WORK/lora.log" 2>&1 \
  || { cat "$WORK/lora.log"; fatal "the LoRA run failed"; }
expect_error lora-other-base "trained on the base weights of $M" "$WORK/model-b" "resume on the same base model" \
  -- train --model "$WORK/model-b" --data "$D" --out "$L" --deepspeed "$WORK/ds.json" --max-steps 4 --lora-r 4 --resume auto
"$ZEROTUNE" train --model "$M" --data "$D" --out "$L" --deepspeed "$WORK/ds.json" --max-steps 3 --lora-r 4 \
  --resume auto >"$WORK/lora-same.log" 2>&1
check lora-same-base-resumes $? "$WORK/lora-same.log" "the same base resumes"

# --- another model under a full-fine-tuning DPO checkpoint: its reference is rebuilt from --model --
"$PYTHON" - "$WORK/pairs/train-00000.h5" "$REPO/tests/mpi" >"$WORK/pairs.log" 2>&1 <<'PY' || fatal "writing pairs failed"
import sys
sys.path[:0] = [sys.argv[2], sys.argv[2].replace("/mpi", "/oracle")]
from test_reward_zero import write_pairs
write_pairs(sys.argv[1], seed=5)
PY
P="$WORK/dpo-full"
"$ZEROTUNE" train --objective dpo --model "$M" --data "$WORK/pairs" --out "$P" --max-steps 1 --micro-batch-size 4 \
  >"$WORK/dpo-full.log" 2>&1 || { cat "$WORK/dpo-full.log"; fatal "the full-fine-tuning DPO run failed"; }
expect_error dpo-reference-other-model "reference model is a frozen copy of the initial weights of $M" \
  "resume on the same model, which the reference is rebuilt from" \
  -- train --objective dpo --model "$WORK/model-b" --data "$WORK/pairs" --out "$P" --max-steps 2 --micro-batch-size 4 \
  --resume auto

# --- other data of the same size -----------------------------------------------------------------
"$PYTHON" "$MAKE_SHARD" --out "$WORK/data-b" --samples 16 --vocab 256 --min-len 8 --max-len 24 --seed 7 >/dev/null \
  || fatal "making the second data set failed"
F="$WORK/full"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$F" --deepspeed "$WORK/ds.json" --max-steps 2 >"$WORK/full.log" 2>&1 \
  || { cat "$WORK/full.log"; fatal "the full run failed"; }
expect_error data-changed "trained on other data" "--allow-data-change" \
  -- train --model "$M" --data "$WORK/data-b" --out "$F" --deepspeed "$WORK/ds.json" --max-steps 4 --resume auto
"$ZEROTUNE" train --model "$M" --data "$WORK/data-b" --out "$F" --deepspeed "$WORK/ds.json" --max-steps 4 --resume auto \
  --allow-data-change >"$WORK/allowed.log" 2>&1 && [[ "$(grep -c '"loss"' "$F/metrics.jsonl")" -eq 4 ]]
check data-change-allowed $? "$WORK/allowed.log" "--allow-data-change continues to step 4"

# --- the HF model at the end ---------------------------------------------------------------------
"$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["bf16"]={"enabled":True}; json.dump(d,open(sys.argv[2],"w"))' \
  "$WORK/ds.json" "$WORK/ds-bf16.json" || fatal "writing the bf16 DeepSpeed config failed"
H="$WORK/hf-run"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$H" --deepspeed "$WORK/ds-bf16.json" --max-steps 2 --lora-r 4 \
  --save-hf-at-end >"$WORK/hf.log" 2>&1 \
  && "$ZEROTUNE" export --checkpoint "$H/checkpoints/global_step2" --model "$M" --out "$WORK/exported" --format hf \
       --merge --dtype bf16 >>"$WORK/hf.log" 2>&1 \
  && cmp "$H/hf/model.safetensors" "$WORK/exported/model.safetensors" \
  && "$PYTHON" -c '
import sys, torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype="auto")
assert model.dtype == torch.bfloat16, model.dtype
assert not any("lora" in name for name, _ in model.named_parameters())
' "$H/hf" >>"$WORK/hf.log" 2>&1
check save-hf-at-end $? "$WORK/hf.log" "OUT/hf equals the merged bf16 export and loads in transformers"
"$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); d["zero_optimization"]={"stage":3,"stage3_gather_16bit_weights_on_model_save":True}; json.dump(d,open(sys.argv[2],"w"))' \
  "$WORK/ds-bf16.json" "$WORK/ds-gather.json" || fatal "writing the stage-3 DeepSpeed config failed"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/gather-run" --deepspeed "$WORK/ds-gather.json" --max-steps 1 \
  >"$WORK/gather.log" 2>&1 && [[ -f "$WORK/gather-run/hf/model.safetensors" ]] \
  && grep -q "stage3_gather_16bit_weights_on_model_save: the 16-bit HF model is written" "$WORK/gather.log"
check gather-16bit-key-writes-hf $? "$WORK/gather.log" "the DeepSpeed key writes OUT/hf and says so"
expect_error save-hf-without-final-checkpoint "--save-hf-at-end" "--no-save-at-end" \
  -- train --model "$M" --data "$D" --out "$WORK/o1" --max-steps 1 --save-hf-at-end --no-save-at-end

finish

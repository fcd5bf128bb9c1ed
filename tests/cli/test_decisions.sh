#!/usr/bin/env bash
# tests/cli/test_decisions.sh: zerotune says what it decided for a DeepSpeed JSON (issue 17):
# each "auto" resolved as the HF Trainer resolves it and printed once, each flag that overrides
# a JSON value printed, flops_profiler.profile_step taken as --profile-step, and the dtype keys
# that state what zerotune does (communication_data_type / data_types.grad_accum_dtype fp32)
# accepted, other values refused.
# Usage: test_decisions.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs

# write_ds FILE PYTHON_CODE: the good DeepSpeed JSON edited by the code (on `d`).
write_ds() {
  "$PYTHON" - "$WORK/ds.json" "$1" "$2" <<'PY' || fatal "writing $1 failed"
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"), indent=2)
PY
}
run_json() { "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1/run.json" "$2"; }

# --- "auto" values: resolved as HF does, one line each -----------------------------------------
write_ds "$WORK/ds-auto.json" 'd["optimizer"]["params"].update(lr="auto", weight_decay="auto"); d["gradient_clipping"] = "auto"; d["train_micro_batch_size_per_gpu"] = "auto"; d["scheduler"]["params"]["warmup_max_lr"] = "auto"'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/auto" --deepspeed "$WORK/ds-auto.json" --max-steps 1 \
  --micro-batch-size 4 >"$WORK/auto.log" 2>&1
status=$?
lr="$(run_json "$WORK/auto" 'd["optimizer"]["lr"]' 2>>"$WORK/auto.log")"
clip="$(run_json "$WORK/auto" 'd["gradient_clipping"]' 2>>"$WORK/auto.log")"
[[ "$status" -eq 0 && "$lr" == "5e-05" && "$clip" == "1.0" ]] \
  && [[ "$(grep -c 'optimizer.params.lr: auto -> 5e-05 (HF default learning_rate)' "$WORK/auto.log")" -eq 1 ]] \
  && grep -q 'gradient_clipping: auto -> 1 (HF default max_grad_norm)' "$WORK/auto.log" \
  && grep -q 'train_micro_batch_size_per_gpu: auto -> 4 (--micro-batch-size)' "$WORK/auto.log" \
  && grep -q 'optimizer.params.weight_decay: auto -> 0 (HF default weight_decay)' "$WORK/auto.log" \
  && grep -q 'scheduler.params.warmup_max_lr: auto -> the optimizer' "$WORK/auto.log"
check auto-values-resolved-and-said $? "$WORK/auto.log" "want lr 5e-05 and clipping 1.0 in run.json, one line per auto; got exit $status, lr '$lr', clipping '$clip'"

"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/auto-lr" --deepspeed "$WORK/ds-auto.json" --max-steps 1 \
  --lr 2e-4 >"$WORK/auto-lr.log" 2>&1
status=$?
lr="$(run_json "$WORK/auto-lr" 'd["optimizer"]["lr"]' 2>>"$WORK/auto-lr.log")"
[[ "$status" -eq 0 && "$lr" == "0.0002" ]] && grep -q 'optimizer.params.lr: auto -> 0.0002 (--lr)' "$WORK/auto-lr.log" \
  && grep -q 'train_micro_batch_size_per_gpu: auto -> 8 (HF default per_device_train_batch_size)' "$WORK/auto-lr.log"
check auto-lr-from-flag $? "$WORK/auto-lr.log" "want lr 2e-4 from --lr, said so (exit $status, lr '$lr')"

# --- A flag that overrides a JSON value says so ------------------------------------------------
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/override" --deepspeed "$WORK/ds.json" --max-steps 1 \
  --lr 1e-4 --gradient-clipping 0.5 >"$WORK/override.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && grep -q 'optimizer.params.lr 0.003 overridden by --lr 0.0001' "$WORK/override.log" \
  && grep -q 'gradient_clipping 1.0 overridden by --gradient-clipping 0.5' "$WORK/override.log"
check flag-overrides-said $? "$WORK/override.log" "want one line per overriding flag (exit $status)"

# --- flops_profiler.profile_step -> --profile-step ----------------------------------------------
write_ds "$WORK/ds-prof.json" 'd["flops_profiler"] = {"enabled": True, "profile_step": 2, "module_depth": -1, "top_modules": 1, "detailed": True}'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/prof" --deepspeed "$WORK/ds-prof.json" --max-steps 2 >"$WORK/prof.log" 2>&1
status=$?
step="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$WORK/prof/profile.json" 2>>"$WORK/prof.log")"
[[ "$status" -eq 0 && "$step" == "2" ]] && grep -q 'flops_profiler.profile_step 2 -> --profile-step 2' "$WORK/prof.log"
check flops-profiler-profile-step $? "$WORK/prof.log" "want OUT/profile.json of step 2 (exit $status, step '$step')"

# --- dtype keys that state what zerotune does ----------------------------------------------------
write_ds "$WORK/ds-fp32.json" 'd["communication_data_type"] = "fp32"; d["data_types"] = {"grad_accum_dtype": "fp32"}'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/fp32" --deepspeed "$WORK/ds-fp32.json" --max-steps 1 >"$WORK/fp32.log" 2>&1
check fp32-dtype-keys-accepted $? "$WORK/fp32.log" "communication_data_type/grad_accum_dtype fp32 refused"
write_ds "$WORK/ds-bf16comm.json" 'd["communication_data_type"] = "bf16"'
expect_error communication-bf16-refused "$WORK/ds-bf16comm.json" "communication_data_type \"bf16\" is not supported" "fp32" \
  -- train --model "$M" --data "$D" --out "$WORK/o1" --deepspeed "$WORK/ds-bf16comm.json" --max-steps 1

# --- An accelerate YAML where the DeepSpeed JSON belongs: refused, saying how to carry it over --
cat >"$WORK/accelerate.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  gradient_accumulation_steps: 2
  offload_optimizer_device: cpu
  zero_stage: 2
mixed_precision: bf16
num_processes: 2
YAML
expect_error accelerate-yaml-refused "$WORK/accelerate.yaml" "an accelerate config (YAML)" "zero_stage: 2  ->  --zero-stage 2" \
  "--offload-optimizer cpu" "\"bf16\": {\"enabled\": true}" \
  -- train --model "$M" --data "$D" --out "$WORK/o2" --deepspeed "$WORK/accelerate.yaml" --max-steps 1

finish

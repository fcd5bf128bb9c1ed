#!/usr/bin/env bash
# tests/cli/test_decisions.sh: zerotune says what it decided for a DeepSpeed JSON (issue 17):
# each "auto" resolved as the HF Trainer resolves it and printed once, each flag that overrides
# a JSON value printed, flops_profiler.profile_step taken as --profile-step, and the dtype keys:
# data_types.grad_accum_dtype fp32/bf16/fp16 (16-bit: with that compute dtype) and a
# communication_data_type equal to it accepted; the combinations that make no sense refused.
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
  && [[ "$(grep -c 'optimizer.params.lr: auto -> 5e-05 (HF fills learning_rate, default 5e-5)' "$WORK/auto.log")" -eq 1 ]] \
  && grep -q 'gradient_clipping: auto -> 1 (HF fills max_grad_norm, default 1.0)' "$WORK/auto.log" \
  && grep -q 'train_micro_batch_size_per_gpu: auto -> 4 (--micro-batch-size; HF: per_device_train_batch_size)' "$WORK/auto.log" \
  && grep -q 'optimizer.params.weight_decay: auto -> 0 (HF fills weight_decay, default 0)' "$WORK/auto.log" \
  && grep -q 'scheduler.params.warmup_max_lr: auto -> the optimizer' "$WORK/auto.log"
check auto-values-resolved-and-said $? "$WORK/auto.log" "want lr 5e-05 and clipping 1.0 in run.json, one line per auto; got exit $status, lr '$lr', clipping '$clip'"

"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/auto-lr" --deepspeed "$WORK/ds-auto.json" --max-steps 1 \
  --lr 2e-4 >"$WORK/auto-lr.log" 2>&1
status=$?
lr="$(run_json "$WORK/auto-lr" 'd["optimizer"]["lr"]' 2>>"$WORK/auto-lr.log")"
[[ "$status" -eq 0 && "$lr" == "0.0002" ]] && grep -q 'optimizer.params.lr: auto -> 0.0002 (--lr; HF: learning_rate)' "$WORK/auto-lr.log" \
  && grep -q 'train_micro_batch_size_per_gpu: auto -> 8 (HF fills per_device_train_batch_size, default 8)' "$WORK/auto-lr.log"
check auto-lr-from-flag $? "$WORK/auto-lr.log" "want lr 2e-4 from --lr, said so (exit $status, lr '$lr')"

# --- Precision: --bf16 / --fp16 resolve "enabled": "auto" as HF's TrainingArguments do (issue 35) ----
# The precision is the first line a run prints; each "auto" says what HF fills; a flag that
# contradicts an explicit "enabled" is refused; warmup_num_steps "auto" is HF's warmup_steps.
write_ds "$WORK/ds-prec.json" 'd["bf16"] = {"enabled": "auto"}; d["fp16"] = {"enabled": "auto"}; d["scheduler"]["params"]["warmup_num_steps"] = "auto"'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/prec-none" --deepspeed "$WORK/ds-prec.json" --max-steps 1 >"$WORK/prec-none.log" 2>&1
status=$?
dtype="$(run_json "$WORK/prec-none" 'd["compute_dtype"]' 2>>"$WORK/prec-none.log")"
[[ "$status" -eq 0 && "$dtype" == "fp32" ]] \
  && head -1 "$WORK/prec-none.log" | grep -q "^note: precision: fp32 (no --bf16/--fp16 and no \"enabled\": true in the JSON" \
  && grep -q 'bf16.enabled: auto -> false (no --bf16; HF fills TrainingArguments.bf16, default False)' "$WORK/prec-none.log" \
  && grep -q 'fp16.enabled: auto -> false (no --fp16' "$WORK/prec-none.log" \
  && grep -q 'scheduler.params.warmup_num_steps: auto -> 0 (HF fills warmup_steps, default 0), which DeepSpeed' "$WORK/prec-none.log"
check precision-auto-without-flag-is-fp32 $? "$WORK/prec-none.log" "want fp32 said first (exit $status, compute_dtype '$dtype')"

"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/prec-bf16" --deepspeed "$WORK/ds-prec.json" --max-steps 1 --bf16 \
  --warmup-steps 3 >"$WORK/prec-bf16.log" 2>&1
status=$?
dtype="$(run_json "$WORK/prec-bf16" 'd["compute_dtype"]' 2>>"$WORK/prec-bf16.log")"
warmup="$(run_json "$WORK/prec-bf16" 'd["scheduler"]["warmup_num_steps"]' 2>>"$WORK/prec-bf16.log")"
[[ "$status" -eq 0 && "$dtype" == "bf16" && "$warmup" == "3" ]] \
  && head -1 "$WORK/prec-bf16.log" | grep -q "^note: precision: bf16 (fp32 master weights) (--bf16)" \
  && grep -q 'bf16.enabled: auto -> true (--bf16; HF fills TrainingArguments.bf16)' "$WORK/prec-bf16.log" \
  && grep -q 'warmup_num_steps: auto -> 3 (--warmup-steps' "$WORK/prec-bf16.log"
check precision-bf16-flag $? "$WORK/prec-bf16.log" "want bf16 and warm-up 3 (exit $status, compute_dtype '$dtype', warmup '$warmup')"

"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/prec-fp16" --max-steps 1 --fp16 >"$WORK/prec-fp16.log" 2>&1
status=$?
dtype="$(run_json "$WORK/prec-fp16" 'd["compute_dtype"]' 2>>"$WORK/prec-fp16.log")"
[[ "$status" -eq 0 && "$dtype" == "fp16" ]] && head -1 "$WORK/prec-fp16.log" | grep -q "^note: precision: fp16 .*(--fp16)"
check precision-fp16-flag-without-json $? "$WORK/prec-fp16.log" "want fp16 (exit $status, compute_dtype '$dtype')"

write_ds "$WORK/ds-bf16-off.json" 'd["bf16"] = {"enabled": False}'
expect_error precision-bf16-contradicts-json "--bf16 contradicts $WORK/ds-bf16-off.json: bf16.enabled is false" \
  -- train --model "$M" --data "$D" --out "$WORK/o-p1" --deepspeed "$WORK/ds-bf16-off.json" --max-steps 1 --bf16
write_ds "$WORK/ds-bf16-on.json" 'd["bf16"] = {"enabled": True}'
expect_error precision-fp16-contradicts-json "--fp16 contradicts $WORK/ds-bf16-on.json: bf16.enabled is true" \
  -- train --model "$M" --data "$D" --out "$WORK/o-p2" --deepspeed "$WORK/ds-bf16-on.json" --max-steps 1 --fp16
expect_error precision-both-flags "--bf16 and --fp16 exclude each other" \
  -- train --model "$M" --data "$D" --out "$WORK/o-p3" --max-steps 1 --bf16 --fp16

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
expect_error communication-bf16-refused "$WORK/ds-bf16comm.json" "communication_data_type \"bf16\" is not supported" \
  "data_types.grad_accum_dtype fp32" "reduces gradients in their own dtype" \
  -- train --model "$M" --data "$D" --out "$WORK/o1" --deepspeed "$WORK/ds-bf16comm.json" --max-steps 1

# --- data_types.grad_accum_dtype bf16/fp16: 16-bit gradients (issue 18) ---------------------------
# Accepted with the compute dtype it names, in DeepSpeed's spellings, said in one line; run.json
# records it; communication_data_type may say the same; a flag overrides it and says so.
write_ds "$WORK/ds-gbf16.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "bfloat16"}; d["communication_data_type"] = "torch.bfloat16"'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/gbf16" --deepspeed "$WORK/ds-gbf16.json" --max-steps 2 >"$WORK/gbf16.log" 2>&1
status=$?
dtype="$(run_json "$WORK/gbf16" 'd["grad_accum_dtype"]' 2>>"$WORK/gbf16.log")"
[[ "$status" -eq 0 && "$dtype" == "bf16" ]] \
  && [[ "$(grep -c 'data_types.grad_accum_dtype "bfloat16" -> --grad-accum-dtype bf16 (gradients held, accumulated and reduced in bf16' "$WORK/gbf16.log")" -eq 1 ]] \
  && grep -q 'gradients [0-9.]* MiB (bf16 ' "$WORK/gbf16.log"
check grad-accum-bf16-accepted $? "$WORK/gbf16.log" "want a bf16-gradient run said once (exit $status, run.json '$dtype')"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/gbf16-flag" --deepspeed "$WORK/ds-gbf16.json" --max-steps 1 \
  --grad-accum-dtype fp32 >"$WORK/gbf16-flag.log" 2>&1
status=$?
dtype="$(run_json "$WORK/gbf16-flag" 'd["grad_accum_dtype"]' 2>>"$WORK/gbf16-flag.log")"
[[ "$status" -eq 0 && "$dtype" == "fp32" ]] \
  && grep -q 'data_types.grad_accum_dtype "bfloat16" overridden by --grad-accum-dtype "fp32"' "$WORK/gbf16-flag.log"
check grad-accum-flag-overrides $? "$WORK/gbf16-flag.log" "want --grad-accum-dtype fp32 to win, said (exit $status, '$dtype')"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/gbf16-same" --deepspeed "$WORK/ds-gbf16.json" --max-steps 1 \
  --grad-accum-dtype bf16 >"$WORK/gbf16-same.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && ! grep -q 'overridden by --grad-accum-dtype' "$WORK/gbf16-same.log"
check grad-accum-flag-same-dtype-silent $? "$WORK/gbf16-same.log" "\"bfloat16\" and --grad-accum-dtype bf16 are one dtype: no override line (exit $status)"
write_ds "$WORK/ds-gfp16.json" 'd["fp16"] = {"enabled": True, "loss_scale": 1024}; d["data_types"] = {"grad_accum_dtype": "half"}'
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/gfp16" --deepspeed "$WORK/ds-gfp16.json" --max-steps 2 >"$WORK/gfp16.log" 2>&1
status=$?
dtype="$(run_json "$WORK/gfp16" 'd["grad_accum_dtype"]' 2>>"$WORK/gfp16.log")"
[[ "$status" -eq 0 && "$dtype" == "fp16" ]]
check grad-accum-fp16-accepted $? "$WORK/gfp16.log" "want an fp16-gradient run (exit $status, run.json '$dtype')"

# Refused, each naming the key and why: a dtype that is no dtype, 16-bit gradients without that
# compute dtype, with an optimizer fused into backward or a compressed one, and a communication
# dtype that differs from the gradients'.
write_ds "$WORK/ds-gint8.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "int8"}'
expect_error grad-accum-int8-refused "data_types.grad_accum_dtype must be one of" "\"bf16\" (\"bfloat16\"" "got \"int8\"" \
  -- train --model "$M" --data "$D" --out "$WORK/o3" --deepspeed "$WORK/ds-gint8.json" --max-steps 1
write_ds "$WORK/ds-gfp32c.json" 'd["data_types"] = {"grad_accum_dtype": "bf16"}'
expect_error grad-accum-bf16-fp32-compute-refused "data_types.grad_accum_dtype \"bf16\" needs bf16 compute" \
  "the run computes in fp32" -- train --model "$M" --data "$D" --out "$WORK/o4" --deepspeed "$WORK/ds-gfp32c.json" --max-steps 1
write_ds "$WORK/ds-gmix.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "fp16"}'
expect_error grad-accum-fp16-bf16-compute-refused "data_types.grad_accum_dtype \"fp16\" needs fp16 compute" \
  "the run computes in bf16" -- train --model "$M" --data "$D" --out "$WORK/o5" --deepspeed "$WORK/ds-gmix.json" --max-steps 1
for optimizer in LOMO AdaLomo; do
  write_ds "$WORK/ds-g$optimizer.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "bf16"}; d["gradient_accumulation_steps"] = 1; d["optimizer"] = {"type": "'"$optimizer"'", "params": {"lr": 1e-3}}'
  expect_error "grad-accum-bf16-$optimizer-refused" "data_types.grad_accum_dtype \"bf16\" with optimizer" \
    "inside backward" "no gradient buffer" \
    -- train --model "$M" --data "$D" --out "$WORK/o-$optimizer" --deepspeed "$WORK/ds-g$optimizer.json" --max-steps 1
done
for optimizer in OneBitAdam ZeroOneAdam; do
  write_ds "$WORK/ds-g$optimizer.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "bf16"}; d["optimizer"] = {"type": "'"$optimizer"'", "params": {"lr": 1e-3}}'
  expect_error "grad-accum-bf16-$optimizer-refused" "data_types.grad_accum_dtype \"bf16\" with optimizer" \
    "compressed steps" "in fp32" \
    -- train --model "$M" --data "$D" --out "$WORK/o-$optimizer" --deepspeed "$WORK/ds-g$optimizer.json" --max-steps 1
done
write_ds "$WORK/ds-gcomm.json" 'd["bf16"] = {"enabled": True}; d["data_types"] = {"grad_accum_dtype": "bf16"}; d["communication_data_type"] = "fp32"'
expect_error grad-accum-bf16-comm-fp32-refused "communication_data_type \"fp32\" is not supported with data_types.grad_accum_dtype bf16" \
  -- train --model "$M" --data "$D" --out "$WORK/o6" --deepspeed "$WORK/ds-gcomm.json" --max-steps 1
expect_error grad-accum-flag-refused "--grad-accum-dtype must be one of" "not 'fp8'" \
  -- train --model "$M" --data "$D" --out "$WORK/o7" --deepspeed "$WORK/ds.json" --max-steps 1 --grad-accum-dtype fp8
expect_error grad-accum-flag-fp32-compute-refused "data_types.grad_accum_dtype \"bf16\" needs bf16 compute" \
  -- train --model "$M" --data "$D" --out "$WORK/o8" --deepspeed "$WORK/ds.json" --max-steps 1 --grad-accum-dtype bf16
expect_error estimate-grad-accum-refused "data_types.grad_accum_dtype \"bf16\" needs bf16 compute" \
  -- estimate --params 7e9 --compute-dtype fp32 --grad-accum-dtype bf16
"$ZEROTUNE" estimate --params 7e9 --grad-accum-dtype bf16 >"$WORK/est.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && grep -qE '^0 +none +none +\| +26\.[0-9]+ GiB +13\.[0-9]+ GiB +13\.[0-9]+ GiB' "$WORK/est.log"
check estimate-grad-accum-table $? "$WORK/est.log" "want fp32 vs bf16 gradient bytes side by side (exit $status)"

# --- estimate --objective reward (issue 33 item 5): a micro-batch of pairs is twice the rows, plus
# the value head (hidden_size fp32 master weights, 2 x that in Adam's state) -----------------------
for objective in sft reward; do
  "$ZEROTUNE" estimate --model "$M" --seq-len 64 --micro-batch 4 --objective "$objective" --json \
    >"$WORK/est-$objective.json" 2>"$WORK/est-$objective.err"
done
"$PYTHON" - "$WORK/est-sft.json" "$WORK/est-reward.json" "$M/config.json" >"$WORK/est-objective.log" 2>&1 <<'PY'
import json, sys
sft, reward = (json.load(open(path))["rows"][0]["zerotune_run"]["device_peak_terms"] for path in sys.argv[1:3])
hidden = json.load(open(sys.argv[3]))["hidden_size"]
ratio = reward["activations"] / sft["activations"]
assert 1.99 < ratio < 2.01, f"reward's activations are {ratio:.3f} x sft's, not 2x"
assert reward["master weights"] - sft["master weights"] == 4 * hidden, "the value head's master weights"
assert reward["optimizer state"] - sft["optimizer state"] == 8 * hidden, "the value head's Adam state"
assert json.load(open(sys.argv[2]))["run"]["objective"] == "reward"
print(f"reward activations {ratio:.4f} x sft's; value head {4 * hidden} B of master weights")
PY
check estimate-objective-reward $? "$WORK/est-objective.log" "estimate --objective reward: 2x the activations and the value head"
# autotune --objective reward: the experiments train the reward model on pairs, each predicted as
# measured (the memory model steps on the objective's micro-batches), and the optimal command
# keeps the objective.
"$PYTHON" - "$WORK/pairs/train-00000.h5" "$REPO/tests/mpi" >"$WORK/pairs.log" 2>&1 <<'PY'
import sys
sys.path[:0] = [sys.argv[2], sys.argv[2].replace("/mpi", "/oracle")]
from test_reward_zero import write_pairs
write_pairs(sys.argv[1], seed=5)
PY
"$ZEROTUNE" autotune --objective reward --model "$M" --data "$WORK/pairs" --out "$WORK/autotune-reward" \
  --max-micro-batch 2 --stages 0,2 --checkpointing off --no-offload >"$WORK/autotune-reward.log" 2>&1 \
  && "$PYTHON" - "$WORK/autotune-reward" >>"$WORK/autotune-reward.log" 2>&1 <<'PY'
import json, os, sys
out = sys.argv[1]
command = open(os.path.join(out, "autotuning_results", "cmd_optimal.txt")).read()
assert "--objective reward" in command, command
ran = [e for e in json.load(open(os.path.join(out, "autotuning_results", "results.json")))["experiments"] if e["ran"]]
assert len(ran) >= 2, ran
for e in ran:
    run = json.load(open(os.path.join(out, "autotuning_exps", e["name"], "run.json")))
    assert run["objective"] == "reward", e["name"]
    predicted, measured = e["memory_predicted_bytes"], e["memory_measured_bytes"]
    assert abs(predicted - measured) <= 0.05 * measured, (e["name"], predicted, measured)
print(f"{len(ran)} reward experiments, predictions within 5%; {command.strip()}")
PY
check autotune-objective-reward $? "$WORK/autotune-reward.log" "autotune --objective reward: reward experiments, predicted as measured"
expect_error estimate-objective-unknown "--objective 'ppo': unknown objective" \
  -- estimate --model "$M" --objective ppo
expect_error estimate-objective-needs-model "--objective reward needs --model" \
  -- estimate --params 7e9 --objective reward

# --- estimate --objective dpo (issue 33 item 5): under LoRA, twice sft's activations (the reference
# forward reuses the policy's buffers) and no added parameters; under full fine-tuning the reference
# model (a frozen copy) is a term of its own and adds no master weights or optimizer state ------
for objective in sft dpo; do
  "$ZEROTUNE" estimate --model "$M" --seq-len 64 --micro-batch 4 --lora-r 8 --objective "$objective" --json \
    >"$WORK/est-lora-$objective.json" 2>"$WORK/est-lora-$objective.err"
done
"$PYTHON" - "$WORK/est-lora-sft.json" "$WORK/est-lora-dpo.json" >"$WORK/est-dpo.log" 2>&1 <<'PY'
import json, sys
sft, dpo = (json.load(open(path))["rows"][0]["zerotune_run"]["device_peak_terms"] for path in sys.argv[1:3])
ratio = dpo["activations"] / sft["activations"]
assert 1.99 < ratio < 2.01, f"dpo's activations are {ratio:.3f} x sft's, not 2x"
assert dpo["master weights"] == sft["master weights"], "dpo adds no parameters"
assert dpo["optimizer state"] == sft["optimizer state"], "dpo adds no optimizer state"
assert json.load(open(sys.argv[2]))["run"]["objective"] == "dpo"
print(f"dpo activations {ratio:.4f} x sft's under LoRA")
PY
check estimate-objective-dpo $? "$WORK/est-dpo.log" "estimate --objective dpo: 2x the activations, nothing added"
for objective in sft dpo; do
  "$ZEROTUNE" estimate --model "$M" --seq-len 64 --micro-batch 4 --objective "$objective" --json \
    >"$WORK/est-full-$objective.json" 2>"$WORK/est-full-$objective.err"
done
"$PYTHON" - "$WORK/est-full-sft.json" "$WORK/est-full-dpo.json" >"$WORK/est-dpo-full.log" 2>&1 <<'PY'
import json, sys
sft, dpo = (json.load(open(path))["rows"][0]["zerotune_run"]["device_peak_terms"] for path in sys.argv[1:3])
assert "reference model" not in sft, sft
assert 0 < dpo["reference model"] <= dpo["parameters"], f"the frozen copy: {dpo}"
assert dpo["master weights"] == sft["master weights"], "the reference adds no master weights"
assert dpo["optimizer state"] == sft["optimizer state"], "the reference adds no optimizer state"
print(f"full fine-tuning dpo: reference model {dpo['reference model']} B beside parameters {dpo['parameters']} B")
PY
check estimate-objective-dpo-full $? "$WORK/est-dpo-full.log" "estimate --objective dpo without --lora-r: the reference model counted"

# --- estimate --pipeline-stages (issue 32 item 7): the memory model steps every stage; the heaviest
# holds about half the parameters of P = 1; a stage s > 0 keeps the inputs [B*T, C] of its micro-
# batches in flight, min(P - s, M) under 1F1B and M under GPipe (the first stage re-embeds its
# tokens); --device cpu counts the CPU backend's MPI exchanges, posted ahead (docs/pipeline.md), where
# 1F1B holds one input more, min(P - s + 1, M), and both schedules the same send and gradient buffers --
est_pipe() { "$ZEROTUNE" estimate --model "$M" --gpus-per-node 2 --grad-accum 4 --seq-len 64 --micro-batch 2 --device cpu --json "$@"; }
est_pipe >"$WORK/est-p1.json" 2>"$WORK/est-pipe.err" \
  && est_pipe --pipeline-stages 2 >"$WORK/est-p2.json" 2>>"$WORK/est-pipe.err" \
  && est_pipe --pipeline-stages 2 --pipeline-schedule gpipe >"$WORK/est-p2g.json" 2>>"$WORK/est-pipe.err" \
  && "$PYTHON" - "$WORK/est-p1.json" "$WORK/est-p2.json" "$WORK/est-p2g.json" "$M/config.json" >"$WORK/est-pipe.log" 2>&1 <<'PY'
import json, sys
p1, p2, gpipe = (json.load(open(path)) for path in sys.argv[1:4])
hidden = json.load(open(sys.argv[4]))["hidden_size"]
whole = p1["rows"][0]["zerotune_run"]
run, run_gpipe = p2["rows"][0]["zerotune_run"], gpipe["rows"][0]["zerotune_run"]
assert p2["run"]["pipeline_stages"] == 2 and len(run["stages"]) == 2, run.keys()
assert all(row["stage"] < 3 for row in p2["rows"]), "ZeRO-3 rows are left out under a pipeline"
heaviest = run["stages"][run["pipeline_stage"]]
assert heaviest["host_peak_bytes"] == max(s["host_peak_bytes"] for s in run["stages"]) == run["host_peak_bytes"]
share = heaviest["host_peak_terms"]["parameters"] / whole["host_peak_terms"]["parameters"]
assert 0.4 < share < 0.6, f"the heaviest stage holds {share:.3f} of the parameters, not about half"
total = sum(s["host_peak_terms"]["parameters"] for s in run["stages"])
assert abs(total - whole["host_peak_terms"]["parameters"]) <= 256, (total, whole["host_peak_terms"])
B, T, M, P = 2, 64, 4, 2
first = [s["host_peak_bytes"] for s in (run["stages"][0], run_gpipe["stages"][0])]
assert first[0] == first[1], f"the first stage keeps no inputs under either schedule: {first}"
extra = run_gpipe["stages"][1]["host_peak_bytes"] - run["stages"][1]["host_peak_bytes"]
last = P - 1
want = (M - min(P - last + 1, M)) * B * T * hidden * 2  # bf16 inputs; 1F1B's posted ahead (MPI)
assert extra == want, f"GPipe's last stage holds {extra} B more than 1F1B's, the formula says {want}"
print(f"heaviest stage {run['pipeline_stage']}: {share:.3f} of the parameters; GPipe - 1F1B = {extra} B")
PY
check estimate-pipeline-stages $? "$WORK/est-pipe.log" "estimate --pipeline-stages 2: half the parameters, in-flight inputs by schedule"
expect_error estimate-pipeline-divides "--pipeline-stages 2 does not divide the 1 ranks of --gpus-per-node x --nodes" \
  -- estimate --model "$M" --pipeline-stages 2
# autotune --try-pipeline-stages 1,2 on 2 ranks: P = 2 experiments run, each predicted (its heaviest
# stage) within 5% of the measured peak (the trainer records the heaviest rank's under a pipeline).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe \
  "$ZEROTUNE" autotune --model "$M" --data "$D" --out "$WORK/autotune-pipe" --device cpu --max-micro-batch 2 \
  --stages 0 --checkpointing off --no-offload --try-pipeline-stages 1,2 --grad-accum 2 --trial-steps 2 \
  >"$WORK/autotune-pipe.log" 2>&1 \
  && "$PYTHON" - "$WORK/autotune-pipe" >>"$WORK/autotune-pipe.log" 2>&1 <<'PY'
import json, os, sys
out = sys.argv[1]
experiments = json.load(open(os.path.join(out, "autotuning_results", "results.json")))["experiments"]
piped = [e for e in experiments if e["pipeline_stages"] == 2 and e["ran"]]
assert piped and all(e["name"].endswith("_pp2") for e in piped), experiments
assert any(e["pipeline_stages"] == 1 and e["ran"] for e in experiments), "P = 1 is tried too"
for e in piped:
    run = json.load(open(os.path.join(out, "autotuning_exps", e["name"], "run.json")))
    assert run["pipeline"]["stages"] == 2, run["pipeline"]
    predicted, measured = e["memory_predicted_bytes"], e["memory_measured_bytes"]
    assert abs(predicted - measured) <= 0.05 * measured, (e["name"], predicted, measured)
print(f"{len(piped)} P = 2 experiments predicted within 5%")
PY
check autotune-pipeline-stages $? "$WORK/autotune-pipe.log" "autotune --try-pipeline-stages 1,2: P = 2 tried, predicted as measured"
# ZT_PIPE_TRACE (issue 32 item 8, bench/pipe_engine.sh): each rank's engine timeline per step. Under
# 1F1B on 2 stages, M forwards and backwards per rank, stage 0 recomputes each forward before its
# backward and stage 1 none; stage 0's activation bytes equal stage 1's gradient bytes, rows x C x 4.
ZT_PIPE_TRACE="$WORK/trace" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  mpirun -np 2 --oversubscribe "$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/trace-run" --device cpu \
  --pipeline-stages 2 --micro-batch-size 1 --grad-accum 4 --max-steps 2 --no-save-at-end >"$WORK/trace.log" 2>&1 \
  && "$PYTHON" - "$WORK/trace" "$M/config.json" >>"$WORK/trace.log" 2>&1 <<'PY'
import json, sys
hidden = json.load(open(sys.argv[2]))["hidden_size"]
ranks = [[json.loads(line) for line in open(f"{sys.argv[1]}/rank{rank}.jsonl")] for rank in (0, 1)]
assert [len(steps) for steps in ranks] == [2, 2], "one line per step and rank"
for first, last in zip(*ranks):
    for line, recomputes in ((first, 4), (last, 0)):
        ops = [event["op"] for event in line["events"]]
        assert ops.count("forward") == 4 and ops.count("backward") == 4, ops
        assert ops.count("recompute") == recomputes, (line["stage"], ops)
        assert line["compute_seconds"] + line["wait_seconds"] <= line["step_seconds"] + 1e-6, line
    assert first["bytes_sent"] == last["bytes_sent"] > 0 and first["bytes_sent"] % (hidden * 4) == 0, (first, last)
print("trace: 2 steps x 2 ranks, bytes", [line["bytes_sent"] for line in ranks[0]])
PY
check pipeline-trace $? "$WORK/trace.log" "ZT_PIPE_TRACE: the engine's timeline per rank and step"

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

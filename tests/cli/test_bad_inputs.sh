#!/usr/bin/env bash
# tests/cli/test_bad_inputs.sh: every kind of bad input to `zerotune train` and `zerotune inspect`
# ends with a non-zero exit and one clear message naming the file and the problem, never with a
# crash, an abort or library noise. Each case starts from a good tiny model and data set and
# breaks one thing.
# Usage: test_bad_inputs.sh ZEROTUNE_BINARY PYTHON   (PYTHON: the venv with h5py and safetensors)
set -uo pipefail

ZEROTUNE="$1"
PYTHON="$2"
# The work directory, fatal, expect_error (a run that must fail with one clear message naming
# the problem, without crash or library noise) and the good inputs: cli_common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# A copy of the good model directory, to break one thing in.
copy_model() { cp -r "$WORK/model" "$WORK/$1"; }
# edit_json FILE CODE: runs the python CODE on `d`, the parsed JSON of FILE, and writes d back.
edit_json() {
  "$PYTHON" - "$1" "$2" <<'EOF' || fatal "editing $1 failed"
import json, sys
path, code = sys.argv[1], sys.argv[2]
d = json.load(open(path))
exec(code)
json.dump(d, open(path, "w"), indent=2)
EOF
}

# ---------------------------------------------------------------------------------------------
# The good inputs: a tiny LLaMA, a small data set, a DeepSpeed JSON; a run with them succeeds.
make_good_inputs

if ! "$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/out-good" --deepspeed "$WORK/ds.json" --max-steps 1 \
     >"$WORK/good.stdout" 2>"$WORK/good.stderr"; then
  cat "$WORK/good.stderr"
  fatal "the baseline run on good inputs failed, so the cases below would prove nothing"
fi
echo "ok   baseline run on good inputs"

# ---------------------------------------------------------------------------------------------
# config.json
copy_model cfg-no-type; edit_json "$WORK/cfg-no-type/config.json" 'del d["model_type"]'
expect_error config-missing-model-type "$WORK/cfg-no-type/config.json" "key 'model_type' is missing" \
  -- train --model "$WORK/cfg-no-type" --data "$D" --out "$WORK/o1" --max-steps 1

copy_model cfg-gpt5; edit_json "$WORK/cfg-gpt5/config.json" 'd["model_type"] = "gpt5"'
expect_error config-unknown-model-type "$WORK/cfg-gpt5/config.json" "key 'model_type' = \"gpt5\": not supported" \
  -- train --model "$WORK/cfg-gpt5" --data "$D" --out "$WORK/o2" --max-steps 1

# A sliding window zerotune's attention does not have, or a learned position table, shorter than
# the data's sequences: refused at start, naming the key, the limit and the fix.
copy_model cfg-window; edit_json "$WORK/cfg-window/config.json" 'd["model_type"] = "mistral"; d["sliding_window"] = 4'
expect_error config-sliding-window-shorter-than-data "sliding_window = 4" "no sliding window" "--max-seq-len 4" \
  -- train --model "$WORK/cfg-window" --data "$D" --out "$WORK/o-window" --max-steps 1
copy_model cfg-positions; edit_json "$WORK/cfg-positions/config.json" 'd["model_type"] = "opt"; d["max_position_embeddings"] = 4'
expect_error config-learned-positions-shorter-than-data "max_position_embeddings = 4" "learned position table" \
  -- train --model "$WORK/cfg-positions" --data "$D" --out "$WORK/o-positions" --max-steps 1

copy_model cfg-yarn; edit_json "$WORK/cfg-yarn/config.json" 'd["rope_scaling"] = {"type": "yarn", "factor": 2.0}'
expect_error config-rope-scaling-yarn "$WORK/cfg-yarn/config.json" "rope_scaling" "rope scaling type 'yarn' is not implemented" \
  -- train --model "$WORK/cfg-yarn" --data "$D" --out "$WORK/o3" --max-steps 1

copy_model cfg-gelu; edit_json "$WORK/cfg-gelu/config.json" 'd["hidden_act"] = "gelu"'
expect_error config-hidden-act-gelu "$WORK/cfg-gelu/config.json" "key 'hidden_act' = \"gelu\"" "not implemented" \
  -- train --model "$WORK/cfg-gelu" --data "$D" --out "$WORK/o4" --max-steps 1

copy_model cfg-badjson; printf '{"model_type": "llama", "hidden_size": 64,,}\n' > "$WORK/cfg-badjson/config.json"
expect_error config-invalid-json "$WORK/cfg-badjson/config.json" "invalid JSON" \
  -- train --model "$WORK/cfg-badjson" --data "$D" --out "$WORK/o5" --max-steps 1

# ---------------------------------------------------------------------------------------------
# DeepSpeed JSON
cp "$WORK/ds.json" "$WORK/ds-typo.json"
edit_json "$WORK/ds-typo.json" 'd["train_micro_batch_size_per_gpus"] = d.pop("train_micro_batch_size_per_gpu")'
expect_error ds-typo-key "$WORK/ds-typo.json" "train_micro_batch_size_per_gpus" "did you mean" "'train_micro_batch_size_per_gpu'" \
  -- train --model "$M" --data "$D" --out "$WORK/o6" --max-steps 1 --deepspeed "$WORK/ds-typo.json"

cp "$WORK/ds.json" "$WORK/ds-onebitlamb.json"
edit_json "$WORK/ds-onebitlamb.json" 'd["optimizer"] = {"type": "OneBitLamb", "params": {"lr": 1e-3}}'
expect_error ds-unsupported-optimizer "$WORK/ds-onebitlamb.json" "OneBitLamb" "not supported" \
  -- train --model "$M" --data "$D" --out "$WORK/o7" --max-steps 1 --deepspeed "$WORK/ds-onebitlamb.json"

cp "$WORK/ds.json" "$WORK/ds-sparse.json"
edit_json "$WORK/ds-sparse.json" 'd["sparse_attention"] = {"mode": "fixed", "block": 16}'
expect_error ds-unsupported-key "$WORK/ds-sparse.json" "sparse_attention" "not supported" \
  -- train --model "$M" --data "$D" --out "$WORK/o8" --max-steps 1 --deepspeed "$WORK/ds-sparse.json"

# Keys for tooling zerotune does not use are accepted and reported once as ignored.
cp "$WORK/ds.json" "$WORK/ds-tooling.json"
edit_json "$WORK/ds-tooling.json" 'd["wandb"] = {"enabled": False}; d["tensorboard"] = {"enabled": False, "output_path": "tb"}'
cases=$((cases + 1))
if "$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/o-tooling" --deepspeed "$WORK/ds-tooling.json" --max-steps 1 \
     >"$WORK/tooling.out" 2>&1 \
   && [[ "$(grep -c wandb "$WORK/tooling.out")" -eq 1 ]] && grep wandb "$WORK/tooling.out" | grep -qF ignored \
   && ! grep -qE "$NOISE" "$WORK/tooling.out"; then
  echo "ok   ds-tooling-keys-ignored"
else
  failures=$((failures + 1))
  echo "FAIL ds-tooling-keys-ignored: want exit 0 and one line naming wandb as ignored; output:"
  sed 's/^/       | /' "$WORK/tooling.out" | head -20
fi

# Monitors that send to a web service (compute nodes often have no network): refused when
# enabled, pointing to the file monitors (issue 35 item 6).
cp "$WORK/ds.json" "$WORK/ds-wandb.json"
edit_json "$WORK/ds-wandb.json" 'd["wandb"] = {"enabled": True, "project": "sft"}'
expect_error ds-wandb-enabled "$WORK/ds-wandb.json" "wandb.enabled is true" "Weights & Biases" "no network" \
  '"csv_monitor": {"enabled": true, ...}' '"tensorboard": {"enabled": true, ...}' \
  -- train --model "$M" --data "$D" --out "$WORK/o-wandb" --max-steps 1 --deepspeed "$WORK/ds-wandb.json"
cp "$WORK/ds.json" "$WORK/ds-comet.json"
edit_json "$WORK/ds-comet.json" 'd["comet"] = {"enabled": True}'
expect_error ds-comet-enabled "$WORK/ds-comet.json" "comet.enabled is true" "csv_monitor" \
  -- train --model "$M" --data "$D" --out "$WORK/o-comet" --max-steps 1 --deepspeed "$WORK/ds-comet.json"
# A monitor directory that cannot be made: the key and the path are named.
cp "$WORK/ds.json" "$WORK/ds-tb-path.json"
edit_json "$WORK/ds-tb-path.json" 'd["tensorboard"] = {"enabled": True, "output_path": "'"$WORK"'/ds.json/tb"}'
expect_error ds-tensorboard-path-unwritable "tensorboard.output_path: cannot create the directory $WORK/ds.json/tb/DeepSpeedJobName" \
  -- train --model "$M" --data "$D" --out "$WORK/o-tb-path" --max-steps 1 --deepspeed "$WORK/ds-tb-path.json"

# 10 != 4 (micro) * 2 (accumulation) * 1 (world size) = 8: the message shows the arithmetic.
cp "$WORK/ds.json" "$WORK/ds-batch.json"
edit_json "$WORK/ds-batch.json" 'd["train_batch_size"] = 10'
expect_error ds-inconsistent-batch "$WORK/ds-batch.json" "train_batch_size 10 !=" "train_micro_batch_size_per_gpu 4" "gradient_accumulation_steps 2" "= 8" \
  -- train --model "$M" --data "$D" --out "$WORK/o9" --max-steps 1 --deepspeed "$WORK/ds-batch.json"

# ---------------------------------------------------------------------------------------------
# safetensors
copy_model st-shape
"$PYTHON" - "$WORK/st-shape/model.safetensors" <<'EOF' || fatal "rewriting the safetensors file failed"
import sys, numpy as np
from safetensors.numpy import load_file, save_file
tensors = load_file(sys.argv[1])
tensors["model.layers.0.self_attn.q_proj.weight"] = np.zeros((64, 32), dtype=np.float32)
save_file(tensors, sys.argv[1], metadata={"format": "pt"})
EOF
expect_error safetensors-wrong-shape "$WORK/st-shape/model.safetensors" \
  "tensor model.layers.0.self_attn.q_proj.weight has shape [64, 32] but the model config needs [64, 64]" \
  -- train --model "$WORK/st-shape" --data "$D" --out "$WORK/o10" --max-steps 1

copy_model st-truncated
truncate -s "$(( $(stat -c %s "$WORK/st-truncated/model.safetensors") / 2 ))" "$WORK/st-truncated/model.safetensors"
expect_error safetensors-truncated "$WORK/st-truncated/model.safetensors" "truncated" \
  -- train --model "$WORK/st-truncated" --data "$D" --out "$WORK/o11" --max-steps 1

# Split into two shards with an index, then lose the second shard.
copy_model st-sharded
"$PYTHON" - "$WORK/st-sharded" <<'EOF' || fatal "sharding the model failed"
import json, os, sys
from safetensors.numpy import load_file, save_file
folder = sys.argv[1]
tensors = load_file(os.path.join(folder, "model.safetensors"))
names = sorted(tensors)
halves = [names[: len(names) // 2], names[len(names) // 2 :]]
weight_map = {}
for i, half in enumerate(halves):
    shard = f"model-{i + 1:05d}-of-00002.safetensors"
    save_file({n: tensors[n] for n in half}, os.path.join(folder, shard), metadata={"format": "pt"})
    weight_map.update({n: shard for n in half})
total = sum(t.nbytes for t in tensors.values())
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
          open(os.path.join(folder, "model.safetensors.index.json"), "w"), indent=2)
os.remove(os.path.join(folder, "model.safetensors"))
os.remove(os.path.join(folder, "model-00002-of-00002.safetensors"))
EOF
expect_error safetensors-missing-shard "$WORK/st-sharded/model.safetensors.index.json" \
  "shard model-00002-of-00002.safetensors" "is missing" \
  -- train --model "$WORK/st-sharded" --data "$D" --out "$WORK/o12" --max-steps 1

# ---------------------------------------------------------------------------------------------
# data
mkdir -p "$WORK/data-foreign"
"$PYTHON" - "$WORK/data-foreign/train-00000.h5" <<'EOF' || fatal "writing the foreign HDF5 file failed"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:  # an HDF5 file, but not a token shard: no attributes
    f["input_ids"] = np.arange(64, dtype=np.int64).reshape(4, 16)
EOF
expect_error data-foreign-hdf5 "$WORK/data-foreign/train-00000.h5" "not a zerotune token shard" \
  -- train --model "$M" --data "$WORK/data-foreign" --out "$WORK/o13" --max-steps 1

mkdir -p "$WORK/data-text"
echo "this is not an HDF5 file" > "$WORK/data-text/train-00000.h5"
expect_error data-text-file "$WORK/data-text/train-00000.h5" "cannot open as an HDF5 file" \
  -- train --model "$M" --data "$WORK/data-text" --out "$WORK/o14" --max-steps 1

mkdir -p "$WORK/data-empty"
expect_error data-empty-dir "$WORK/data-empty" "holds no token shards" \
  -- train --model "$M" --data "$WORK/data-empty" --out "$WORK/o15" --max-steps 1

# Token ids up to 511 for a model with 256 embedding rows.
"$PYTHON" "$MAKE_SHARD" --out "$WORK/data-vocab512" --samples 16 --vocab 512 --min-len 8 --max-len 24 --seed 0 >/dev/null \
  || fatal "making the vocab-512 data set failed"
expect_error data-vocab-larger-than-model "$WORK/data-vocab512" "vocab_size" "512" "256" \
  -- train --model "$M" --data "$WORK/data-vocab512" --out "$WORK/o16" --max-steps 1

expect_error eval-data-tokenized-differently "$WORK/data-vocab512" "$D" "tokenized differently" \
  -- train --model "$M" --data "$D" --eval-data "$WORK/data-vocab512" --out "$WORK/o20" --max-steps 1

# ---------------------------------------------------------------------------------------------
# zerotune inspect
expect_error inspect-missing-dir "$WORK/no-such-data" "no such file or directory" \
  -- inspect "$WORK/no-such-data"

expect_error inspect-dir-without-shards "$WORK/data-empty" "holds no token shards" "zerotune prep" \
  -- inspect "$WORK/data-empty"

expect_error inspect-model-dir "$M" "holds no token shards" \
  -- inspect "$M"

expect_error inspect-foreign-hdf5 "$WORK/data-foreign/train-00000.h5" "not a zerotune token shard" \
  -- inspect "$WORK/data-foreign"

expect_error inspect-sample-out-of-range "$D" "--sample 16 is outside [0, 16)" \
  -- inspect "$D" --sample 16

expect_error inspect-no-dir "no directory given" \
  -- inspect --sample 1

# ---------------------------------------------------------------------------------------------
# command line
expect_error missing-model-flag "--model is required" \
  -- train --data "$D" --out "$WORK/o17" --max-steps 1

expect_error lora-target-matches-nothing "LoRA target 'foo_proj' matches no linear module" \
  -- train --model "$M" --data "$D" --out "$WORK/o18" --max-steps 1 --lora-r 8 --lora-targets foo_proj

printf 'model = %s\ndata = %s\nmax-steps = 1\nlora-rank = 8\n' "$M" "$D" > "$WORK/run.ini"
expect_error ini-unknown-option "$WORK/run.ini" "unrecognised option 'lora-rank'" \
  -- train --config "$WORK/run.ini" --out "$WORK/o19"

# ---------------------------------------------------------------------------------------------
# estimate (helper zeroside): `zerotune estimate` input errors, and one good run whose JSON
# carries DeepSpeed's stage-2 figure for 7e9 parameters on 8 GPUs (2 N + int(18 N / 8)).
expect_error estimate-no-model "give the model: --model DIR or --params N" \
  -- estimate --gpus-per-node 8

expect_error estimate-model-and-params "give either --model or --params, not both" \
  -- estimate --model "$M" --params 7e9

expect_error estimate-negative-params "--params = -7e9: must be a count >= 1" \
  -- estimate --params=-7e9

expect_error estimate-zero-gpus "--gpus-per-node = 0: must be >= 1" \
  -- estimate --params 7e9 --gpus-per-node=0

expect_error estimate-unknown-model-type "$WORK/cfg-gpt5/config.json" "model_type" \
  -- estimate --model "$WORK/cfg-gpt5"

expect_error estimate-lora-target "LoRA target 'foo_proj' matches no linear module" \
  -- estimate --model "$M" --lora-r 8 --lora-targets foo_proj

cases=$((cases + 1))
if "$ZEROTUNE" estimate --params 7e9 --largest-layer-params 131072000 --gpus-per-node 8 --json >"$WORK/estimate.json" 2>&1 \
   && "$PYTHON" -c 'import json, sys; rows = json.load(open(sys.argv[1]))["rows"]; row = [r for r in rows if r["stage"] == 2 and r["offload_optimizer"] == "none"][0]; sys.exit(row["deepspeed"]["gpu_bytes"] != 29750000000)' "$WORK/estimate.json"; then
  echo "ok   estimate-good-json"
else
  failures=$((failures + 1))
  echo "FAIL estimate-good-json: want exit 0 and DeepSpeed's stage-2 gpu_bytes 29750000000; output:"
  sed 's/^/       | /' "$WORK/estimate.json" | head -20
fi

# ---------------------------------------------------------------------------------------------
# Distributed training, checkpoints and export: bad flags and inputs.
expect_error train-bad-device "--device must be auto, cpu or cuda, not 'tpu'" \
  -- train --model "$M" --data "$D" --out "$WORK/o-dev" --device tpu
# No GPU here: a CPU build says it has no CUDA backend, a CUDA build that it sees no device.
expect_error train-cuda-without-gpu "--device cuda: " \
  -- train --model "$M" --data "$D" --out "$WORK/o-cuda" --device cuda --max-steps 1
expect_error train-memory-limit-on-cpu "--device-memory-limit limits a GPU's memory: it does not go with --device cpu" \
  -- train --model "$M" --data "$D" --out "$WORK/o-limit" --device cpu --device-memory-limit 1GiB
expect_error train-bad-memory-limit "--device-memory-limit='1.5GiB' is not a memory size" \
  -- train --model "$M" --data "$D" --out "$WORK/o-limit" --device-memory-limit 1.5GiB
expect_error train-bad-comm "--comm must be auto, nccl or mpi, not 'gloo'" \
  -- train --model "$M" --data "$D" --out "$WORK/o-comm" --comm gloo
expect_error train-bad-zero-stage "--zero-stage must be 0, 1, 2 or 3, not 4" \
  -- train --model "$M" --data "$D" --out "$WORK/o-z4" --zero-stage 4
expect_error train-offload-stage0 "offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3" \
  -- train --model "$M" --data "$D" --out "$WORK/o-off0" --offload-optimizer cpu --max-steps 1
expect_error train-profiler-steps-reversed "--cuda-profiler-steps '4:2': FIRST 4 comes after LAST 2" \
  -- train --model "$M" --data "$D" --out "$WORK/o-prof1" --cuda-profiler-steps 4:2 --max-steps 4
expect_error train-profiler-steps-not-a-step "--cuda-profiler-steps 'x': expected FIRST:LAST or N, steps counted from 1" \
  -- train --model "$M" --data "$D" --out "$WORK/o-prof2" --cuda-profiler-steps x --max-steps 4
expect_error train-profiler-steps-beyond-the-run "--cuda-profiler-steps ends at step 9, beyond this run's last step 2" \
  -- train --model "$M" --data "$D" --out "$WORK/o-prof3" --cuda-profiler-steps 3:9 --max-steps 2
expect_error train-resume-missing "--resume $WORK/no-such-checkpoint: not a complete checkpoint" \
  -- train --model "$M" --data "$D" --out "$WORK/o-res" --resume "$WORK/no-such-checkpoint"
expect_error export-not-a-checkpoint "manifest.json: missing (not a complete checkpoint)" \
  -- export --checkpoint "$WORK" --model "$M" --out "$WORK/o-exp"
expect_error export-bad-format "--format must be hf, peft or dschat, not 'onnx'" \
  -- export --checkpoint "$WORK" --model "$M" --out "$WORK/o-exp2" --format onnx

# Red-team findings (issue 35 item 10): each refused at once, naming the flag and its limit.
expect_error train-quantize-empty "--quantize: 4-bit quantization type '' (empty) is not supported (nf4 or fp4)" \
  -- train --model "$M" --data "$D" --out "$WORK/o-q" --lora-r 4 --quantize "" --max-steps 1
expect_error estimate-quantize-empty "--quantize: 4-bit quantization type '' (empty) is not supported" \
  -- estimate --model "$M" --lora-r 4 --quantize ""
expect_error estimate-seq-len-above-positions "--seq-len = 99999999999: above the model's limit" \
  "max_position_embeddings = 128" "give --seq-len <= 128" \
  -- estimate --model "$M" --seq-len 99999999999
expect_error estimate-seq-len-just-above-positions "--seq-len = 129: above the model's limit" \
  -- estimate --model "$M" --seq-len 129
expect_error estimate-device-memory-negative "--device-memory '-5GiB' is not a size like" \
  -- estimate --model "$M" --max-seq-len --device-memory -5GiB
expect_error estimate-device-memory-zero "--device-memory '0' must be positive" \
  -- estimate --model "$M" --max-seq-len --device-memory 24GiB,0
if grep -q "max shard size" "$WORK/estimate-device-memory-negative.stderr"; then
  echo "FAIL estimate-device-memory-wording: the message speaks of another option (max shard size)"
  failures=$((failures + 1)); cases=$((cases + 1))
else
  echo "ok   estimate-device-memory-wording"; cases=$((cases + 1))
fi
expect_error autotune-max-micro-batch-zero "--max-micro-batch must be >= 1" \
  -- autotune --model "$M" --data "$D" --out "$WORK/o-at" --max-micro-batch 0
if grep -q "samples do not fill" "$WORK/autotune-max-micro-batch-zero.stderr"; then
  echo "FAIL autotune-max-micro-batch-zero-wording: reported as a data problem"
  failures=$((failures + 1)); cases=$((cases + 1))
else
  echo "ok   autotune-max-micro-batch-zero-wording"; cases=$((cases + 1))
fi
# issue 35 item 2: a config-only model directory (the planning case) stops before any work.
mkdir -p "$WORK/config-only" && cp "$M/config.json" "$WORK/config-only/"
start=$SECONDS
expect_error autotune-config-only-model "no model weights" "zerotune estimate --model" "zerotune init --config" \
  -- autotune --model "$WORK/config-only" --data "$D" --out "$WORK/o-at3"
if (( SECONDS - start > 5 )) || [[ -e "$WORK/o-at3/autotuning_exps" ]]; then
  echo "FAIL autotune-config-only-model-at-once: took $((SECONDS - start)) s or started experiments"
  failures=$((failures + 1))
else
  echo "ok   autotune-config-only-model-at-once"; cases=$((cases + 1))
fi
expect_error autotune-device-memory-negative "--device-memory '-5GiB' is not a size like" \
  -- autotune --model "$M" --data "$D" --out "$WORK/o-at2" --device-memory -5GiB

# Objectives (issue 33): an unknown one, and the reward objective on samples instead of pairs.
expect_error train-unknown-objective "--objective 'ppo': unknown objective" "sft" "reward" "dpo" \
  -- train --model "$M" --data "$D" --out "$WORK/o-obj" --objective ppo --max-steps 1
expect_error train-reward-on-samples "holds samples, not preference pairs" "zerotune prep --pairs" \
  -- train --model "$M" --data "$D" --out "$WORK/o-obj2" --objective reward --max-steps 1

# Commands that skip MPI (init, prep, inspect, report) take their rank from the launcher: rank 1
# of a launch writes nothing, and a rank variable that is not a number is named.
OMPI_COMM_WORLD_RANK=1 "$ZEROTUNE" init --config "$REPO/data/tiny-llama/config.json" --out "$WORK/rank1-model" \
  >"$WORK/rank1.log" 2>&1
status=$?
[[ "$status" -eq 0 && ! -e "$WORK/rank1-model" ]]
check init-on-launcher-rank-1-writes-nothing $? "$WORK/rank1.log" "want exit 0 and no model; got exit $status"
SLURM_PROCID=one expect_error launcher-rank-not-a-number "the launcher's SLURM_PROCID=one is not a rank" \
  -- prep --help

# ---------------------------------------------------------------------------------------------
finish

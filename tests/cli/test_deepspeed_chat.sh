#!/usr/bin/env bash
# tests/cli/test_deepspeed_chat.sh: DeepSpeed-Chat steps 1 and 2 end to end without a batch system
# (the Slurm chain: tests/system/test_deepspeed_chat_slurm.py), on data/rm-static-sample.jsonl
# with the tour's tiny LLaMA and a SentencePiece tokenizer trained on the sample (spm_train).
#  1. prep's evaluation split and --data-split pick exactly DeepSpeed-Chat's rows: a transcription
#     of its get_raw_dataset_split_index (numpy.random.RandomState(seed).shuffle, round(), the
#     shift of the boundaries) names the rows; prep of just those rows must give the same shards,
#     byte for byte in tokens, masks and offsets: --eval-fraction 0.1 ("9,1" of a dataset without
#     its own eval rows) with --data-split 2,4,4 phase 1 (seed 1234, DeepSpeed-Chat's default), and
#     --eval-input (rm-static's own test rows) with --data-split 2,4,4 phase 2 and --seed 7;
#  2. train --eval-at-start evaluates once (not again on resume);
#     bad --eval-*/--data-* values, train --eval-at-start without evaluation data, export --dtype
#     fp8, step1_sft.sh's bad ZT_SCHEDULER/ZT_EVAL_FRACTION/ZT_RM_STATIC_TEST: one clear error each;
#  3. job_scripts/deepspeed-chat/step1_sft.sh with rm-static-style test rows (ZT_RM_STATIC_TEST) and
#     an fp16 DeepSpeed config: eval records before the first step and at the end of the epoch,
#     eval_ppl = exp(eval_loss), "ppl: P, loss: L" on the console, the export in fp16 (safetensors
#     F16, torch_dtype float16); `export --dtype fp32` still writes fp32, and a bf16 LoRA run
#     exports its merged model and its PEFT adapter in bf16 by default;
#  4. job_scripts/deepspeed-chat/step2_reward.sh (the same chain, dschat_chain.sh) with the same rows:
#     pair shards for both splits, reward evaluations (accuracy, chosen/rejected scores) before the
#     first step and at the end, the export a LlamaForSequenceClassification with score.weight and
#     no LM head; its export formats are refused by name (peft).
# Usage: test_deepspeed_chat.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail

ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
SAMPLE="$REPO/data/rm-static-sample.jsonl"
command -v spm_train >/dev/null || fatal "spm_train not found (Debian package sentencepiece)"
"$PYTHON" -c 'import numpy, h5py' || fatal "the test Python lacks numpy or h5py (scripts/setup.sh installs them)"

# --- the model and its tokenizer ----------------------------------------------------------------
M="$WORK/model"
"$ZEROTUNE" init --config "$REPO/data/tour-llama/config.json" --out "$M" --seed 3 >/dev/null || fatal "zerotune init failed"
"$PYTHON" - "$SAMPLE" "$WORK/corpus.txt" <<'EOF_PY' || fatal "writing the corpus failed"
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
EOF_PY
spm_train --input="$WORK/corpus.txt" --model_prefix="$M/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2 \
  || fatal "spm_train failed"
head -n 250 "$SAMPLE" >"$WORK/train.jsonl"
tail -n 50 "$SAMPLE" >"$WORK/test.jsonl"

# --- 1. the rows DeepSpeed-Chat picks -------------------------------------------------------------
# split_case NAME INPUT EVAL_INPUT(or -) HELD_OUT_FRACTION DATA_SPLIT(or -) PHASE SEED -- PREP_FLAGS...
split_case() {
  local name="$1" input="$2" eval_input="$3" fraction="$4" data_split="$5" phase="$6" seed="$7"
  shift 8
  local dir="$WORK/split-$name" log="$WORK/split-$name.log"
  mkdir -p "$dir"
  {
    "$ZEROTUNE" prep --input "$input" --tokenizer "$M" --out "$dir/prep" --max-seq-len 256 "$@" \
    && "$PYTHON" - "$input" "$eval_input" "$fraction" "$data_split" "$phase" "$seed" "$dir" <<'EOF_PY' \
    && "$ZEROTUNE" prep --input "$dir/expected-train.jsonl" --tokenizer "$M" --out "$dir/expected" --split train --max-seq-len 256 \
    && "$ZEROTUNE" prep --input "$dir/expected-eval.jsonl" --tokenizer "$M" --out "$dir/expected" --split eval --max-seq-len 256 \
    && "$PYTHON" - "$dir/prep" "$dir/expected" <<'EOF_CMP'
# The rows as DeepSpeed-Chat's data_utils.get_raw_dataset_split_index and raw_datasets choose them.
import json, sys
import numpy as np
input_path, eval_path, fraction, data_split, phase, seed, out = sys.argv[1:8]
fraction, phase, seed = float(fraction), int(phase), int(seed)

def split_index(size, weights, index):
    weights = [w / sum(weights) for w in weights]
    bounds = [0]
    for w in weights:
        bounds.append(bounds[-1] + int(round(w * float(size))))
    diff = bounds[-1] - size
    bounds = [bounds[0]] + [b - diff for b in bounds[1:]]
    order = np.arange(size, dtype=np.uint32)
    np.random.RandomState(seed=seed).shuffle(order)
    return order[bounds[index]:bounds[index + 1]].tolist()

def phase_rows(rows):  # --data_split: Subset(part, portion phase-1 of a permutation of the part)
    if data_split == "-":
        return rows
    return [rows[i] for i in split_index(len(rows), [float(w) for w in data_split.split(",")], phase - 1)]

lines = open(input_path).readlines()
if eval_path == "-":  # "9,1"-style hold-out of the input's rows
    train = phase_rows(split_index(len(lines), [1 - fraction, fraction], 0))
    held = phase_rows(split_index(len(lines), [1 - fraction, fraction], 1))
    eval_lines = [lines[i] for i in sorted(held)]
else:
    eval_all = open(eval_path).readlines()
    train = phase_rows(list(range(len(lines))))
    eval_lines = [eval_all[i] for i in sorted(phase_rows(list(range(len(eval_all)))))]
open(f"{out}/expected-train.jsonl", "w").writelines(lines[i] for i in sorted(train))
open(f"{out}/expected-eval.jsonl", "w").writelines(eval_lines)
print(f"expected: {len(train)} training rows, {len(eval_lines)} evaluation rows")
EOF_PY
import glob, sys
import h5py, numpy as np
got, expected = sys.argv[1:3]
for split in ("train", "eval"):
    a, b = sorted(glob.glob(f"{got}/{split}-*.h5")), sorted(glob.glob(f"{expected}/{split}-*.h5"))
    assert len(a) == len(b) == 1, (split, a, b)
    with h5py.File(a[0]) as fa, h5py.File(b[0]) as fb:
        for name in ("tokens", "loss_mask", "offsets"):
            assert np.array_equal(fa[name][:], fb[name][:]), f"{split} {name} differ"
        print(f"{split}: {len(fa['offsets']) - 1} samples, the same as prep of DeepSpeed-Chat's rows")
EOF_CMP
  } >"$log" 2>&1
  check "rows-$name" $? "$log" "prep's splits are not DeepSpeed-Chat's rows (prep $*)"
}
split_case hold-out-data-split "$SAMPLE" - 0.1 2,4,4 1 1234 -- --eval-fraction 0.1 --data-split 2,4,4
split_case test-rows-phase-2 "$WORK/train.jsonl" "$WORK/test.jsonl" 0 2,4,4 2 7 -- --eval-input "$WORK/test.jsonl" \
  --data-split 2,4,4 --data-phase 2 --seed 7

# --- 2. bad values --------------------------------------------------------------------------------
P=(prep --input "$SAMPLE" --tokenizer "$M" --out "$WORK/bad-prep")
expect_error eval-fraction-one "--eval-fraction 1" "below 1" -- "${P[@]}" --eval-fraction 1
expect_error eval-input-and-fraction "--eval-input and --eval-fraction" -- "${P[@]}" --eval-fraction 0.1 --eval-input "$SAMPLE"
expect_error eval-split-is-split "--eval-split 'train'" "must differ from --split" -- "${P[@]}" --eval-fraction 0.1 --eval-split train
expect_error eval-input-missing "--eval-input $WORK/none.jsonl" "no such file" -- "${P[@]}" --eval-input "$WORK/none.jsonl"
expect_error data-phase-beyond "--data-phase 4" "1..3" -- "${P[@]}" --data-split 2,4,4 --data-phase 4
expect_error data-split-text "--data-split '2,x'" "e.g. 2,4,4" -- "${P[@]}" --data-split 2,x
expect_error data-phase-alone "--data-phase 2" "applies with --data-split" -- "${P[@]}" --data-phase 2
expect_error seed-negative "--seed -1" "0 .. 4294967295" -- "${P[@]}" --eval-fraction 0.1 --seed -1
[[ ! -e "$WORK/bad-prep" ]]
check bad-prep-leaves-nothing $? "" "a refused prep left $WORK/bad-prep behind"
"$ZEROTUNE" prep --input "$SAMPLE" --tokenizer "$M" --out "$WORK/data" --max-seq-len 256 --eval-fraction 0.1 >"$WORK/data.log" 2>&1 \
  || fatal "prep of the sample failed"
expect_error eval-at-start-without-data "--eval-at-start needs --eval-data or --eval-split" -- \
  train --model "$M" --data "$WORK/data" --split train --out "$WORK/bad-train" --eval-at-start
expect_error export-dtype "--dtype must be auto, fp32, bf16 or fp16, not 'fp8'" -- \
  export --checkpoint "$WORK/none" --model "$M" --out "$WORK/bad-export" --dtype fp8

# step1_sft.sh's own inputs: exit status 2 and a message naming the variable, before any work.
# script_refuses NAME PHRASE VAR=VALUE...
script_refuses() {
  local name="$1" phrase="$2" log="$WORK/script-$1.log"
  shift 2
  env ZT_BIN="$ZEROTUNE" ZT_MODEL="$M" ZT_RM_STATIC="$WORK/train.jsonl" ZT_WORK="$WORK/refused" "$@" \
    bash "$REPO/job_scripts/deepspeed-chat/step1_sft.sh" >"$log" 2>&1
  local status=$?
  [[ "$status" -eq 2 ]] && grep -qF -- "$phrase" "$log" && [[ ! -e "$WORK/refused" ]]
  check "step1-refuses-$name" $? "$log" "want exit status 2 (got $status), '$phrase' and no ZT_WORK made"
}
script_refuses scheduler "ZT_SCHEDULER='pbs': none or slurm" ZT_SCHEDULER=pbs
script_refuses eval-fraction "ZT_EVAL_FRACTION='1.5': a share of the rows in [0, 1)" ZT_EVAL_FRACTION=1.5
script_refuses test-rows-missing "ZT_RM_STATIC_TEST='$WORK/none.jsonl': no such file" ZT_RM_STATIC_TEST="$WORK/none.jsonl"

# --eval-at-start evaluates the untrained model once: a resumed run does not evaluate again at its start.
R="$WORK/resumed"
"$ZEROTUNE" train --model "$M" --data "$WORK/data" --split train --eval-split eval --eval-at-start --out "$R" \
  --max-steps 1 --seed 1 >"$WORK/resumed.log" 2>&1 \
  && "$ZEROTUNE" train --model "$M" --data "$WORK/data" --split train --eval-split eval --eval-at-start --out "$R" \
       --max-steps 2 --seed 1 --resume auto >>"$WORK/resumed.log" 2>&1 \
  && [[ "$(grep -c '"eval_loss"' "$R/metrics.jsonl")" -eq 1 ]] && grep -q '"eval_loss".*"step":0' "$R/metrics.jsonl"
check eval-at-start-once $? "$WORK/resumed.log" "want one eval record (step 0) after a run and its resumption"

# --- 3. step1_sft.sh: eval split, ppl before and after, the export in the run's dtype ------------
"$PYTHON" - "$REPO/data/tiny-llama/ds_config.json" "$WORK" <<'EOF_PY' || fatal "writing the DeepSpeed configs failed"
import json, sys
config = json.load(open(sys.argv[1]))
config.update(train_micro_batch_size_per_gpu=8, gradient_accumulation_steps=1)
config["fp16"] = {"enabled": True, "initial_scale_power": 4}  # a small first scale: no skipped steps
json.dump(config, open(f"{sys.argv[2]}/ds-fp16.json", "w"))
del config["fp16"]
config["bf16"] = {"enabled": True}
json.dump(config, open(f"{sys.argv[2]}/ds-bf16.json", "w"))
EOF_PY
S="$WORK/step1"
ZT_BIN="$ZEROTUNE" ZT_MODEL="$M" ZT_RM_STATIC="$WORK/train.jsonl" ZT_RM_STATIC_TEST="$WORK/test.jsonl" ZT_WORK="$S" \
  ZT_DS_CONFIG="$WORK/ds-fp16.json" ZT_MAX_SEQ_LEN=128 ZT_NP=1 ZT_CPU_BIND=none ZT_OMP_THREADS=2 ZT_PREFLIGHT=0 \
  ZT_PREP_ARGS="--data-split 2,4,4" ZT_ARGS="--epochs 1 --seed 1" \
  bash "$REPO/job_scripts/deepspeed-chat/step1_sft.sh" >"$WORK/step1.log" 2>&1
check step1-script $? "$WORK/step1.log" "step1_sft.sh failed"
"$PYTHON" - "$S" "$WORK/step1.log" >"$WORK/step1-check.log" 2>&1 <<'EOF_PY'
import json, math, re, struct, sys
work, log = sys.argv[1], open(sys.argv[2]).read()
records = [json.loads(line) for line in open(f"{work}/run/metrics.jsonl")]
steps = [r for r in records if "loss" in r]
evals = [r for r in records if "eval_loss" in r]
assert steps, "no training steps"
assert [r["step"] for r in evals] == [0, steps[-1]["step"]], f"eval records at steps {[r['step'] for r in evals]}"
for r in evals:
    assert abs(r["eval_ppl"] - math.exp(r["eval_loss"])) <= 1e-9 * r["eval_ppl"], r
assert evals[1]["eval_loss"] < evals[0]["eval_loss"], "the eval loss did not go down"
printed = re.findall(r"eval at step (\d+) \(epoch [0-9.]+\) \| ppl: ([0-9.]+), loss: ([0-9.]+)", log)
assert [int(p[0]) for p in printed] == [r["step"] for r in evals], printed
assert "split 'eval' written" in log and "--data-split 2,4,4, phase 1" in log, "prep's summary"
with open(f"{work}/export/model.safetensors", "rb") as stream:
    header = json.loads(stream.read(struct.unpack("<Q", stream.read(8))[0]))
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"F16"}, dtypes
assert json.load(open(f"{work}/export/config.json"))["torch_dtype"] == "float16"
assert "in fp16 (auto: the run's compute dtype)" in log
print(f"eval ppl {evals[0]['eval_ppl']:.1f} -> {evals[1]['eval_ppl']:.1f}, export F16")
EOF_PY
check step1-eval-and-fp16-export $? "$WORK/step1-check.log" "the step-1 run's evaluation or export is wrong"

# safetensors_dtype FILE: the one dtype of every tensor in FILE.
safetensors_dtype() {
  "$PYTHON" -c '
import json, struct, sys
with open(sys.argv[1], "rb") as s:
    h = json.loads(s.read(struct.unpack("<Q", s.read(8))[0]))
print(",".join(sorted({v["dtype"] for k, v in h.items() if k != "__metadata__"})))' "$1"
}
"$ZEROTUNE" export --checkpoint "$S/run" --model "$M" --out "$WORK/export-fp32" --dtype fp32 >"$WORK/export-fp32.log" 2>&1 \
  && [[ "$(safetensors_dtype "$WORK/export-fp32/model.safetensors")" == F32 ]]
check export-dtype-fp32-asked $? "$WORK/export-fp32.log" "export --dtype fp32 of the fp16 run is not fp32"
"$ZEROTUNE" train --model "$M" --data "$WORK/data" --split train --out "$WORK/bf16-run" --deepspeed "$WORK/ds-bf16.json" \
  --max-steps 1 --seed 1 --lora-r 4 >"$WORK/bf16.log" 2>&1 \
  && "$ZEROTUNE" export --checkpoint "$WORK/bf16-run" --model "$M" --out "$WORK/export-bf16" --merge >>"$WORK/bf16.log" 2>&1 \
  && [[ "$(safetensors_dtype "$WORK/export-bf16/model.safetensors")" == BF16 ]] \
  && grep -q '"torch_dtype": "bfloat16"' "$WORK/export-bf16/config.json" \
  && "$ZEROTUNE" export --checkpoint "$WORK/bf16-run" --model "$M" --out "$WORK/adapter-bf16" --format peft >>"$WORK/bf16.log" 2>&1 \
  && [[ "$(safetensors_dtype "$WORK/adapter-bf16/adapter_model.safetensors")" == BF16 ]]
check export-auto-bf16 $? "$WORK/bf16.log" "the bf16 LoRA run's default exports (merged HF model, PEFT adapter) are not bf16"

# --- 4. step2_reward.sh: pairs, the reward evaluation before and after, the classifier export ----
script_refuses_step2() {
  local log="$WORK/script-step2-peft.log"
  env ZT_BIN="$ZEROTUNE" ZT_MODEL="$M" ZT_RM_STATIC="$WORK/train.jsonl" ZT_WORK="$WORK/refused" ZT_EXPORT=peft \
    bash "$REPO/job_scripts/deepspeed-chat/step2_reward.sh" >"$log" 2>&1
  local status=$?
  [[ "$status" -eq 2 ]] && grep -qF "ZT_EXPORT='peft': one of: hf none" "$log" && [[ ! -e "$WORK/refused" ]]
  check step2-refuses-peft $? "$log" "want exit status 2 (got $status) naming the step's export formats"
}
script_refuses_step2
S2="$WORK/step2"
ZT_BIN="$ZEROTUNE" ZT_MODEL="$M" ZT_RM_STATIC="$WORK/train.jsonl" ZT_RM_STATIC_TEST="$WORK/test.jsonl" ZT_WORK="$S2" \
  ZT_DS_CONFIG="$WORK/ds-fp16.json" ZT_MAX_SEQ_LEN=128 ZT_NP=1 ZT_CPU_BIND=none ZT_OMP_THREADS=2 ZT_PREFLIGHT=0 \
  ZT_ARGS="--epochs 1 --max-steps 3 --eval-every 3 --seed 1" \
  bash "$REPO/job_scripts/deepspeed-chat/step2_reward.sh" >"$WORK/step2.log" 2>&1
check step2-script $? "$WORK/step2.log" "step2_reward.sh failed"
"$PYTHON" - "$S2" "$WORK/step2.log" >"$WORK/step2-check.log" 2>&1 <<'EOF_PY'
import glob, json, struct, sys
import h5py
work, log = sys.argv[1], open(sys.argv[2]).read()
for split in ("train", "eval"):
    shards = glob.glob(f"{work}/data/{split}-*.h5")
    assert len(shards) == 1, (split, shards)
    with h5py.File(shards[0]) as f:
        assert f.attrs["record"] in ("pair", b"pair"), f"{split}: record {f.attrs['record']!r}"
records = [json.loads(line) for line in open(f"{work}/run/metrics.jsonl")]
steps = [r for r in records if "loss" in r]
evals = [r for r in records if "eval_reward_accuracy" in r]
assert len(steps) == 3, f"{len(steps)} training steps"
assert [r["step"] for r in evals] == [0, 3], f"reward evaluations at steps {[r['step'] for r in evals]}"
for r in evals:
    assert 0 <= r["eval_reward_accuracy"] <= 1 and "eval_chosen_score" in r and "eval_rejected_score" in r, r
assert "--objective reward" in log and "prep --pairs" in log, "the step's flags"
config = json.load(open(f"{work}/export/config.json"))
assert config["architectures"] == ["LlamaForSequenceClassification"] and config["num_labels"] == 1, config
with open(f"{work}/export/model.safetensors", "rb") as stream:
    header = json.loads(stream.read(struct.unpack("<Q", stream.read(8))[0]))
assert "score.weight" in header and header["score.weight"]["shape"][0] == 1, sorted(header)[:5]
assert not any(name.startswith("lm_head") for name in header), "an LM head in the classifier"
print(f"reward accuracy {evals[0]['eval_reward_accuracy']:.3f} -> {evals[1]['eval_reward_accuracy']:.3f}, "
      f"export {config['architectures'][0]}")
EOF_PY
check step2-evaluations-and-export $? "$WORK/step2-check.log" "the step-2 run's data, evaluation or export is wrong"

finish

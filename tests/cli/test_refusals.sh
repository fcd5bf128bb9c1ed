#!/usr/bin/env bash
# tests/cli/test_refusals.sh: inputs that zerotune accepted although they make the result wrong,
# or refused with a message naming neither file nor cause (issue 17). Each must now end with a
# non-zero exit and one clear message: bad flag values, NaN weights, overlapping safetensors
# data, out-of-range token ids (found when the data is opened), absurd vocabulary sizes, a
# manifest or rank file that disagrees with itself, --max-steps below the checkpoint, a run whose
# every step is skipped, an --out that cannot be created, text rows where shards are expected,
# LoRA flags next to --adapter; and --split / --eval-split choose among several splits.
# Usage: test_refusals.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs
copy_model() { cp -r "$WORK/model" "$WORK/$1"; }
train_args=(train --model "$M" --data "$D" --deepspeed "$WORK/ds.json" --max-steps 1)

# --- Flag values the JSON path already refuses ----------------------------------------------
expect_error lr-nan "--lr must be a finite number >= 0, not nan" -- "${train_args[@]}" --out "$WORK/o1" --lr nan
expect_error lr-negative "--lr must be a finite number >= 0, not -1" -- "${train_args[@]}" --out "$WORK/o2" --lr=-1
expect_error micro-batch-zero "--micro-batch-size must be >= 1, not 0" -- "${train_args[@]}" --out "$WORK/o3" --micro-batch-size 0
expect_error grad-accum-zero "--grad-accum must be >= 1, not 0" -- "${train_args[@]}" --out "$WORK/o4" --grad-accum 0

# --- Model weights ---------------------------------------------------------------------------
copy_model nan-model
"$PYTHON" - "$WORK/nan-model/model.safetensors" <<'PY' || fatal "writing a NaN into the model failed"
import sys, numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
t["model.layers.1.mlp.down_proj.weight"][3, 5] = np.nan
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
expect_error nan-in-weights "$WORK/nan-model/model.safetensors" "model.layers.1.mlp.down_proj.weight" "NaN" \
  -- train --model "$WORK/nan-model" --data "$D" --out "$WORK/o5" --max-steps 1

copy_model overlap-model
"$PYTHON" - "$WORK/overlap-model/model.safetensors" <<'PY' || fatal "rewriting the safetensors header failed"
import json, struct, sys
path = sys.argv[1]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
names = sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
first, second = names[0][1], names[1][1]
size = header[second]["data_offsets"][1] - header[second]["data_offsets"][0]
if header[first]["data_offsets"][1] - header[first]["data_offsets"][0] != size:  # same size: only the offsets move
    second = next(k for _, k in names[1:] if header[k]["data_offsets"][1] - header[k]["data_offsets"][0] ==
                  header[first]["data_offsets"][1] - header[first]["data_offsets"][0])
header[second]["data_offsets"] = list(header[first]["data_offsets"])  # two tensors on the same bytes
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (n - len(text)) if len(text) <= n else b""
assert len(text) == n, "the header grew"
open(path, "wb").write(raw[:8] + text + raw[8 + n:])
PY
expect_error safetensors-overlapping-offsets "$WORK/overlap-model/model.safetensors" "overlap" \
  -- train --model "$WORK/overlap-model" --data "$D" --out "$WORK/o6" --max-steps 1

copy_model vocab-huge; "$PYTHON" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d["vocab_size"]=10**12; json.dump(d,open(p,"w"))' "$WORK/vocab-huge/config.json"
expect_error vocab-1e12 "$WORK/vocab-huge/config.json" "vocab_size" "32-bit" \
  -- train --model "$WORK/vocab-huge" --data "$D" --out "$WORK/o7" --max-steps 1
copy_model vocab-max; "$PYTHON" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d["vocab_size"]=2**63-1; json.dump(d,open(p,"w"))' "$WORK/vocab-max/config.json"
expect_error vocab-2pow63 "$WORK/vocab-max/config.json" "vocab_size" "32-bit" \
  -- train --model "$WORK/vocab-max" --data "$D" --out "$WORK/o8" --max-steps 1
copy_model hidden-huge; "$PYTHON" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d["hidden_size"]=2**40; d["num_attention_heads"]=1; d["num_key_value_heads"]=1; json.dump(d,open(p,"w"))' "$WORK/hidden-huge/config.json"
expect_error hidden-size-absurd "$WORK/hidden-huge/config.json" "not a real model's size" \
  -- train --model "$WORK/hidden-huge" --data "$D" --out "$WORK/o8b" --max-steps 1

# --- Data --------------------------------------------------------------------------------------
# Token id 300 >= vocab_size 256 in the last sample: never read by step 1 in order, found at open.
"$PYTHON" - "$WORK/data-bad-id" "$MAKE_SHARD" <<'PY' || fatal "writing the bad-id shard failed"
import os, sys, importlib.util
import h5py, numpy as np
spec = importlib.util.spec_from_file_location("mts", sys.argv[2]); mts = importlib.util.module_from_spec(spec); spec.loader.exec_module(mts)
os.makedirs(sys.argv[1])
path = os.path.join(sys.argv[1], "train-00000.h5")
samples = [([1] + [10 + i] * 10 + [2], [0] + [1] * 11) for i in range(16)]
mts.write_shard(path, samples, vocab_size=256)
with h5py.File(path, "r+") as f:
    tokens = f["tokens"][:]
    tokens[15 * 12 + 4] = 300
    f["tokens"][:] = tokens
PY
expect_error token-id-out-of-range-at-open "$WORK/data-bad-id/train-00000.h5" "sample 15" "token id 300" "vocab_size=256" \
  -- train --model "$M" --data "$WORK/data-bad-id" --out "$WORK/o9" --max-steps 1 --no-shuffle --deepspeed "$WORK/ds.json"

printf '{"prompt": "Human: hi", "chosen": "Assistant: hello"}\n' >"$WORK/rows.jsonl"
expect_error jsonl-file-as-data "$WORK/rows.jsonl" "zerotune prep --input" \
  -- train --model "$M" --data "$WORK/rows.jsonl" --out "$WORK/o10" --max-steps 1
mkdir -p "$WORK/rows-dir" && cp "$WORK/rows.jsonl" "$WORK/rows-dir/"
expect_error jsonl-dir-as-data "$WORK/rows-dir" "zerotune prep --input" \
  -- train --model "$M" --data "$WORK/rows-dir" --out "$WORK/o11" --max-steps 1

# Two splits in one directory: --split / --eval-split choose; without them the message says how.
mkdir -p "$WORK/splits" && cp "$D/train-00000.h5" "$WORK/splits/train-00000.h5" && cp "$D/train-00000.h5" "$WORK/splits/test-00000.h5"
expect_error several-splits-named "$WORK/splits" "several splits" "--split NAME" \
  -- train --model "$M" --data "$WORK/splits" --out "$WORK/o12" --max-steps 1
"$ZEROTUNE" train --model "$M" --data "$WORK/splits" --split train --eval-split test --out "$WORK/o13" \
  --deepspeed "$WORK/ds.json" --max-steps 1 --eval-every 1 >"$WORK/splits.log" 2>&1 \
  && grep -q '"eval_loss"' "$WORK/o13/metrics.jsonl" && grep -q '"data_split": "train"' "$WORK/o13/run.json"
check split-and-eval-split $? "$WORK/splits.log" "train --split train --eval-split test: want exit 0 and an eval record"

# Every step skipped (no sample has a target token): the run fails instead of "done".
"$PYTHON" - "$WORK/data-no-targets" "$MAKE_SHARD" <<'PY' || fatal "writing the no-target shard failed"
import os, sys, importlib.util
spec = importlib.util.spec_from_file_location("mts", sys.argv[2]); mts = importlib.util.module_from_spec(spec); spec.loader.exec_module(mts)
os.makedirs(sys.argv[1])
mts.write_shard(os.path.join(sys.argv[1], "train-00000.h5"), [([1] + [10 + i] * 10 + [2], [0] * 12) for i in range(16)], vocab_size=256)
PY
expect_error every-step-skipped "every one of the 2 steps of this run was skipped" \
  -- train --model "$M" --data "$WORK/data-no-targets" --out "$WORK/o14" --max-steps 2 --deepspeed "$WORK/ds.json"

# --- Output directory ---------------------------------------------------------------------------
echo "a file" >"$WORK/a-file"
expect_error out-cannot-be-created "$WORK/a-file/out" "cannot create the output directory" "Not a directory" \
  -- "${train_args[@]}" --out "$WORK/a-file/out"
mkdir -p "$WORK/o15/run.json"  # run.json cannot be written: the reason is named
expect_error run-json-cannot-write "$WORK/o15/run.json" "cannot write: Is a directory" -- "${train_args[@]}" --out "$WORK/o15"

# --- Checkpoints ------------------------------------------------------------------------------
C="$WORK/ckpt-run"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$C" --deepspeed "$WORK/ds.json" --max-steps 4 --save-every 2 >"$WORK/ckpt.log" 2>&1 \
  || { cat "$WORK/ckpt.log"; fatal "the checkpointed run failed"; }
expect_error max-steps-below-checkpoint "$C/checkpoints/global_step4" "saved after step 4" "--max-steps" \
  -- train --model "$M" --data "$D" --out "$C" --deepspeed "$WORK/ds.json" --max-steps 2 --resume auto
cp -r "$C" "$WORK/ckpt-neg"
"$PYTHON" -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d["step"]=-3; json.dump(d,open(p,"w"))' "$WORK/ckpt-neg/checkpoints/global_step4/manifest.json"
expect_error manifest-step-negative "$WORK/ckpt-neg/checkpoints/global_step4/manifest.json" "key 'step' = -3" \
  -- train --model "$M" --data "$D" --out "$WORK/ckpt-neg" --deepspeed "$WORK/ds.json" --max-steps 6 --resume auto
# A rank file of step 2 copied into step 4 with the manifest's size and checksum updated to match.
cp -r "$C" "$WORK/ckpt-swap"
"$PYTHON" - "$WORK/ckpt-swap/checkpoints" <<'PY' || fatal "swapping the rank file failed"
import hashlib, json, os, shutil, sys
root = sys.argv[1]
shutil.copy(os.path.join(root, "global_step2", "rank-00000.h5"), os.path.join(root, "global_step4", "rank-00000.h5"))
path = os.path.join(root, "global_step4", "manifest.json")
m = json.load(open(path))
f = os.path.join(root, "global_step4", "rank-00000.h5")
m["files"][0]["bytes"] = os.path.getsize(f)
m["files"][0]["sha256"] = hashlib.sha256(open(f, "rb").read()).hexdigest()
json.dump(m, open(path, "w"))
PY
expect_error rank-file-step-mismatch "$WORK/ckpt-swap/checkpoints/global_step4/rank-00000.h5" "attribute 'step' is 2" "needs 4" \
  -- train --model "$M" --data "$D" --out "$WORK/ckpt-swap" --deepspeed "$WORK/ds.json" --max-steps 6 --resume auto

# --- LoRA flags next to --adapter --------------------------------------------------------------
L="$WORK/lora-run"
"$ZEROTUNE" train --model "$M" --data "$D" --out "$L" --deepspeed "$WORK/ds.json" --max-steps 1 --lora-r 4 >"$WORK/lora.log" 2>&1 \
  && "$ZEROTUNE" export --checkpoint "$L/checkpoints/global_step1" --model "$M" --out "$WORK/adapter" --format peft >>"$WORK/lora.log" 2>&1 \
  || { cat "$WORK/lora.log"; fatal "making a PEFT adapter failed"; }
expect_error adapter-with-lora-dropout "--adapter takes the LoRA settings" "--lora-dropout" \
  -- "${train_args[@]}" --out "$WORK/o16" --adapter "$WORK/adapter" --lora-dropout 0.1
expect_error adapter-with-lora-alpha "--adapter takes the LoRA settings" "--lora-alpha" \
  -- "${train_args[@]}" --out "$WORK/o17" --adapter "$WORK/adapter" --lora-alpha 32

finish

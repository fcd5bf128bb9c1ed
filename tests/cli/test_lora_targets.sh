#!/usr/bin/env bash
# tests/cli/test_lora_targets.sh: LoRA target names as PEFT accepts them (issue 17): a list with
# spaces, path suffixes, a regular expression (on the command line and as an adapter's
# target_modules string), each recorded in run.json as the module names it selects; and clear
# refusals for what PEFT allows but zerotune does not implement (the output head, embeddings,
# some layers only).
# Usage: test_lora_targets.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs

# targets_of OUT: run.json's lora.targets, comma-joined.
targets_of() { "$PYTHON" -c 'import json, sys; print(",".join(json.load(open(sys.argv[1]))["lora"]["targets"]))' "$1/run.json"; }

# expect_targets NAME WANTED TARGETS: --lora-targets TARGETS trains and records WANTED.
expect_targets() {
  local name="$1" wanted="$2" targets="$3" out="$WORK/$1"
  "$ZEROTUNE" train --model "$M" --data "$D" --out "$out" --deepspeed "$WORK/ds.json" --max-steps 1 --lora-r 4 \
    --lora-targets "$targets" >"$WORK/$name.log" 2>&1
  local status=$? got
  got="$(targets_of "$out" 2>>"$WORK/$name.log")"
  [[ "$status" -eq 0 && "$got" == "$wanted" ]]
  check "$name" $? "$WORK/$name.log" "--lora-targets '$targets': want exit 0 and targets $wanted; got exit $status, '$got'"
}
expect_targets list-with-spaces "q_proj,v_proj" "q_proj, v_proj"
expect_targets list-space-separated "q_proj,v_proj" "q_proj v_proj"
expect_targets path-suffix "q_proj,o_proj" "self_attn.q_proj,o_proj"
expect_targets regex "q_proj,v_proj" '.*\.(q|v)_proj'
expect_targets regex-mlp "gate_proj,up_proj,down_proj" 'model\.layers\.[0-9]+\.mlp\..*'

expect_error target-lm-head "LoRA target 'lm_head'" "the output head" "zerotune does not" \
  -- train --model "$M" --data "$D" --out "$WORK/o1" --max-steps 1 --lora-r 4 --lora-targets lm_head
expect_error target-embedding "LoRA target 'embed_tokens'" "an embedding" \
  -- train --model "$M" --data "$D" --out "$WORK/o2" --max-steps 1 --lora-r 4 --lora-targets q_proj,embed_tokens
expect_error target-one-layer "LoRA target 'layers.0.self_attn.q_proj'" "every layer or in none" \
  -- train --model "$M" --data "$D" --out "$WORK/o3" --max-steps 1 --lora-r 4 --lora-targets layers.0.self_attn.q_proj
expect_error target-bad-regex "LoRA target '(q_proj'" "not a valid regular expression" \
  -- train --model "$M" --data "$D" --out "$WORK/o4" --max-steps 1 --lora-r 4 --lora-targets '(q_proj'

# A PEFT adapter whose target_modules is a regular expression string continues training.
"$ZEROTUNE" export --checkpoint "$WORK/regex" --model "$M" --out "$WORK/adapter" --format peft >"$WORK/export.log" 2>&1 \
  && "$PYTHON" - "$WORK/adapter/adapter_config.json" <<'PY' || fatal "making the regex adapter failed: $(cat "$WORK/export.log")"
import json, sys
d = json.load(open(sys.argv[1]))
d["target_modules"] = r".*\.(q_proj|v_proj)"
json.dump(d, open(sys.argv[1], "w"))
PY
"$ZEROTUNE" train --model "$M" --data "$D" --out "$WORK/adapter-run" --deepspeed "$WORK/ds.json" --max-steps 1 \
  --adapter "$WORK/adapter" >"$WORK/adapter-run.log" 2>&1
status=$?
got="$(targets_of "$WORK/adapter-run" 2>>"$WORK/adapter-run.log")"
[[ "$status" -eq 0 && "$got" == "q_proj,v_proj" ]]
check adapter-regex-target-modules $? "$WORK/adapter-run.log" "want exit 0 and targets q_proj,v_proj; got exit $status, '$got'"

finish

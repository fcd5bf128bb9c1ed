#!/usr/bin/env bash
# tests/cli/test_generate.sh: `zerotune generate` and `train --sample-prompts` from the command
# line (issue 35 item 7). On the tour's tiny LLaMA with a SentencePiece tokenizer:
#  - a text prompt gives a decoded completion; --json gives its ids (BOS first in the prompt's),
#    at most --max-new-tokens; sampling (--temperature, --top-p) repeats with the same --seed and
#    differs from greedy, the default;
#  - bad inputs, each one clear error: no prompt, an empty prompt, --top-p outside (0, 1],
#    --temperature < 0, --max-new-tokens 0, a model without a tokenizer given a text prompt, both
#    --checkpoint and --adapter; train's --sample-every without --sample-prompts, an empty or
#    missing prompts file, a JSONL line without "prompt".
# Usage: test_generate.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

make_good_inputs  # $M: a tiny LLaMA without a tokenizer, $D: data for it
T="$WORK/tour"
"$ZEROTUNE" init --config "$REPO/data/tour-llama/config.json" --out "$T" --seed 1 >/dev/null || fatal "init failed"
"$PYTHON" -c '
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n")
' "$REPO/data/rm-static-sample.jsonl" "$WORK/corpus.txt" || fatal "corpus failed"
spm_train --input="$WORK/corpus.txt" --model_prefix="$T/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2 >/dev/null 2>&1 \
  || fatal "spm_train failed"

# ---- what works ----
PROMPT="Human: How do I keep basil fresh? Assistant:"
run() { "$ZEROTUNE" generate --model "$T" --device cpu --prompt "$PROMPT" --max-new-tokens 12 "$@" 2>"$WORK/generate.stderr"; }
run >"$WORK/text.out"
status=$?
[[ $status -eq 0 && -s "$WORK/text.out" ]] && grep -q "zerotune generate: $T" "$WORK/generate.stderr"
check text-prompt $? "$WORK/text.out" "want exit 0 (got $status), a completion on stdout and the banner on stderr"

run --json >"$WORK/greedy.json"
"$PYTHON" - "$WORK/greedy.json" "$WORK/text.out" <<'PY'
import json, sys
record = json.loads(open(sys.argv[1]).read().splitlines()[-1])
ids, stop = record["completion_ids"], record["stop"]
assert record["prompt_ids"][0] == 1, f"BOS first: {record['prompt_ids'][:3]}"
assert stop == "length" and len(ids) == 12 or stop == "eos" and len(ids) < 12, (stop, ids)
assert all(0 <= i < 1000 for i in ids), ids
text = open(sys.argv[2], "rb").read()
# The plain run prints the completion's bytes; --json the same text (invalid UTF-8 as U+FFFD).
assert "\ufffd" in record["completion"] or text == (record["completion"] + "\n").encode(), (text, record["completion"])
PY
check json-output $? "$WORK/greedy.json" "want prompt_ids (BOS first), at most 12 completion_ids, stop, and the text of the plain run"

run --json --temperature 1.5 --top-p 0.9 --seed 7 >"$WORK/s7a.json"
run --json --temperature 1.5 --top-p 0.9 --seed 7 >"$WORK/s7b.json"
cmp -s "$WORK/s7a.json" "$WORK/s7b.json" && ! cmp -s "$WORK/s7a.json" "$WORK/greedy.json"
check sampling-seeded $? "$WORK/s7a.json" "want the same --seed to give the same sample, and it to differ from greedy (the default)"

# ---- bad inputs ----
expect_error generate-no-prompt "--prompt is required" -- generate --model "$T"
expect_error generate-empty-prompt "--prompt is empty" -- generate --model "$T" --prompt ""
expect_error generate-top-p-zero "--top-p must be in (0, 1]" -- generate --model "$T" --prompt hi --top-p 0
expect_error generate-top-p-above-one "--top-p must be in (0, 1]" -- generate --model "$T" --prompt hi --top-p 1.5
expect_error generate-negative-temperature "--temperature must be >= 0" -- generate --model "$T" --prompt hi --temperature -0.5
expect_error generate-no-new-tokens "--max-new-tokens must be at least 1" -- generate --model "$T" --prompt hi --max-new-tokens 0
expect_error generate-no-tokenizer "$M" -- generate --model "$M" --prompt hi
expect_error generate-checkpoint-and-adapter "give --checkpoint or --adapter, not both" -- \
  generate --model "$T" --prompt-ids 1,2 --checkpoint "$WORK" --adapter "$WORK"
expect_error generate-bad-prompt-ids "--prompt-ids: '5000' is not a token id in [0, 1000)" -- \
  generate --model "$T" --prompt-ids 1,5000
printf '\n  \n' >"$WORK/empty.txt"
printf '{"prompt": "a"}\n{"text": "b"}\n' >"$WORK/bad.jsonl"
expect_error train-sample-every-without-prompts "--sample-every needs --sample-prompts" -- \
  train --model "$M" --data "$D" --out "$WORK/o1" --sample-every 2
expect_error train-sample-prompts-empty "$WORK/empty.txt holds no prompt" -- \
  train --model "$M" --data "$D" --out "$WORK/o2" --sample-prompts "$WORK/empty.txt"
expect_error train-sample-prompts-missing "$WORK/none.txt: cannot open" -- \
  train --model "$M" --data "$D" --out "$WORK/o3" --sample-prompts "$WORK/none.txt"
expect_error train-sample-prompts-bad-line "bad.jsonl:2: a JSON line needs a string \"prompt\"" -- \
  train --model "$M" --data "$D" --out "$WORK/o4" --sample-prompts "$WORK/bad.jsonl"
expect_error train-sample-every-zero "--sample-every must be >= 1" -- \
  train --model "$M" --data "$D" --out "$WORK/o5" --sample-prompts "$WORK/bad.jsonl" --sample-every 0
finish

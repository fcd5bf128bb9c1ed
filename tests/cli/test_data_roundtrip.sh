#!/usr/bin/env bash
# tests/cli/test_data_roundtrip.sh: the data path end to end on data/rm-static-sample.jsonl.
# A SentencePiece tokenizer is trained on the sample (spm_train, as in the README tour) into a
# random tour-sized model; `zerotune prep` tokenizes the sample; `zerotune inspect --json` must
# report exactly the numbers of prep's summary (shards, samples, tokens, targets, length
# percentiles, truncated samples), the attributes (vocab size and special ids of the tokenizer,
# the sha256 of its file), and decode a sample to exactly BOS + prompt + [[chosen + EOS]] as the
# JSONL row has it; then `zerotune train` runs 2 steps on the shards with finite losses.
# Usage: test_data_roundtrip.sh ZEROTUNE_BINARY PYTHON
set -euo pipefail

ZEROTUNE="$1"
PYTHON="$2"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SAMPLE="$REPO/data/rm-static-sample.jsonl"
WORK="$(mktemp -d /tmp/zt-data-roundtrip.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
command -v spm_train >/dev/null || { echo "FAIL: spm_train not found (Debian package sentencepiece)" >&2; exit 1; }

echo "--- tokenizer and model"
"$ZEROTUNE" init --config "$REPO/data/tour-llama/config.json" --out "$WORK/model" --seed 3
"$PYTHON" - "$SAMPLE" "$WORK/corpus.txt" <<'EOF_PY'
import json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in open(sys.argv[1], encoding="utf-8"):
        row = json.loads(line)
        out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
EOF_PY
spm_train --input="$WORK/corpus.txt" --model_prefix="$WORK/model/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --split_digits=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --minloglevel=2

echo "--- prep"
"$ZEROTUNE" prep --input "$SAMPLE" --tokenizer "$WORK/model" --out "$WORK/data" --max-seq-len 512 \
  --shard-samples 128 | tee "$WORK/prep.txt"

echo "--- inspect"
"$ZEROTUNE" inspect "$WORK/data" --tokenizer "$WORK/model" --sample 1 | tee "$WORK/inspect.txt"
"$PYTHON" - "$ZEROTUNE" "$WORK" "$SAMPLE" <<'EOF_PY'
import hashlib, json, re, subprocess, sys
zerotune, work, sample_path = sys.argv[1:4]
problems = []
def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        problems.append(what)

def inspect_json(*extra):
    result = subprocess.run([zerotune, "inspect", f"{work}/data", "--json", *extra], check=True,
                            capture_output=True, text=True)
    return json.loads(result.stdout)

# prep's summary, as printed.
summary = open(f"{work}/prep.txt").read()
def number(pattern):
    found = re.search(pattern, summary)
    if not found:
        sys.exit(f"FAIL: the prep summary has no match for {pattern!r}:\n{summary}")
    return [int(group) for group in found.groups()]
shards, = number(r"\((\d+) shards?\)")
rows_read, = number(r"rows read\s+(\d+)")
samples, = number(r"samples written\s+(\d+)")
truncated, = number(r"truncated\s+(\d+)")
tokens, targets = number(r"tokens\s+(\d+) \(targets (\d+),")
p50, p90, p99, longest = number(r"sample length\s+p50 (\d+), p90 (\d+), p99 (\d+), max (\d+)")
rows = [json.loads(line) for line in open(sample_path, encoding="utf-8")]
check(rows_read == len(rows) and samples == len(rows), f"prep read and wrote all {len(rows)} rows")
check(0 < truncated < len(rows) // 10, f"a few samples are truncated at 512 tokens ({truncated})")

report = inspect_json()
totals, lengths, attrs = report["totals"], report["lengths"], report["attributes"]
check(totals["shards"] == shards == len(report["shards"]) == 3, f"inspect: {totals['shards']} shards, prep: {shards}")
check(totals["samples"] == samples, f"inspect samples {totals['samples']} == prep {samples}")
check(sum(s["samples"] for s in report["shards"]) == samples, "the shard rows add up to the samples")
check([s["samples"] for s in report["shards"]] == [128, 128, samples - 256], "--shard-samples 128 per shard")
check(totals["tokens"] == tokens and sum(s["tokens"] for s in report["shards"]) == tokens,
      f"inspect tokens {totals['tokens']} == prep {tokens}")
check(totals["target_tokens"] == targets, f"inspect target tokens {totals['target_tokens']} == prep {targets}")
check(abs(totals["target_fraction"] - targets / tokens) < 1e-12, "target fraction")
check([lengths[k] for k in ("p50", "p90", "p99", "max")] == [p50, p90, p99, longest],
      f"length percentiles {[lengths[k] for k in ('p50', 'p90', 'p99', 'max')]} == prep {[p50, p90, p99, longest]}")
check(lengths["max"] == 512 and lengths["at_max_seq_len"] >= truncated, "truncated samples are 512 tokens long")
check(sum(b["count"] for b in lengths["histogram"]) == samples, "the histogram counts every sample once")
with open(f"{work}/model/tokenizer.model", "rb") as stream:
    digest = hashlib.sha256(stream.read()).hexdigest()
expected_attrs = dict(format="zerotune-tokens", version=1, vocab_size=1000, bos_id=1, eos_id=2, pad_id=3,
                      tokenizer_sha256=digest, max_seq_len=512, split="train", source="rm-static-sample.jsonl")
for key, value in expected_attrs.items():
    check(attrs.get(key) == value, f"attribute {key} = {attrs.get(key)!r} (expected {value!r})")

# Samples decode to the row's text with the prompt plain and chosen + EOS the targets (the
# tokenizer's dummy prefix adds one space before the prompt).
decoded = 0
for index in (0, 1, 2, 150, len(rows) - 1):
    sample = inspect_json("--tokenizer", f"{work}/model", "--sample", str(index))["sample"]
    if sample["length"] == 512:
        continue  # truncated: no EOS, the text is cut
    row = rows[index]
    expected = "<s> " + row["prompt"] + "[[" + row["chosen"] + "</s>]]"
    check(sample["marked"] == expected, f"sample {index} decodes to <s> prompt [[chosen</s>]]")
    check(sample["loss_mask"][0] == 0 and sample["loss_mask"][-1] == 1, f"sample {index}: BOS plain, EOS a target")
    decoded += 1
check(decoded >= 3, f"{decoded} samples compared with their rows")
text = open(f"{work}/inspect.txt").read()
sample_1 = inspect_json("--tokenizer", f"{work}/model", "--sample", "1")["sample"]
check(sample_1["marked"] in text and "[[" in sample_1["marked"] and "decoded with" in text,
      "the text report shows sample 1 decoded and marked")
for line in (f"  {s['name']}" for s in report["shards"]):
    check(line in text, f"the text report lists {line.strip()}")
if problems:
    sys.exit(f"FAIL: {len(problems)} check(s) failed")
EOF_PY

echo "--- train 2 steps, then the same with --group-by-length"
for run in plain grouped; do
  extra=()
  [ "$run" = grouped ] && extra=(--group-by-length)
  "$ZEROTUNE" train --model "$WORK/model" --data "$WORK/data" --out "$WORK/$run" \
    --deepspeed "$REPO/data/tiny-llama/ds_config.json" --max-steps 2 --seed 1 --no-save-at-end "${extra[@]}"
done
"$PYTHON" - "$WORK/plain/metrics.jsonl" "$WORK/grouped/metrics.jsonl" <<'EOF_PY'
import json, math, sys
plain, grouped = ([r for r in map(json.loads, open(path)) if "eval_loss" not in r] for path in sys.argv[1:3])
ok = len(plain) == 2 and all(math.isfinite(r["loss"]) and r["tokens"] > 0 for r in plain)
# A random model over 1000 tokens: the first loss is about ln(1000) = 6.91.
ok = ok and abs(plain[0]["loss"] - math.log(1000)) < 0.3
print(("ok   " if ok else "FAIL ") + f"train: {len(plain)} steps, losses {[round(r['loss'], 4) for r in plain]}")
# Same global batches, only regrouped into micro-batches: the same losses (up to float
# reassociation) and the same tokens, with less padding.
same = len(grouped) == 2 and all(abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"]) and a["tokens"] == b["tokens"]
                                  for a, b in zip(grouped, plain))
print(("ok   " if same else "FAIL ") + f"--group-by-length: losses {[round(r['loss'], 6) for r in grouped]} "
      f"vs {[round(r['loss'], 6) for r in plain]}")
less = all(a["padding_fraction"] < b["padding_fraction"] for a, b in zip(grouped, plain))
print(("ok   " if less else "FAIL ") + f"--group-by-length: padding {[round(r['padding_fraction'], 3) for r in grouped]} "
      f"< {[round(r['padding_fraction'], 3) for r in plain]}")
sys.exit(0 if ok and same and less else 1)
EOF_PY
echo "ok: prep -> inspect -> train round trip"

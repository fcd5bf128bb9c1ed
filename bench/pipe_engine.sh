#!/usr/bin/env bash
# The pipeline engine's measured bubble and traffic (issue 32 item 8): `train --pipeline-stages 2`
# on 2 MPI ranks of the CPU backend (1 thread each), GPipe and 1F1B, M = 4 and 8 micro-batches of
# B x T tokens, with ZT_PIPE_TRACE (src/train/pipe_trace.h): per rank and step, the bubble is
# 1 - (forwards + recomputed forwards + backwards) / the engine's step time, against theory
# (P-1)/(M+P-1); the bytes the ranks sent per step against 2 (activation + gradient) x M x (P-1)
# boundaries x B*T*C x 4 (fp32). Steps after the first (warm-up) are averaged.
# Usage: bench/pipe_engine.sh [build/zerotune] [python]
set -euo pipefail
zerotune=$(realpath "${1:-build/zerotune}")
python=${2:-.venv/bin/python}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/zt-pipe-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
hidden=256 layers=4 tokens=128 micro=2 steps=5
# A LLaMA of hidden 256, 4 layers (the tiny test model's shapes, wider and deeper), fixed-length samples.
"$python" - "$repo/data/tiny-llama/config.json" "$work/config.json" "$hidden" "$layers" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(hidden_size=int(sys.argv[3]), intermediate_size=4 * int(sys.argv[3]), num_hidden_layers=int(sys.argv[4]),
              num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=256)
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
"$zerotune" init --config "$work/config.json" --out "$work/model" --seed 1 >/dev/null
"$python" "$repo/tests/oracle/make_token_shard.py" --out "$work/data" --samples 256 --vocab 256 \
  --min-len "$tokens" --max-len "$tokens" --seed 0 >/dev/null
echo "| schedule | P | M | B x T | bubble rank 0 | bubble rank 1 | bubble (theory) | step time (s) | bytes sent per step | 2 M (P-1) B T C 4 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for schedule in gpipe 1f1b; do
  for accum in 4 8; do
    out="$work/$schedule-$accum"
    ZT_PIPE_TRACE="$out/trace" mpirun -np 2 --oversubscribe --bind-to none "$zerotune" train --model "$work/model" \
      --data "$work/data" --out "$out" --device cpu --pipeline-stages 2 --pipeline-schedule "$schedule" \
      --micro-batch-size "$micro" --grad-accum "$accum" --max-steps "$steps" --no-save-at-end >"$out.log" 2>&1 \
      || { tail -20 "$out.log"; exit 1; }
    "$python" - "$out/trace" "$schedule" "$accum" "$micro" "$tokens" "$hidden" <<'PY'
import json, sys
trace, schedule = sys.argv[1], sys.argv[2]
M, B, T, C = (int(v) for v in sys.argv[3:7])
P = 2
steps = {rank: [json.loads(line) for line in open(f"{trace}/rank{rank}.jsonl")][1:] for rank in range(P)}
bubble = {rank: sum(1 - s["compute_seconds"] / s["step_seconds"] for s in steps[rank]) / len(steps[rank]) for rank in steps}
step_time = sum(max(steps[r][i]["step_seconds"] for r in steps) for i in range(len(steps[0]))) / len(steps[0])
sent = sum(steps[r][0]["bytes_sent"] for r in steps)
print(f"| {schedule} | {P} | {M} | {B} x {T} | {bubble[0]:.3f} | {bubble[1]:.3f} | {(P - 1) / (M + P - 1):.3f} | "
      f"{step_time:.3f} | {sent} | {2 * M * (P - 1) * B * T * C * 4} |")
PY
  done
done

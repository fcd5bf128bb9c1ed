#!/usr/bin/env bash
# 1-bit Adam (issue 16): bytes each rank sends per step before and after the freeze, and the loss
# after 40 steps against the same optimizer never frozen, on the tiny LLaMA with 2 MPI ranks
# (CPU backend). The byte counts are the communicator's counters (metrics.jsonl
# comm_bytes_sent, rank 0). Usage: bench/onebit_adam.sh [build/zerotune]
set -euo pipefail
zerotune=${1:-build/zerotune}
python=${ZT_PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
"$zerotune" init --config data/tiny-llama/config.json --out "$work/model" --seed 1 >/dev/null
"$python" tests/oracle/make_token_shard.py --out "$work/data" --samples 64 --vocab 256 --min-len 16 --max-len 48 --seed 0 >/dev/null
run() {  # name stage freeze steps
  "$python" - "$work" "$2" "$3" > "$work/$1.json" <<'PY'
import json, sys
work, stage, freeze = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = json.load(open("data/tiny-llama/ds_config.json"))
config.pop("gradient_accumulation_steps", None)
config.update(train_batch_size=16, train_micro_batch_size_per_gpu=4,
              zero_optimization={"stage": stage, "reduce_bucket_size": 12000, "allgather_bucket_size": 12000},
              optimizer={"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": freeze, "weight_decay": 0.01,
                                                          "betas": [0.9, 0.99]}})
print(json.dumps(config))
PY
  mpiexec -np 2 --oversubscribe --bind-to none "$zerotune" train --model "$work/model" --data "$work/data" \
    --out "$work/$1" --deepspeed "$work/$1.json" --max-steps "$4" --seed 3 >/dev/null
}
run s0 0 3 8
run s1 1 3 8
run long 1 10 40
run plain 1 1000000 40
"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
rows = lambda name: [json.loads(line) for line in open(f"{work}/{name}/metrics.jsonl") if line.strip()]
sent = lambda r, k: r["comm_bytes_sent"][k]
s0, s1 = rows("s0"), rows("s1")
fp32 = sent(s0[2], "all_reduce"); comp = sent(s0[4], "all_to_all") + sent(s0[4], "all_gather")
print(f"stage 0, W=2: warm-up fp32 all-reduce {fp32:.0f} B/step, compressed {comp:.0f} B/step: {fp32 / comp:.1f}x less")
rs, gather = sent(s1[2], "reduce_scatter"), sent(s1[2], "all_gather")
ex = sent(s1[4], "all_to_all") + sent(s1[4], "all_gather") - gather
print(f"stage 1, W=2: warm-up fp32 reduce-scatter {rs:.0f} B/step, exchange {ex:.0f} B/step: {rs / ex:.1f}x less "
      f"(parameter all-gather {gather:.0f} B/step either way)")
tail = lambda rs: sum(r["loss"] for r in rs[-8:]) / 8
long, plain = rows("long"), rows("plain")
print(f"40 steps, stage 1, W=2: loss {plain[0]['loss']:.4f} -> mean of the last 8 steps {tail(long):.4f} (1-bit, "
      f"freeze_step 10) vs {tail(plain):.4f} (never frozen)")
PY

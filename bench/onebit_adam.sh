#!/usr/bin/env bash
# 1-bit Adam and 0/1 Adam (issue 16): bytes each rank sends per step before and after the freeze,
# and the loss after 40 steps against the same optimizer never frozen (1-bit Adam) or AdamW (0/1
# Adam), on the tiny LLaMA with 2 MPI ranks (CPU backend). The byte counts are the communicator's
# counters (metrics.jsonl comm_bytes_sent, rank 0). Usage: bench/onebit_adam.sh [build/zerotune]
set -euo pipefail
zerotune=${1:-build/zerotune}
python=${ZT_PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
"$zerotune" init --config data/tiny-llama/config.json --out "$work/model" --seed 1 >/dev/null
"$python" tests/oracle/make_token_shard.py --out "$work/data" --samples 64 --vocab 256 --min-len 16 --max-len 48 --seed 0 >/dev/null
run() {  # name stage freeze steps [optimizer: onebit (default) | zeroone | adamw]
  "$python" - "$work" "$2" "$3" "${5:-onebit}" > "$work/$1.json" <<'PY'
import json, sys
work, stage, freeze, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
config = json.load(open("data/tiny-llama/ds_config.json"))
config.pop("gradient_accumulation_steps", None)
config.update(train_batch_size=16, train_micro_batch_size_per_gpu=4,
              zero_optimization={"stage": stage, "reduce_bucket_size": 12000, "allgather_bucket_size": 12000},
              optimizer={"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": freeze, "weight_decay": 0.01,
                                                          "betas": [0.9, 0.99]}})
if kind == "zeroone" and freeze < 10:  # tests/mpi/test_zero_one_adam.py's short schedule
    config["optimizer"] = {"type": "ZeroOneAdam", "params": {
        "lr": 2e-3, "betas": [0.9, 0.99], "weight_decay": 0.01, "var_freeze_step": freeze, "var_update_scaler": 2,
        "local_step_scaler": 2, "local_step_clipper": 4}}
if kind == "zeroone" and freeze >= 10:  # its convergence run: betas (0.9, 0.9), no clipping
    config["optimizer"] = {"type": "ZeroOneAdam", "params": {
        "lr": 2e-3, "betas": [0.9, 0.9], "weight_decay": 0.01, "var_freeze_step": freeze, "var_update_scaler": 16,
        "local_step_scaler": 16, "local_step_clipper": 2}}
    config["gradient_clipping"] = 0.0
if kind == "adamw":
    config["optimizer"] = {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.9, 0.9], "weight_decay": 0.01}}
    config["gradient_clipping"] = 0.0
print(json.dumps(config))
PY
  mpiexec -np 2 --oversubscribe --bind-to none "$zerotune" train --model "$work/model" --data "$work/data" \
    --out "$work/$1" --deepspeed "$work/$1.json" --max-steps "$4" --seed 3 >/dev/null
}
run s0 0 3 8
run s1 1 3 8
run long 1 10 40
run plain 1 1000000 40
run zo0 0 4 12 zeroone
run zolong 1 15 40 zeroone
run adamw 1 0 40 adamw
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
zo = rows("zo0")
grad = lambda r: sum(sent(r, k) for k in ("all_to_all", "all_gather", "reduce_scatter")) + (
    sent(r, "all_reduce") if sent(r, "all_reduce") > 64 else 0)  # the step's scalar all-reduces aside
print("0/1 Adam, stage 0, W=2, var_freeze_step 4: gradient bytes per step " + ", ".join(f"{grad(r):.0f}" for r in zo))
local = zo[4:]
average = sum(grad(r) for r in local) / len(local)
print(f"  fp32 all-reduce {grad(zo[0]):.0f} B/step; local phase (steps 5-12) {average:.0f} B/step on average: "
      f"{grad(zo[0]) / average:.1f}x less")
zolong, adamw = rows("zolong"), rows("adamw")
print(f"40 steps, stage 1, W=2: loss {adamw[0]['loss']:.4f} -> mean of the last 8 steps {tail(zolong):.4f} (0/1 Adam, "
      f"var_freeze_step 15) vs {tail(adamw):.4f} (AdamW)")
PY

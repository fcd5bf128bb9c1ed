#!/bin/bash
# Prepared 2026-11-28 night (after that session's calls 7-10; not yet run): the next lent GPU's
# first call; rename it with the date when it runs. Pack with
#   ZT_PACK_XZ_LEVEL=-6 bash scripts/gpu_check.sh pack --out .gpu --binary-dir build
# and carry [".gpu", ".gpu-ab"]:  OUT=$OUT bash bench/gpu_calls/next-call.sh
# What no GPU has run yet (commit 9558da6 and after): offload_param's gathers round the device master
# in place where it is on the device (the resident part at ratio 0.3, all of it without optimizer
# offload): call10 measured 3o-r30-dpu 0.210 s/step (2.28x of ZeRO-0) and param-only 0.180 with
# those parts still uploaded; the estimate says 22.23 GiB for 3o-r30 (cli.estimate_matches_h200
# holds the model's figure until this measures it). Also not run on a GPU (2026-11-28 late, commits
# 0f42ba2 and c685bda): offload's gradient downloads on a transfer queue of their own (one stream per
# direction), and a DPU update's parameter uploads unit by unit beside the next forward: watch the
# 3r30-dpu and 3o-r30-dpu rows (expected about 0.10 s and 0.12-0.15 s; BENCHMARKS.md). And our
# tensor-core attention: 2026-11-29 early (commits a6d9faa-d836b3c) P and dS rounded once, 32-key tiles,
# three blocks per SM for the forward and dQ; 2026-11-29 later (commit 31b2626) the forward with 32
# query rows a warp (two row tiles sharing each K and V operand, two blocks per SM); 2026-11-29
# morning (commits 0132577, fdd99c2, e78bf4f) the backward in FlashAttention-2's layout too: dQ with
# 32 query rows a warp, dK/dV split two ways (32 keys x 32 queries of S^T a warp, P^T and dS^T
# through shared memory, 32 keys x half of D of dK and dV; single-buffered Q and dO refilled as
# soon as each is free). Watch the kernels part's attention rows for
# `tensor-cores` (call7: forward 158.1, backward 132.1 TFLOP/s; estimates about 222 and 157) and
# test_gpu_families.py's bf16 tensor-core checks on the hardware. Before packing, `bash
# bench/gpu_calls/build-ab.sh d836b3c` (the 16-row forward and backward; no device time) and carry
# [".gpu", ".gpu-ab"], so that the call times both builds' kernels side by side (the A/B loop
# below). One A/B binary only: the tree (6 MB), the pack (57.5 MB) and it (2.8 MB) make 63 MiB of
# the 64 MiB that may travel.
# 1. opt13's eight rows (3p and 3r30-dpu are call9's param-only and r30opt-dpu); 2. kernels and the gpu
# test suite; 3. tests/gpu/test_gpu_allocation_drift.py, test_gpu_zero_equivalence.py (its new
# one-rank offload_param-alone case) and test_gpu_families.py; 4. ncu on both builds' three tensor-core
# kernels while time is left. About 7-8 minutes; results in $OUT/res.tgz, the summary on stdout.
R=/tmp/res; mkdir -p $R; W=/tmp/wc; B=$W/bin; P=$W/proj; t0=$(date +%s)
timeout 330 bash .gpu/gpu_check.sh run --out $R/c --work $W --parts "env opt13 kernels tests" >$R/c.out 2>&1
echo "opt13+kernels+tests rc $? after $(( $(date +%s) - t0 )) s"; cat $R/c/summary.md; grep -h "^attention_" $R/c/kernels.txt 2>/dev/null
for f in $R/c/opt13-*.log; do echo "$f: $(grep -h '^memory:' $f | grep -o 'predicted.*peak') | $(grep -h 'peak memory' $f)"; done
python3 -c "import json, statistics; [print(d['label'], 'median s/step', round(statistics.median(d['step_seconds'][1:]), 4)) for d in map(json.loads, open('$R/c/bench.json'))]"
tar -C /tmp -czf $OUT/res.tgz res  # (again at the end)
# A/B of the kernels: bench_kernels of other commits (bench/gpu_calls/build-ab.sh puts them in
# .gpu-ab, carried with .gpu), each run beside this build's, attention rows only, on this machine.
for packed in .gpu-ab/bench_kernels-*.xz; do
  [[ -f "$packed" ]] && xz -dc "$packed" >$W/$(basename "$packed" .xz) && chmod +x $W/$(basename "$packed" .xz)
done
# $W/wrap/ab: the run's zerotune wrapper (library paths of the unpacked bundle) around binary $1.
wrap_binary() { sed "s|exec $B/zerotune|exec $(readlink -f "$1")|" $W/wrap/zerotune >$W/wrap/ab && chmod +x $W/wrap/ab; }
for ab in $B/bench_kernels $W/bench_kernels-*; do
  [[ -x "$ab" ]] || continue
  wrap_binary "$ab"
  echo "[$(( $(date +%s) - t0 )) s] A/B $ab"
  timeout 120 $W/wrap/ab cuda --shape 7b --dtype bf16 --peak-tflops 989 --peak-gbps 3350 >$R/ab-$(basename "$ab").txt 2>&1
  grep -E "^attention_(forward|backward)" $R/ab-$(basename "$ab").txt
done
echo "[$(( $(date +%s) - t0 )) s] drift"
ZT_PYTESTS='allocation_drift|zero_equivalence|gpu_families' timeout 200 bash .gpu/gpu_check.sh run --out $R/d --work $W --parts "env pytests" >$R/d.out 2>&1
echo "drift rc $? after $(( $(date +%s) - t0 )) s"; tail -n 4 $R/d/pytests.txt 2>/dev/null
cp $W/test_gpu_*.log $R/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
# Nsight Compute's view of the tensor-core kernels of each binary (call4's sections: occupancy,
# warp states, pipes), while the call's 600 s allow: whether 8 warps of two product chains (32 rows
# a warp) still wait on latency as call4's 8 warps of one did, and whether the single-buffered dK/dV
# blocks wait on their tile loads (warp state "long scoreboard" / barrier).
if command -v ncu >/dev/null; then
  for kernel in attention_backward_dkdv_tc_kernel attention_forward_tc_kernel attention_backward_dq_tc_kernel; do
    for ab in $B/bench_kernels $W/bench_kernels-*; do
      [[ -x "$ab" ]] && (( $(date +%s) - t0 < 540 )) || continue
      wrap_binary "$ab"
      echo "[$(( $(date +%s) - t0 )) s] ncu $kernel $ab"
      ZT_CUDA_ATTENTION=tensor-cores timeout 40 ncu --kernel-name regex:"$kernel" --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis $W/wrap/ab cuda --shape 7b --iters 1 --repeats 1 >$R/ncu-$kernel-$(basename "$ab").txt 2>&1
      grep -E "Duration|Achieved Occupancy|Issue Slots Busy|Registers Per Thread" $R/ncu-$kernel-$(basename "$ab").txt | head -6
    done
  done
  tar -C /tmp -czf $OUT/res.tgz res
fi

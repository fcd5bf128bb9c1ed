#!/bin/bash
# The evening session's second call (2026-11-28), after 2026-11-28-call3.sh. Same pack command
# (ZT_PACK_XZ_LEVEL=-6 bash scripts/gpu_check.sh pack --out .gpu --binary-dir build), carry [".gpu"]:
#   OUT=$OUT bash bench/gpu_calls/2026-11-28-call4.sh
# 1. opt13 again: offload_optimizer.ratio + offload_param now rounds the resident part to the host
#    unit by unit without a host wait (call3: the 3o-r30 rows' device peak 1.67 GiB over the
#    prediction); 2. the 3o run's allocations for 2 steps (ZT_ALLOCATION_LOG), its peak was ~0.1 GiB
#    over the prediction in call3; 3. whether Nsight Compute runs here, and if so its view of our
#    tensor-core attention kernels (issue 29: 16%/12% of the GEMM peak in call3); 4. the memory
#    model against the real GPU: the allocation-drift cases (with the new check that no large op
#    scratch goes uncounted, and the new ratio + offload_param bf16 case) and the memory grid.
# About 6-9 minutes; results in $OUT/res.tgz.
R=/tmp/res; mkdir -p $R; G=.gpu/gpu_check.sh; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "env opt13 pytests"
ZT_PYTESTS='allocation_drift|memory_grid' timeout 360 bash $G run --out $R/c --work /tmp/wc --parts "env opt13 pytests" \
  >$R/c.out 2>&1
el "done (rc $?)"
W=/tmp/wc; Z=$W/wrap/zerotune; cp $W/f*.log $R/ 2>/dev/null
el "allocation log, 3o"
ZT_ALLOCATION_LOG=$R/alog-3o timeout 60 $Z train --model $W/opt --data $W/dopt --out $W/a3o --deepspeed $W/f3o.json \
  --max-steps 2 --device cuda --seed 1 --log-every 1 --no-save-at-end >$R/alog-3o.txt 2>&1
el "done (rc $?)"
{ command -v ncu nsys; ls /usr/local/cuda/bin; } >$R/tools.txt 2>&1
if command -v ncu >/dev/null; then
  sed 's|/zerotune "\$@"|/bench_kernels "$@"|' $W/wrap/zerotune >$W/wrap/bench_kernels; chmod +x $W/wrap/bench_kernels
  el "ncu on the tensor-core attention"
  ZT_CUDA_ATTENTION=tensor-cores timeout 120 ncu --kernel-name regex:'attention_.*tc_kernel' --filter-mode per-launch-config --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats $W/wrap/bench_kernels cuda --shape 7b --iters 1 --repeats 1 \
    >$R/ncu.txt 2>&1
  el "done (rc $?)"
fi
tar -C /tmp -czf $OUT/res.tgz res
cat $R/c/summary.md 2>/dev/null
for f in $R/c/opt13-*.log; do echo "$f: $(grep -h '^memory:' $f | grep -o 'predicted.*peak') | $(grep -h 'peak memory' $f)"; done
grep -h "^memory:\|peak memory" $R/alog-3o.txt; wc -l $R/alog-3o.* | tail -1; head -3 $R/tools.txt; tail -5 $R/ncu.txt 2>/dev/null
cat $R/c/pytests.txt 2>/dev/null | tail -15

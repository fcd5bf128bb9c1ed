#!/bin/bash
# Prepared 2026-11-28 (a session without a GPU); ran 2026-11-28 17:00 UTC on an H200 (the evening session's first call). Run from
# the repository root with `.gpu/` from
#   ZT_PACK_XZ_LEVEL=-6 bash scripts/gpu_check.sh pack --out .gpu --binary-dir build
# (56 MiB on 2026-11-28 afternoon, 40 s; the default -1 made 63 MiB, at the 64 MiB a call carries;
# its env part checks a -march=native build's CPU flags on the node) and carry [".gpu"]:
#   OUT=$OUT bash bench/gpu_calls/2026-11-28-call3.sh
# 1. selftest: the link rows now time queued copies (the H200's 1.69 GB/s host -> device row timed
#    copy()'s staging); 2. tests: zt_gpu_tests, whose fp16 common-key dq case changed (issue 29);
# 3. opt13 with the partial-offload rows 3o-r30 and 3o-r30-dpu (issue 30's 2x target) and the
#    one-rank offload_param gathers now queued (the 3o rows); 4. the CPU AdamW at the node's bandwidth;
# 5. kernels: bench_kernels at the 7B shape, where our tensor-core attention (issue 29 item 3, now
#    mma.sync + ldmatrix + cp.async, 2026-11-28 afternoon) meets its 25%-of-roofline aim or not; tests
#    runs its gpu.cuda_attention cases on the real mma/ldmatrix/cp.async for the first time;
# 6. sanitize: compute-sanitizer racecheck and synccheck on those kernels alone (shared-memory
#    hazards of the cp.async double buffering and of the forward's Q tile, refilled by its first
#    prefetch, which the emulator's copies-at-issue run checks only for the schedules it tries).
# About 8 minutes; results in $OUT/res.tgz, the summary tables on stdout.
R=/tmp/res; mkdir -p $R; G=.gpu/gpu_check.sh; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "env selftest tests kernels opt13 adam sanitize"
ZT_SANITIZE_TOOLS="racecheck synccheck" ZT_SANITIZE_TESTS=cuda_attention/tensor_core_head_dims \
  timeout 570 bash $G run --out $R/c --work /tmp/wc --parts "env selftest tests kernels opt13 adam sanitize" >$R/c.out 2>&1
el "done (rc $?)"
cp /tmp/wc/f*.log $R/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
cat $R/c/summary.md 2>/dev/null
grep -h "host -> device\|device -> pinned" $R/c.out | head -4
grep -h "^attention_" $R/c/kernels.txt 2>/dev/null

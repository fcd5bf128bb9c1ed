#!/bin/bash
# The night session's first call (2026-11-28, an H200). Pack with
#   ZT_PACK_XZ_LEVEL=-6 bash scripts/gpu_check.sh pack --out .gpu --binary-dir build
# and carry [".gpu"]:
#   OUT=$OUT bash bench/gpu_calls/2026-11-28-call7.sh
# 1. tests: zt_gpu_tests on the hardware after the tensor-core attention's base-2 exponentials and
#    unmasked interior tiles (issue 29), and the evening's counting-backend and round_to changes;
# 2. kernels: bench_kernels at the 7B shape against call5's 144.8 / 108.4 TFLOP/s;
# 3. opt13: one-rank offload_param's gathers now on the transfer queue beside the compute (issue 30;
#    call3: 3o 0.584, 3o-dpu 0.395, 3o-r30 0.312, 3o-r30-dpu 0.2255 s/step), and the memory
#    model's predictions against the measured peaks (3o 12.03, 3o-r30 22.31 GiB expected).
# About 5 minutes; results in $OUT/res.tgz, the summary on stdout.
R=/tmp/res; mkdir -p $R; t0=$(date +%s)
timeout 420 bash .gpu/gpu_check.sh run --out $R/c --work /tmp/wc --parts "env tests kernels opt13" >$R/c.out 2>&1
echo "rc $? after $(( $(date +%s) - t0 )) s"
cp /tmp/wc/f*.log $R/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
cat $R/c/summary.md 2>/dev/null
grep -h "^attention_" $R/c/kernels.txt 2>/dev/null
for f in $R/c/opt13-*.log; do echo "$f: $(grep -h '^memory:' $f | grep -o 'predicted.*peak') | $(grep -h 'peak memory' $f)"; done

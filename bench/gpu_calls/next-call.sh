#!/bin/bash
# Prepared 2026-11-28 evening (after the session's four calls; not yet run): the next lent GPU's
# first call. Pack with
#   ZT_PACK_XZ_LEVEL=-6 bash scripts/gpu_check.sh pack --out .gpu --binary-dir build
# (56 MiB) and carry [".gpu"]:
#   OUT=$OUT bash bench/gpu_calls/next-call.sh
# What it checks on the hardware after the evening's last commits, none of which a GPU has run:
# 1. tests + pytests: every gpu test (zt_gpu_tests; tests/gpu/*.py but the long grids), since the
#    counting backend's waits changed (the memory model of every offload_param run) and
#    CpuBackend::round_to is in place (the CPU oracle of every gpu pytest);
# 2. opt13: the memory model's predictions now equal to the H200's measured peaks at 0.01 GiB
#    (3o 12.03, 3o-r30 22.31 GiB; cli.estimate_matches_h200 holds the prediction side);
# 3. kernels: the attention figures again (144.8 / 108.4 TFLOP/s in call5), as a check of the run.
# About 8 minutes; results in $OUT/res.tgz, the summary on stdout.
R=/tmp/res; mkdir -p $R
timeout 570 bash .gpu/gpu_check.sh run --out $R/c --work /tmp/wc --parts "env tests kernels opt13 pytests" >$R/c.out 2>&1
echo "rc $?"
cp /tmp/wc/f*.log /tmp/wc/test_gpu_*.log $R/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
cat $R/c/summary.md 2>/dev/null
for f in $R/c/opt13-*.log; do echo "$f: $(grep -h '^memory:' $f | grep -o 'predicted.*peak') | $(grep -h 'peak memory' $f)"; done
tail -12 $R/c/pytests.txt 2>/dev/null

#!/bin/bash
# The evening session's third call (2026-11-28): our attention kernels' blocks in longest-first
# order over every head (tile_grid, cuda_attention.cuh; call4's ncu put the partial last wave at up
# to a quarter of their time): the kernel suites on the hardware, then bench_kernels at the 7B shape
# against call3's 121.3 / 89.8 TFLOP/s. Pack as for call3/call4, carry [".gpu"]:
#   OUT=$OUT bash bench/gpu_calls/2026-11-28-call5.sh
R=/tmp/res; mkdir -p $R
timeout 200 bash .gpu/gpu_check.sh run --out $R/c --work /tmp/wc --parts "env tests kernels" >$R/c.out 2>&1
echo "rc $?"
tar -C /tmp -czf $OUT/res.tgz res
cat $R/c/summary.md 2>/dev/null
grep -h "^attention_" $R/c/kernels.txt 2>/dev/null

#!/bin/bash
# The night session's third call (2026-11-28, an H200; the node has no nsys, call8 found): which
# part of the opt13 offload step is on the critical path, by taking parts away, 10 steps each
# (medians of steps 2-10 from metrics.jsonl):
#   r30-dpu     ZeRO-3 + offload_optimizer (ratio 0.3) + offload_param + --delayed-param-update 2
#   param-only  ZeRO-3 + offload_param alone (every parameter upload, no CPU optimizer)
#   r30opt-dpu  ZeRO-3 + offload_optimizer (ratio 0.3) + --delayed-param-update 2, parameters on the GPU
#   opt-dpu     ZeRO-3 + offload_optimizer (all of it) + --delayed-param-update 2, parameters on the GPU
# Same pack as call7 (carry [".gpu"]):  OUT=$OUT bash bench/gpu_calls/2026-11-28-call9.sh
R=/tmp/res; mkdir -p $R; W=/tmp/wc; B=$W/bin; P=$W/proj
timeout 100 bash .gpu/gpu_check.sh run --out $R/c --work $W --parts "env" >$R/c.out 2>&1 || { tail $R/c.out; exit 1; }
eval "$(sed -n 2,3p $W/wrap/zerotune)"  # the bundle's environment (gpu_check.sh's wrapper), for $B's binaries
timeout 120 $B/zerotune init --config $P/job_scripts/deepspeed-chat/models/opt-1.3b/config.json --out $W/opt --seed 1 --dtype fp16 >/dev/null 2>&1
timeout 60 $B/make_bench_data $W/dopt --seq 512 --samples 256 --vocab 50272 >/dev/null
opt='"offload_optimizer":{"device":"cpu","pin_memory":true}'; opt30='"offload_optimizer":{"device":"cpu","pin_memory":true,"ratio":0.3}'
par='"offload_param":{"device":"cpu","pin_memory":true}'
declare -A cfg=([r30-dpu]="$opt30,$par" [param-only]="$par" [r30opt-dpu]="$opt30" [opt-dpu]="$opt")
for z in r30-dpu param-only r30opt-dpu opt-dpu; do
  extra=(); [[ $z == *-dpu ]] && extra=(--delayed-param-update 2)
  printf '{"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":1,"fp16":{"enabled":true,"loss_scale_window":100},"gradient_clipping":1.0,"optimizer":{"type":"AdamW","params":{"lr":1e-5}},"zero_optimization":{"stage":3,%s}}' "${cfg[$z]}" >$W/f$z.json
  timeout 100 $B/zerotune train --model $W/opt --data $W/dopt --out $W/f$z --deepspeed $W/f$z.json --max-steps 10 \
    --device cuda --seed 1 --log-every 1 --no-save-at-end "${extra[@]}" >$R/$z.log 2>&1
  echo "$z rc $? $(grep -h 'peak memory' $R/$z.log)"
  env -u LD_LIBRARY_PATH python3 $P/bench/bench_results.py summarize $W/f$z --label "$z" 2>&1 | tr -d '\n' >$R/$z.json
  env -u LD_LIBRARY_PATH python3 -c "import json,statistics; d=json.load(open('$R/$z.json')); t=d['step_seconds'][1:]; print('$z median s/step', round(statistics.median(t),4), 'min', round(min(t),4), 'of', len(t))"
done
tar -C /tmp -czf $OUT/res.tgz res

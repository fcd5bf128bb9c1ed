#!/bin/bash
# The night session's second call (2026-11-28, an H200): call7 measured no gain from one-rank
# offload_param's gathers on the transfer queue (3o-r30-dpu 0.2314 s/step against call3's 0.2255), so
# an Nsight Systems timeline of two opt13 rows (3o-r30-dpu and 3o-r30, 8 steps each) shows where the
# device work, the uploads and the downloads of a step go, and whether they overlap. Same pack as
# call7 (carry [".gpu"]):  OUT=$OUT bash bench/gpu_calls/2026-11-28-call8.sh
# Results: $OUT/res.tgz (the traces as sqlite).
R=/tmp/res; mkdir -p $R; W=/tmp/wc; B=$W/bin; P=$W/proj
timeout 100 bash .gpu/gpu_check.sh run --out $R/c --work $W --parts "env" >$R/c.out 2>&1 || { tail $R/c.out; exit 1; }
NSYS=$(ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -n 1)
echo "nsys: ${NSYS:-none}"; [[ -n $NSYS ]] || exit 1
timeout 120 $B/zerotune init --config $P/job_scripts/deepspeed-chat/models/opt-1.3b/config.json --out $W/opt --seed 1 --dtype fp16 >/dev/null 2>&1
timeout 60 $B/make_bench_data $W/dopt --seq 512 --samples 256 --vocab 50272 >/dev/null
for z in 3o-r30-dpu 3o-r30; do
  extra=(); [[ $z == *-dpu ]] && extra=(--delayed-param-update 2)
  printf '{"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":1,"fp16":{"enabled":true,"loss_scale_window":100},"gradient_clipping":1.0,"optimizer":{"type":"AdamW","params":{"lr":1e-5}},"zero_optimization":{"stage":3,"offload_optimizer":{"device":"cpu","pin_memory":true,"ratio":0.3},"offload_param":{"device":"cpu","pin_memory":true}}}' >$W/f$z.json
  timeout 150 $NSYS profile -t cuda,osrt --sample=none --cpuctxsw=none -o $R/$z --force-overwrite true \
    $B/zerotune train --model $W/opt --data $W/dopt --out $W/f$z --deepspeed $W/f$z.json --max-steps 8 \
    --device cuda --seed 1 --log-every 1 --no-save-at-end "${extra[@]}" >$R/$z.log 2>&1
  echo "$z rc $?"; tail -n 4 $R/$z.log
  timeout 60 $NSYS export --type sqlite -o $R/$z.sqlite $R/$z.nsys-rep >/dev/null 2>&1; rm -f $R/$z.nsys-rep
done
ls -la $R; tar -C /tmp -czf $OUT/res.tgz res; ls -la $OUT

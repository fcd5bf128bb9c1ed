#!/bin/bash
# Session 8's second device call: opt13 again after the fp16 CPU-update fix, profiles, the
# per-bucket update (bf16, no clipping), then the GPU tests that failed in the first call.
R=/tmp/res; mkdir -p $R; G=.gpu/gpu_check.sh; t0=$(date +%s)
have=" $(grep -m1 '^flags' /proc/cpuinfo) "; miss=""
for f in $(cat bench/gpu_calls/2026-11-28-need_flags.txt); do [[ "$have" == *" $f "* ]] || miss+=" $f"; done
if [[ -n "$miss" ]]; then echo "NODE LACKS:$miss"; exit 3; fi
xz -dc .gpu/bin.tar.xz | gzip -1 >.gpu/bin.tar.gz || exit 4
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "timed: env opt13 adam"
bash $G run --out $R/c --work /tmp/wc --parts "env opt13 adam" >$R/c.out 2>&1
W=/tmp/wc; Z=$W/wrap/zerotune
for z in 3o 3o-dpu; do
  el "profile z$z"
  x=(); [[ $z == 3o-dpu ]] && x=(--delayed-param-update 2)
  timeout 60 $Z train --model $W/opt --data $W/dopt --out $W/p$z --deepspeed $W/f$z.json --max-steps 7 --device cuda \
    --seed 1 --log-every 1 --no-save-at-end --profile-step 6 "${x[@]}" >$R/prof-z$z.txt 2>&1; echo "rc=$?" >>$R/prof-z$z.txt
done
# bf16 without clipping: ZeRO-0, offload, offload with the update per bucket during the backward.
for z in b0 b3o b3o-bucket; do
  [[ $(( $(date +%s) - t0 )) -lt 200 ]] || { el "skip $z (time)"; continue; }
  el "bf16 $z"
  off=""; x=()
  [[ $z == b3o* ]] && off=',"offload_optimizer":{"device":"cpu","pin_memory":true},"offload_param":{"device":"cpu","pin_memory":true}'
  [[ $z == b3o-bucket ]] && x=(--update-per-bucket)
  st=0; [[ $z == b3o* ]] && st=3
  printf '{"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":1,"bf16":{"enabled":true},"optimizer":{"type":"AdamW","params":{"lr":1e-5}},"zero_optimization":{"stage":%s%s}}' $st "$off" >$W/$z.json
  timeout 80 $Z train --model $W/opt --data $W/dopt --out $W/$z --deepspeed $W/$z.json --max-steps 8 --device cuda \
    --seed 1 --log-every 1 --no-save-at-end "${x[@]}" >$R/$z.txt 2>&1; echo "rc=$?" >>$R/$z.txt
  cp $W/$z/metrics.jsonl $R/$z.metrics.jsonl 2>/dev/null
done
el "correctness: tests || pytests selftest generate"
(timeout 90 bash $G run --out $R/a --work /tmp/wa --parts "env tests" >$R/a.out 2>&1) &
sleep 8
(ZT_PYTESTS='selftest|generate' timeout 90 bash $G run --out $R/b --work /tmp/wb --parts "env pytests" >$R/b.out 2>&1) &
wait
el "done"
mkdir -p $R/pylogs; cp /tmp/wb/test_gpu_*.log $R/pylogs/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
for f in c a b; do echo "--- $f"; cat $R/$f/summary.md 2>/dev/null; done
grep -h "step\b\|^optimizer\|^other\|^total" $R/prof-z3o*.txt | grep -v "^step" | head
for z in b0 b3o b3o-bucket; do echo "$z: $(grep -o 'throughput.*' $R/$z.txt)"; done

#!/bin/bash
# Session 8's first device call: the timed parts alone, then the correctness parts side by side.
R=/tmp/res; mkdir -p $R; G=.gpu/gpu_check.sh; t0=$(date +%s)
# The binaries are this VM's -march=native build: every instruction-set flag it has must be here.
have=" $(grep -m1 '^flags' /proc/cpuinfo) "; miss=""
for f in $(cat bench/gpu_calls/2026-11-28-need_flags.txt); do [[ "$have" == *" $f "* ]] || miss+=" $f"; done
grep -m1 'model name' /proc/cpuinfo; nproc
if [[ -n "$miss" ]]; then echo "NODE LACKS:$miss"; exit 3; fi
xz -dc .gpu/bin.tar.xz | gzip -1 >.gpu/bin.tar.gz || exit 4
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "timed: env opt13 adam"
bash $G run --out $R/c --work /tmp/wc --parts "env opt13 adam" >$R/c.out 2>&1
W=/tmp/wc; Z=$W/wrap/zerotune
for z in 0 3 3o; do
  el "profile z$z"
  timeout 70 $Z train --model $W/opt --data $W/dopt --out $W/p$z --deepspeed $W/f$z.json --max-steps 7 --device cuda \
    --seed 1 --log-every 1 --no-save-at-end --profile-step 6 >$R/prof-z$z.txt 2>&1; echo "rc=$?" >>$R/prof-z$z.txt
done
nvidia-smi >$R/nvidia-smi.txt 2>&1; lscpu >$R/lscpu.txt 2>&1; free -g >>$R/lscpu.txt
el "correctness: tests selftest || pytests (all, at once)"
(timeout 260 bash $G run --out $R/a --work /tmp/wa --parts "env tests selftest" >$R/a.out 2>&1) &
sleep 15
(OMP_NUM_THREADS=1 ZT_PYTESTS='.' ZT_PYTESTS_JOBS=24 timeout 250 bash $G run --out $R/b --work /tmp/wb --parts "env pytests" >$R/b.out 2>&1) &
wait
el "done"
mkdir -p $R/pylogs; cp /tmp/wb/test_gpu_*.log /tmp/wb/pytests-rc.txt $R/pylogs/ 2>/dev/null
tar -C /tmp -czf $OUT/res.tgz res
for f in c a b; do echo "--- $f"; cat $R/$f/summary.md 2>/dev/null; done
grep -h -A25 "profile" $R/prof-z3.txt | head -40

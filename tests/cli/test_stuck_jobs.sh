#!/usr/bin/env bash
# tests/cli/test_stuck_jobs.sh: what must never leave a training job stuck or silently wrong
# (issue 17): a damaged metrics.jsonl line on resume, two jobs into one --out (the lock, also
# after kill -9), a re-run into a directory holding another run (refused without --resume or
# --overwrite), leftover <tag>.tmp of a failed save, a missing `latest`, a stop signal during
# start-up, and --resume / export given the run directory, checkpoints/ or the `latest` file.
# Usage: test_stuck_jobs.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs

# train OUT ARGS...: a short run (2 steps per epoch of 16 samples), output in $WORK/<name>.log.
train() {
  local out="$1"; shift
  "$ZEROTUNE" train --model "$M" --data "$D" --out "$out" --deepspeed "$WORK/ds.json" --seed 1 "$@"
}
# metrics_steps OUT: the step numbers of OUT/metrics.jsonl (every line must be a JSON record).
metrics_steps() {
  "$PYTHON" -c 'import json, sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1]) if l.strip()))' \
    "$1/metrics.jsonl"
}

R="$WORK/run"
train "$R" --max-steps 2 --save-every 1 >"$WORK/base.log" 2>&1 || { cat "$WORK/base.log"; fatal "the baseline run failed"; }
echo "ok   baseline run (2 steps, checkpoints 1 and 2)"

# --- A damaged metrics line (a write cut short, two writers) is dropped on resume -------------
"$PYTHON" - "$R/metrics.jsonl" <<'PY' || fatal "damaging metrics.jsonl failed"
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
lines.insert(1, '{"step": 1, "loss": 3.2, "lr\n')  # a record cut mid-write, then a newline
open(sys.argv[1], "w").write("".join(lines))
PY
train "$R" --max-steps 3 --resume auto >"$WORK/damaged.log" 2>&1
status=$?
steps="$(metrics_steps "$R" 2>>"$WORK/damaged.log")"
[[ "$status" -eq 0 && "$steps" == "1 2 3" ]] && grep -q "is not a metrics record" "$WORK/damaged.log"
check damaged-metrics-line-dropped-on-resume $? "$WORK/damaged.log" \
  "want exit 0, steps '1 2 3' and a warning; got exit $status, steps '$steps'"

# --- The lock: a second job into the same --out refuses at start ------------------------------
flock --no-fork "$R/.zerotune.lock" sleep 60 &
holder=$!
sleep 0.5
expect_error second-job-same-out-refused "is in use by another zerotune job" "$R" \
  -- train --model "$M" --data "$D" --out "$R" --deepspeed "$WORK/ds.json" --seed 1 --max-steps 4 --resume auto
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
# ... and a job killed with -9 does not leave it locked.
L="$WORK/killed"
ZT_FAULT="hang:step:0:1" "$ZEROTUNE" train --model "$M" --data "$D" --out "$L" --deepspeed "$WORK/ds.json" --max-steps 2 \
  >"$WORK/hang.log" 2>&1 &
hung=$!  # zerotune itself (not a subshell), so that kill -9 reaches it
for _ in $(seq 1 100); do [[ -s "$L/run.json" ]] && break; sleep 0.1; done
kill -9 "$hung" 2>/dev/null; wait "$hung" 2>/dev/null
train "$L" --max-steps 2 --resume auto >"$WORK/after-kill.log" 2>&1
check lock-released-after-kill-9 $? "$WORK/after-kill.log" "a run after kill -9 of the previous one failed"

# --- A re-run into a directory holding another run ---------------------------------------------
expect_error rerun-without-resume-refused "$R" "already holds a run" "--resume auto" "--overwrite" \
  -- train --model "$M" --data "$D" --out "$R" --deepspeed "$WORK/ds.json" --seed 1 --max-steps 1
O="$WORK/overwritten"
cp -r "$R" "$O"
train "$O" --max-steps 1 --overwrite >"$WORK/overwrite.log" 2>&1
status=$?
steps="$(metrics_steps "$O" 2>>"$WORK/overwrite.log")"
[[ "$status" -eq 0 && "$steps" == "1" && ! -e "$O/checkpoints/global_step3" && -e "$O/checkpoints/global_step1" ]]
check overwrite-starts-over $? "$WORK/overwrite.log" "want exit 0, metrics of step 1 only, no global_step3; got exit $status, steps '$steps'"
expect_error overwrite-and-resume-contradict "--overwrite" "--resume" \
  -- train --model "$M" --data "$D" --out "$O" --deepspeed "$WORK/ds.json" --seed 1 --max-steps 1 --overwrite --resume auto

# --- Leftovers of a failed save are removed at start --------------------------------------------
mkdir -p "$R/checkpoints/global_step4.tmp" && head -c 100000 /dev/zero >"$R/checkpoints/global_step4.tmp/rank-00000.h5"
train "$R" --max-steps 4 --resume auto >"$WORK/tmp.log" 2>&1
status=$?
[[ "$status" -eq 0 && -e "$R/checkpoints/global_step4/manifest.json" ]] && ! ls -d "$R"/checkpoints/*.tmp >/dev/null 2>&1 \
  && grep -q "global_step4.tmp" "$WORK/tmp.log"
check leftover-tmp-removed-at-start $? "$WORK/tmp.log" "want exit 0, no *.tmp left and a line naming it (exit $status)"

# --- A missing `latest` with complete checkpoints: the newest complete one, said so ------------
rm "$R/checkpoints/latest"
train "$R" --max-steps 5 --resume auto >"$WORK/latest.log" 2>&1
status=$?
steps="$(metrics_steps "$R" 2>>"$WORK/latest.log")"
[[ "$status" -eq 0 && "$steps" == "1 2 3 4 5" ]] && grep -q "newest complete checkpoint, global_step4" "$WORK/latest.log" \
  && grep -q "resumed from .*global_step4 at step 4" "$WORK/latest.log"
check missing-latest-falls-back $? "$WORK/latest.log" "want a resume at step 4 said so, metrics 1..5; got exit $status, steps '$steps'"
# `latest` naming a checkpoint that is gone: the same fall-back.
echo "global_step99" >"$R/checkpoints/latest"
train "$R" --max-steps 5 --resume auto >"$WORK/latest-bad.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && grep -q "names 'global_step99'" "$WORK/latest-bad.log" && grep -q "at step 5" "$WORK/latest-bad.log"
check latest-naming-nothing-falls-back $? "$WORK/latest-bad.log" "want a resume from global_step5 (exit $status)"

# --- --resume and export take the run directory, checkpoints/ or the `latest` file -------------
for given in "$R" "$R/checkpoints" "$R/checkpoints/latest"; do
  label="resume-from-$(basename "$given")"
  N="$WORK/$label"
  train "$N" --max-steps 6 --resume "$given" >"$WORK/$label.log" 2>&1
  status=$?
  [[ "$status" -eq 0 ]] && grep -q "resumed from .*global_step5 at step 5" "$WORK/$label.log"
  check "$label" $? "$WORK/$label.log" "--resume $given: want a resume at step 5 (exit $status)"
  label="export-from-$(basename "$given")"
  "$ZEROTUNE" export --checkpoint "$given" --model "$M" --out "$WORK/$label" >"$WORK/$label.log" 2>&1
  status=$?
  [[ "$status" -eq 0 && -s "$WORK/$label/model.safetensors" ]] && grep -q "global_step5" "$WORK/$label.log"
  check "$label" $? "$WORK/$label.log" "export --checkpoint $given: want the HF model of global_step5 (exit $status)"
done

# --- A stop signal during start-up (model loading) stops after step 1 with a checkpoint --------
S="$WORK/signal"
ZT_FAULT="sigterm:load:0:0" train "$S" --max-steps 4 >"$WORK/signal.log" 2>&1
status=$?
[[ "$status" -eq 0 && -e "$S/checkpoints/global_step1/manifest.json" ]] && grep -q "stop requested (signal) at step 1" "$WORK/signal.log"
check sigterm-during-loading-saves $? "$WORK/signal.log" "want exit 0 and a checkpoint after step 1 (exit $status)"

# --- A full disk: the save says "No space left on device" with the bytes, no crash; after
# space is freed the same command goes on. (A 1 MiB tmpfs in a private mount namespace:
# `unshare -rm` works as root and, where user namespaces are allowed, without.)
mkdir -p "$WORK/small"
unshare -rm bash -s "$WORK/small" "$ZEROTUNE" "$M" "$D" "$WORK/ds.json" >"$WORK/full.log" 2>&1 <<'SH'
small="$1" zt="$2"
mount -t tmpfs -o size=1M tmpfs "$small" || { echo "cannot mount a tmpfs"; exit 90; }
"$zt" train --model "$3" --data "$4" --deepspeed "$5" --out "$small/out" --max-steps 1 --seed 1
echo "first exit status $?"
mount -o remount,size=16M "$small" || exit 91
"$zt" train --model "$3" --data "$4" --deepspeed "$5" --out "$small/out" --max-steps 1 --seed 1 --resume auto
echo "second exit status $?"
ls "$small/out/checkpoints"
SH
status=$?
[[ "$status" -eq 0 ]] && grep -q "^first exit status 1$" "$WORK/full.log" && grep -q "^second exit status 0$" "$WORK/full.log" \
  && grep -q "No space left on device: it needs about [0-9]* bytes" "$WORK/full.log" && ! grep -qE "$NOISE" "$WORK/full.log" \
  && grep -q "^global_step1$" "$WORK/full.log"
check disk-full-message-and-retry $? "$WORK/full.log" "want a 'No space left on device' error naming the bytes, no crash, then a good retry (status $status)"

finish

#!/usr/bin/env bash
# tests/cli/test_divergence_and_resume.sh (issue 35 item 10): a run that diverges stops with a
# clear error and never makes a non-finite checkpoint `latest`; `--resume auto` whose newest
# checkpoint is damaged falls back to the newest intact one and says so.
#  - weights that turn inf (an absurd --lr) stop the run at the next skipped step, naming it;
#  - a save of such weights is refused, `latest` keeps naming the last finite checkpoint;
#  - 3 consecutive steps skipped for a non-finite gradient while the weights are finite (huge
#    but finite weights whose activations overflow) stop the run (kMaxNonFiniteSteps), and so do
#    3 fp16 overflows in a row at a static loss scale (it cannot drop);
#  - a damaged newest checkpoint (one byte changed: same size, another sha256) on 2 ranks, ZeRO-2
#    (each rank hashes its share): the run resumes from the previous one and says which and why;
#    with no intact checkpoint left, an error names the damage.
# Usage: test_divergence_and_resume.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
make_good_inputs
train() { "$ZEROTUNE" train --model "$M" --data "$D" --micro-batch-size 2 --grad-accum 1 "$@"; }
latest_of() { cat "$1/checkpoints/latest" 2>/dev/null || echo "(none)"; }

# --- weights that become inf: no checkpoint of them, a clear stop ------------------------------
expect_error diverged-save-refused "checkpoint global_step1 not saved: the weights are not finite" \
  "\`latest\` still names the last finite checkpoint" \
  -- train --model "$M" --data "$D" --micro-batch-size 2 --out "$WORK/inf" --lr 1e39 --max-steps 4 --save-every 1
[[ ! -e "$WORK/inf/checkpoints/latest" ]]
check diverged-no-latest $? "" "a checkpoint of non-finite weights became latest: $(latest_of "$WORK/inf")"

expect_error diverged-weights-stop "step 2: the weights are not finite (NaN or inf): the run diverged" \
  -- train --model "$M" --data "$D" --micro-batch-size 2 --out "$WORK/inf2" --lr 1e39 --max-steps 6 --no-save-at-end

# A good checkpoint first, then a resume that diverges: latest stays on the good one.
train --out "$WORK/good" --max-steps 2 --save-every 2 >"$WORK/good.log" 2>&1 || { cat "$WORK/good.log"; fatal "the good run failed"; }
expect_error diverged-after-resume "checkpoint global_step3 not saved: the weights are not finite" \
  -- train --model "$M" --data "$D" --micro-batch-size 2 --grad-accum 1 --out "$WORK/good" --resume auto --lr 1e39 \
  --max-steps 5 --save-every 1
[[ "$(latest_of "$WORK/good")" == "global_step2" && ! -e "$WORK/good/checkpoints/global_step3" ]]
check diverged-latest-stays-finite $? "" "latest is $(latest_of "$WORK/good"), want global_step2 and no global_step3"

# --- finite weights whose activations overflow: 3 consecutive non-finite gradients ---------------
expect_error non-finite-gradients-stop "3 consecutive steps were skipped because the gradient is not finite" \
  "although the weights are" \
  -- train --model "$M" --data "$D" --micro-batch-size 2 --out "$WORK/huge" --lr 1e20 --max-steps 8 --no-save-at-end
grep -q "warning: step 3 skipped (the gradient is not finite)" "$WORK/non-finite-gradients-stop.stdout"
check non-finite-gradients-warned-first $? "$WORK/non-finite-gradients-stop.stdout" "want the skipped steps warned before the stop"

# fp16 with a static loss scale so large that every step overflows: the scale cannot adapt.
"$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["fp16"] = {"enabled": True, "loss_scale": 1e38}; json.dump(d, open(sys.argv[2], "w"))' \
  "$WORK/ds.json" "$WORK/ds-static.json" || fatal "writing the fp16 JSON failed"
expect_error static-fp16-overflows-stop "3 consecutive steps were skipped" "fp16 gradient overflow at loss scale" \
  "the static fp16.loss_scale is too large" \
  -- train --model "$M" --data "$D" --out "$WORK/static" --deepspeed "$WORK/ds-static.json" --max-steps 4 --no-save-at-end

# --- --resume auto past a damaged checkpoint -----------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks() { mpirun -np 2 --oversubscribe "$ZEROTUNE" train --model "$M" --data "$D" --micro-batch-size 2 --grad-accum 1 \
  --zero-stage 2 --out "$WORK/two" "$@"; }
ranks --max-steps 4 --save-every 2 >"$WORK/two.log" 2>&1 || { cat "$WORK/two.log"; fatal "the two-rank run failed"; }
# One byte of rank 1's file changed: the size stays, the sha256 does not (rank 1 hashes it).
"$PYTHON" - "$WORK/two/checkpoints/global_step4/rank-00001.h5" <<'PY' || fatal "damaging the checkpoint failed"
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0xFF
open(path, "wb").write(bytes(data))
PY
ranks --max-steps 6 --save-every 2 --resume auto >"$WORK/fallback.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && grep -q "global_step4 is damaged (.*rank-00001.h5: sha256 does not match the manifest" "$WORK/fallback.log" \
  && grep -q "resuming from $WORK/two/checkpoints/global_step2, the newest intact checkpoint" "$WORK/fallback.log" \
  && grep -q "resumed from $WORK/two/checkpoints/global_step2 at step 2" "$WORK/fallback.log" \
  && [[ "$(latest_of "$WORK/two")" == "global_step6" ]]
check resume-auto-falls-back $? "$WORK/fallback.log" "want exit 0 (got $status), the fall-back to global_step2 said, latest global_step6"

# Nothing intact: an error that names the damage.
train --out "$WORK/one" --max-steps 2 --save-every 2 >"$WORK/one.log" 2>&1 || { cat "$WORK/one.log"; fatal "the one-checkpoint run failed"; }
"$PYTHON" -c 'import sys; p = sys.argv[1]; d = bytearray(open(p, "rb").read()); d[-100] ^= 0xFF; open(p, "wb").write(bytes(d))' \
  "$WORK/one/checkpoints/global_step2/rank-00000.h5" || fatal "damaging the checkpoint failed"
expect_error resume-auto-nothing-intact "global_step2 is damaged" "sha256 does not match" "no older checkpoint" \
  -- train --model "$M" --data "$D" --micro-batch-size 2 --grad-accum 1 --out "$WORK/one" --max-steps 4 --resume auto

finish

#!/usr/bin/env bash
# tests/cli/test_quick_tour.sh: scripts/tour.sh (the README's one command for the main job)
# runs end to end with this build: prep -> train on 2 ranks with ZeRO-2 -> export -> report, and
# leaves what it promises (one metrics record per step, the last checkpoint, an HF model
# directory, the report).
# Usage: test_quick_tour.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

ZEROTUNE="$ZEROTUNE" PYTHON="$PYTHON" ZT_TOUR_STEPS=8 bash "$REPO/scripts/tour.sh" "$WORK/tour" >"$WORK/tour.log" 2>&1
status=$?
check tour-script-exits-0 "$status" "$WORK/tour.log" "scripts/tour.sh exited $status"
steps="$("$PYTHON" -c 'import json, sys; print(len([json.loads(l) for l in open(sys.argv[1]) if l.strip()]))' \
  "$WORK/tour/run/metrics.jsonl" 2>&1)"
[[ "$steps" == "8" ]]
check tour-eight-steps $? "" "metrics.jsonl holds $steps records, want 8"
[[ -s "$WORK/tour/hf-model/model.safetensors" && -s "$WORK/tour/hf-model/config.json" && -s "$WORK/tour/run/report.html" \
   && "$(cat "$WORK/tour/run/checkpoints/latest")" == "global_step8" ]]
check tour-outputs $? "$WORK/tour.log" "want the HF model, the report and checkpoint global_step8"
"$PYTHON" - "$WORK/tour/hf-model" <<'PY' >"$WORK/load.log" 2>&1
import sys, transformers
transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
PY
check tour-model-loads-in-transformers $? "$WORK/load.log" "transformers cannot load the exported model"

finish

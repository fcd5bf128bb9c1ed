#!/usr/bin/env bash
# Activation offload on the emulated device (issue 18): the longest LoRA sequence that fits a
# device-memory budget with --activation-checkpointing, before and after --offload-activations,
# measured by training on the emulated GPU (build/zerotune-emu, the real CUDA backend's buffers,
# streams and caching allocator) and compared with `zerotune estimate --max-seq-len` for the same
# model and budget; then the estimate's figure for llama-2-7b itself at 24 GiB.
#
# The measured model is a stand-in for llama-2-7b: its 32 layers and head dim 128, every width
# divided by 32 (hidden 128, MLP 344, 1 head, vocab 1000), so every per-token buffer is the 7B's
# divided by 32 and the offload's effect has the 7B's proportions. Why not the 7B at 24 GiB: the
# emulator computes on the CPU at about 1 GFLOP/s, and one LoRA step of the 7B at its 24 GiB
# boundary (22k-40k tokens) is about 1e15 FLOPs; the budget (56 MiB) puts the stand-in's boundary
# at 500-1000 tokens, a minute or two per trial.
#
# Each search starts from the estimate's prediction as a bracket (prediction, prediction + 16) and
# bisects to 16 tokens (bench/seq_search.py --bracket), reading the emulated device's
# mem_device_peak of one step. Usage: bench/offload_emu.sh [BUILD_DIR] [WORK_DIR] [BUDGET_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=${2:-/tmp/zt-offload-emu}
budget_mib=${3:-56}
python=${ZT_PYTHON:-.venv/bin/python}
emu="$build/zerotune-emu"
[[ -x "$emu" ]] || { echo "bench/offload_emu.sh: $emu is missing (configure with the emulated device)" >&2; exit 1; }
mkdir -p "$work"
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u +%F)"

# The stand-in's config.json, from llama-2-7b's; a DeepSpeed JSON of the LoRA job at stage 0 with
# one micro-batch per step.
"$python" - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
config = json.load(open("job_scripts/deepspeed-chat/models/llama-2-7b/config.json"))
config.update(hidden_size=128, intermediate_size=344, num_attention_heads=1, num_key_value_heads=1,
              vocab_size=1000, max_position_embeddings=65536)
os.makedirs(os.path.join(work, "standin"), exist_ok=True)
json.dump(config, open(os.path.join(work, "standin", "config.json"), "w"), indent=1)
ds = json.load(open("job_scripts/deepspeed-chat/ds_config_llama2_lora.json"))
ds["gradient_accumulation_steps"] = 1
ds["zero_optimization"] = {"stage": 0}
json.dump(ds, open(os.path.join(work, "ds_stage0.json"), "w"), indent=1)
EOF
"$build/zerotune" init --config "$work/standin/config.json" --out "$work/model" --seed 1 --force >/dev/null

predicted() {  # $1: true|false (offload): the estimate's longest sequence at stage 0 with checkpointing
  "$emu" estimate --model "$work/model" --deepspeed "$work/ds_stage0.json" --lora-r 8 --device cuda \
    --max-seq-len --device-memory "${budget_mib}MiB" --seq-len-limit 8192 --json |
    "$python" -c "import json, sys; rows = json.load(sys.stdin)['rows']; print(next(r['longest_seq_len'][0] for r in rows
      if r['stage'] == 0 and r['offload_optimizer'] == 'none' and r['activation_checkpointing']
      and r['offload_activations'] == ('$1' == 'true')))"
}

budget_gib=$("$python" -c "print($budget_mib / 1024)")
for offload in false true; do
  flags=(--activation-checkpointing)
  name=checkpointing
  if [[ "$offload" == true ]]; then flags+=(--offload-activations); name=checkpointing+offload; fi
  guess=$(predicted "$offload")
  echo "== $name: estimate predicts $guess tokens within $budget_mib MiB"
  "$python" bench/seq_search.py --make-data "$build/bench/make_bench_data" --work "$work/$name" --vocab 1000 \
    --budget-gib "$budget_gib" --config "$work/ds_stage0.json" --bracket "$guess,$((guess + 16))" \
    --granularity 16 --steps 1 --out "$work/$name.json" -- \
    env OMP_NUM_THREADS=1 "$emu" train --model "$work/model" --device cuda --lora-r 8 --seed 1 "${flags[@]}"
  echo "OFFLOAD_EMU $name predicted $guess measured $("$python" -c "import json; print(json.load(open('$work/$name.json'))['largest_fitting_seq'])")"
done

echo "== llama-2-7b itself (estimate only), 24 GiB, stage 0 LoRA r 8:"
"$build/zerotune" estimate --model job_scripts/deepspeed-chat/models/llama-2-7b \
  --deepspeed job_scripts/deepspeed-chat/ds_config_llama2_lora.json --lora-r 8 \
  --max-seq-len --device-memory 24GiB --seq-len-limit 131072 | grep -E '^(stage|0 )'

# Oracle: a few optimizer steps of `zerotune train` against a torch training loop on the same
# batches, step by step (loss, grad_norm, lr from OUT/metrics.jsonl).
# 1. Full fine-tuning, 6 updates, micro-batch 2 x accumulation 2, from a DeepSpeed JSON: AdamW
#    (betas 0.9/0.95, weight decay 0.1 on Linear/Embedding weights only), gradient clipping 1.0
#    (the data makes it trigger at some updates and not at others), WarmupDecayLR with linear
#    warmup, stepped as DeepSpeed >= 0.15.3 steps it (see oc.deepspeed_warmup_decay_lrs: update 1
#    runs at warmup_min_lr); reference: HF in float64 + torch.optim.AdamW + DeepSpeed's clipping.
# 2. LoRA (all-linear, r 4, non-zero B from --adapter), 4 updates, optimizer from flags
#    (--lr, --weight-decay, --gradient-clipping, constant schedule); reference: PEFT + AdamW.
# The reference loop and the comparison (tolerances included): oracle_common.py, "trajectories".
import json
import math
import os

import oracle_common as oc

torch = oc.torch

MICRO_BATCH, ACCUMULATION = 2, 2

DEEPSPEED_CONFIG = {
    "train_micro_batch_size_per_gpu": MICRO_BATCH,
    "gradient_accumulation_steps": ACCUMULATION,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                             "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2,
                             "warmup_type": "linear", "total_num_steps": 6}},
}
FULL_STEPS = 6
# The global batch of each update: (sample lengths, prompt-masked?). With HF's initializer_range
# 0.02, short prompt-masked batches (few targets) have a gradient norm above the clip (1.0) and
# long all-target batches one below it, so both branches of clipping are exercised.
FULL_BATCHES = [([9, 12, 8, 11], True), ([88, 96, 80, 92], False), ([10, 14, 9, 12], True),
                ([90, 84, 96, 86], False), ([20, 64, 16, 40], True), ([96, 82, 90, 94], False)]

LORA_STEPS = 4
# weight decay 0.1, not 0.01: its effect on 4 updates must exceed the tolerances
LORA_LR, LORA_WEIGHT_DECAY, LORA_CLIP = 2e-3, 0.1, 2.2  # betas/eps: the defaults
LORA_BETAS, LORA_EPS = (0.9, 0.999), 1e-8


def run_full(args, report, tmp, seed):
    label = "full"
    model_dir = os.path.join(tmp, label, "model")
    data_dir = os.path.join(tmp, label, "data")
    out_dir = os.path.join(tmp, label, "out")
    config = oc.make_llama(model_dir, seed=seed, initializer_range=0.02)
    samples = []
    for update, (lengths, prompt_masked) in enumerate(FULL_BATCHES):
        samples += oc.make_samples(seed + 1 + update, lengths, config.vocab_size, prompt_masked)
    oc.write_data(data_dir, samples, config.vocab_size)
    ds_path = os.path.join(tmp, label, "ds_config.json")
    with open(ds_path, "w") as stream:
        json.dump(DEEPSPEED_CONFIG, stream, indent=2)

    oc.run_zerotune(args.zerotune, ["train", "--model", model_dir, "--data", data_dir,
                                    "--out", out_dir, "--deepspeed", ds_path, "--no-shuffle",
                                    "--max-steps", FULL_STEPS])
    records = oc.read_metrics(out_dir)

    scheduler = DEEPSPEED_CONFIG["scheduler"]["params"]
    lrs = oc.deepspeed_warmup_decay_lrs(FULL_STEPS, **scheduler)
    print(f"[{label}] DeepSpeed WarmupDecayLR lrs per update: {lrs}")
    optimizer = DEEPSPEED_CONFIG["optimizer"]["params"]
    history = oc.reference_trajectory(oc.load_reference_llama(model_dir), samples, FULL_STEPS, lrs,
                                      tuple(optimizer["betas"]), optimizer["eps"],
                                      optimizer["weight_decay"],
                                      DEEPSPEED_CONFIG["gradient_clipping"], MICRO_BATCH, ACCUMULATION)
    oc.check_some_clipped(report, label, history)
    report.check(len(set(lrs)) > 2 and max(lrs) > 0, f"[{label}] oracle: the schedule varies")
    oc.compare_trajectory(report, label, records, history, lrs)


def run_lora(args, report, tmp, seed):
    label = "lora_all_linear"
    model_dir = os.path.join(tmp, label, "model")
    adapter_dir = os.path.join(tmp, label, "adapter")
    data_dir = os.path.join(tmp, label, "data")
    out_dir = os.path.join(tmp, label, "out")
    config = oc.make_llama(model_dir, seed=seed)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", use_rslora=False, dropout=0.0)
    global_batch = MICRO_BATCH * ACCUMULATION
    generator = oc.numpy.random.default_rng(seed)
    lengths = [int(n) for n in generator.integers(8, 25, LORA_STEPS * global_batch)]
    samples = oc.make_samples(seed + 1, lengths, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)

    oc.run_zerotune(args.zerotune, [
        "train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
        "--adapter", adapter_dir, "--no-shuffle", "--max-steps", LORA_STEPS,
        "--micro-batch-size", MICRO_BATCH, "--grad-accum", ACCUMULATION, "--lr", LORA_LR,
        "--weight-decay", LORA_WEIGHT_DECAY, "--gradient-clipping", LORA_CLIP])
    records = oc.read_metrics(out_dir)

    lrs = [LORA_LR] * LORA_STEPS
    history = oc.reference_trajectory(oc.load_reference_peft(model_dir, adapter_dir), samples,
                                      LORA_STEPS, lrs, LORA_BETAS, LORA_EPS, LORA_WEIGHT_DECAY,
                                      LORA_CLIP, MICRO_BATCH, ACCUMULATION)
    oc.check_some_clipped(report, label, history)
    losses = [loss for loss, _, _ in history]
    report.check(all(math.isfinite(x) for x in losses), f"[{label}] oracle: finite losses")
    oc.compare_trajectory(report, label, records, history, lrs)


def main():
    args = oc.parse_args("zerotune training steps vs a torch AdamW loop")
    report = oc.Report("Training trajectory: zerotune vs HF/PEFT + torch AdamW (float64)")
    with oc.temporary_directory(args, "zt_oracle_trajectory_") as tmp:
        oc.run_guarded(report, "full", run_full, args, report, tmp, 300)
        oc.run_guarded(report, "lora_all_linear", run_lora, args, report, tmp, 310)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

# LOMO under ZeRO (issue 16): the optimizer fused into backward on stages 0-3 (2 and 4 ranks,
# stage 3 with offload_param) gives one rank's losses, grad norms and final weights within float
# reassociation (global batch 16 everywhere, one micro-batch of 16/W per rank: LOMO takes no
# gradient accumulation), with the two-pass schedule (gradient_clipping: a norm pass, then the
# update pass) and without it; its loss goes down over the steps. No full gradient buffer: each
# rank's accounted gradient bytes (run.json) are the largest unit's gradients in flight (plus
# one slice of scratch from stage 1), not the trainable size (tests/gpu/test_gpu_lomo.py measures
# the device's store peak on the emulated GPU). Refusals name the setting: gradient
# accumulation, optimizer offload, resuming another optimizer's checkpoint.
import json
import os

from mpi_common import (REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, read_run, run_ranks,
                        temporary_directory)
from test_optimizers import STEPS, compare  # losses, grad norms and weights against one rank, the same tolerances
GLOBAL_BATCH = 16
LOMO = {"type": "LOMO", "params": {"lr": 0.05, "weight_decay": 0.01, "clip_grad_value": 0.05}}
CLIP = 0.75  # between this data's per-step gradient norms (0.71-0.81): some steps clip, some do not
CASES = ((2, 0, "none"), (2, 1, "none"), (2, 2, "none"), (2, 3, "cpu+param"), (4, 3, "none"))


def write_config(path, ranks, zero, clipping, accumulation=1, optimizer=LOMO):
    with open(os.path.join(REPO, "data", "tiny-llama", "ds_config.json")) as stream:
        config = json.load(stream)
    config.pop("train_batch_size", None)
    config["train_micro_batch_size_per_gpu"] = GLOBAL_BATCH // ranks // accumulation
    config["gradient_accumulation_steps"] = accumulation
    config["gradient_clipping"] = clipping
    config["optimizer"] = optimizer
    config["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.05,
                                                          "warmup_num_steps": 2, "warmup_type": "linear"}}
    config["zero_optimization"] = zero
    with open(path, "w") as stream:
        json.dump(config, stream, indent=1)
    return path


def train(zerotune, workdir, model, data, ranks, stage, offload, clipping, device="cpu", name=None, extra=(),
          expect_ok=True, accumulation=1, optimizer=LOMO, steps=STEPS):
    name = name or f"lomo-clip{clipping}-w{ranks}-s{stage}-{offload}-{device}"
    out = os.path.join(workdir, name)
    zero = {"stage": stage, "reduce_bucket_size": 12000, "stage3_param_persistence_threshold": 0,
            "offload_optimizer": {"device": "cpu" if offload == "cpu" else "none"}}
    if offload == "cpu+param":
        zero["offload_param"] = {"device": "cpu"}
    ds = write_config(os.path.join(workdir, name + ".json"), ranks, zero, clipping, accumulation, optimizer)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
               "--max-steps", steps, "--seed", 3, "--dump-final", out + ".safetensors", "--device", device] + list(extra)
    result, _ = run_ranks(ranks, command, expect_ok=expect_ok)
    return out, result


def check_gradient_bytes(report, label, out):
    """The accounted gradient memory is one unit in flight, not the whole trainable size."""
    run = read_run(out)
    gradients = run["zero_memory_per_rank"]["gradients"]
    trainable = run["zero_layout"]["trainable_elements"]
    largest_unit = max(run["zero_layout"]["unit_elements"])
    report.check(gradients <= 4 * 2 * largest_unit and gradients < 4 * trainable,
                 f"{label}: gradients accounted per rank {gradients} B: at most two units in flight "
                 f"(largest unit {largest_unit} elements), less than the {4 * trainable} B of all trainable ones")


def check_lomo(report, zerotune, workdir, model, data, cases, device, clippings=(CLIP, 0.0)):
    """LOMO's `cases` (ranks, stage, offload) against one rank at stage 0, with (clipping > 0: the
    norm pass) and without the norm pass."""
    for clipping in clippings:
        reference, _ = train(zerotune, workdir, model, data, 1, 0, "none", clipping, device)
        losses = [record["loss"] for record in read_metrics(reference)]
        report.check(losses[-1] < losses[0], f"LOMO clip {clipping} on {device}: the loss goes down over {STEPS} steps "
                     f"({losses[0]:.4f} -> {losses[-1]:.4f})")
        if clipping:
            clipped = [r["step"] for r in read_metrics(reference) if r["grad_norm"] > clipping]
            report.check(0 < len(clipped) < STEPS, f"LOMO clip {clipping}: clipping applies at some steps ({clipped})")
        check_gradient_bytes(report, f"LOMO clip {clipping} W=1 on {device}", reference)
        for ranks, stage, offload in cases:
            label = f"LOMO clip {clipping} W={ranks} stage {stage} offload {offload} on {device}"
            out, _ = train(zerotune, workdir, model, data, ranks, stage, offload, clipping, device)
            compare(report, label, out, reference)
            check_gradient_bytes(report, label, out)


def check_refusals(report, zerotune, workdir, model, data):
    _, result = train(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="refused-accum", accumulation=2,
                      expect_ok=False)
    report.check(result.returncode != 0 and "gradient_accumulation_steps must be 1" in result.stderr,
                 f"LOMO with gradient accumulation 2 is refused, naming the setting (status {result.returncode})")
    _, result = train(zerotune, workdir, model, data, 2, 2, "cpu", CLIP, name="refused-offload", expect_ok=False)
    report.check(result.returncode != 0 and "offload_optimizer must be none" in result.stderr,
                 f"LOMO with offload_optimizer cpu is refused, naming the setting (status {result.returncode})")
    # An AdamW checkpoint is not LOMO's: refused naming both.
    adamw = {"type": "AdamW", "params": {"lr": 1e-3}}
    out, _ = train(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="adamw-then-lomo", optimizer=adamw)
    _, result = train(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="adamw-then-lomo",
                      extra=["--resume", "auto"], steps=STEPS + 2, expect_ok=False)
    report.check(result.returncode != 0 and "optimizer adamw" in result.stderr and "this run uses lomo" in result.stderr,
                 f"a LOMO run refuses an AdamW checkpoint naming both (status {result.returncode})")


def check_resume(report, zerotune, workdir, model, data):
    """LOMO has no state: a checkpoint holds the master weights, and resuming on another world
    size and stage continues as the uninterrupted run."""
    name = "lomo-resume"
    train(zerotune, workdir, model, data, 2, 3, "none", CLIP, name=name, steps=3)
    out, _ = train(zerotune, workdir, model, data, 4, 1, "none", CLIP, name=name, extra=["--resume", "auto"])
    compare(report, "LOMO W=2 stage 3 for 3 steps -> W=4 stage 1", out, os.path.join(workdir, f"lomo-clip{CLIP}-w1-s0-none-cpu"))


def main():
    args = parse_args(__doc__)
    report = Report("LOMO under ZeRO: same losses and weights as one rank, one unit of gradients in flight")
    with temporary_directory(args, "zt-lomo-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        check_lomo(report, args.zerotune, workdir, model, data, CASES, "cpu")
        check_resume(report, args.zerotune, workdir, model, data)
        check_refusals(report, args.zerotune, workdir, model, data)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

"""The DPO objective (TRL's sigmoid loss, train/dpo_objective.cpp; LoRA, the reference = the base
with the adapters disabled) under ZeRO on 2 MPI ranks: stages 0, 1, 2 and 3 and stage 2 with the
optimizer offloaded to the CPU give the same losses, gradient norms, DPO figures (rewards/*,
logps/*) and final adapter weights as one rank with the same global batch, within float
reassociation; and exact resume: stage 3 on 2 ranks with rank 1 killed in step 4 (ZT_FAULT; the
last checkpoint after step 3) and resumed equals the uninterrupted stage-3 run bit for bit.
Full fine-tuning (the reference = a frozen copy of the initial weights, train/frozen_reference.h,
partitioned like the policy's at stage 3): stages 0, 2 and 3, and stage 3 with offload_param and
offload_optimizer on the CPU, on 2 ranks, and stage 3 on 4 ranks equal one rank (every weight),
and the same kill and resume at stage 3 equals the uninterrupted run bit for bit (the resumed run
rebuilds its reference from the model directory: had it taken the checkpoint's weights, step 4
would differ), its manifest naming the reference; stage 3 runs with
stage3_param_persistence_threshold 0, so every unit of both models is gathered and released per
use. And the memory model's prediction for the full-fine-tuning runs at stages 0 (1 rank) and 3 (2
ranks) is within 5% of the measured peak (the CPU backend's count). Pairs:
tests/mpi/test_reward_zero.py's writer on the tiny LLaMA of data/tiny-llama.
"""
import json
import os
import subprocess

from mpi_common import (REPO, Report, check_weights, load_weights, main_guard, parse_args, read_metrics, run_ranks,
                        temporary_directory, write_ds_config)
from memory_grid import predicted_peak
from test_reward_zero import write_pairs

STEPS = 4            # WarmupLR gives updates 1 and 2 a learning rate of 0 (test_zero_equivalence.py)
LOSS_REL = 2e-6
NORM_REL = 2e-5
FIGURE_ATOL = 1e-6   # rewards: beta x O(50) log-probs summed in another order
WEIGHT_ATOL = 2e-6
MEMORY_REL = 0.05
STAGE3 = {"stage": 3, "stage3_param_persistence_threshold": 0}  # no unit stays gathered: each one per use
FIGURES = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected")


LORA = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "q_proj,v_proj,down_proj"]


def train(zerotune, workdir, model, data, name, ranks, zero, extra=(), fault=None, lora=True):
    """A run's metrics and final weights; with `fault` (ZT_FAULT), the failed run's exit status."""
    out = os.path.join(workdir, name)
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 8, 2, zero)
    if fault:
        os.environ["ZT_FAULT"] = fault
    try:
        result, _ = run_ranks(ranks, [zerotune, "train", "--objective", "dpo", "--model", model, "--data", data,
                                      "--out", out, "--deepspeed", ds, "--max-steps", STEPS, "--seed", 3,
                                      "--dump-final", out + ".safetensors"] + (LORA if lora else [])
                              + list(extra),
                              expect_ok=not fault)
    finally:
        os.environ.pop("ZT_FAULT", None)
    if fault:
        return result.returncode
    return {"name": name, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors"),
            "stdout": result.stdout}


def compare(report, got, ref, exact=False):
    label = got["name"]
    report.check(len(got["metrics"]) == STEPS, f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        step = mine["step"]
        if exact:
            same = all(mine[key] == theirs[key] for key in ("loss", "grad_norm") + FIGURES)
            report.check(same, f"{label} step {step}: loss, grad_norm and the DPO figures identical")
            continue
        report.scalar(f"{label} step {step} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.scalar(f"{label} step {step} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
        worst = max(abs(mine[key] - theirs[key]) for key in FIGURES if "logps" not in key)
        report.check(worst <= FIGURE_ATOL, f"{label} step {step}: rewards/* within {FIGURE_ATOL:.0e} ({worst:.1e})")
        for key in ("logps/chosen", "logps/rejected"):
            report.scalar(f"{label} step {step} {key}", mine[key], theirs[key], LOSS_REL)
    check_weights(report, label, got["weights"], ref["weights"], 0.0 if exact else WEIGHT_ATOL, ref["metrics"])


def main():
    args = parse_args(__doc__)
    report = Report("DPO objective under ZeRO (2 and 4 ranks vs 1) and exact resume")
    with temporary_directory(args, "zt-dpo-zero-") as workdir:
        model = os.path.join(workdir, "model")
        subprocess.run([args.zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"),
                        "--out", model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(workdir, "pairs")
        write_pairs(os.path.join(data, "train-00000.h5"), seed=8)

        reference = train(args.zerotune, workdir, model, data, "w1-s0", 1, {"stage": 0})
        trained = sorted(reference["weights"])
        report.check(trained and all("lora_" in name for name in trained),
                     f"only the adapters train ({len(trained)} tensors)")
        losses = [r["loss"] for r in reference["metrics"]]
        # Step 4's loss follows one update at a learning rate above 0 (update 3), and LoRA's first move
        # is small (lora_B starts at 0: only B moves, by ~lr): the fall is ~9e-5, above float noise.
        report.check(abs(losses[0] - 0.6931471805599453) < 1e-6 and losses[-1] < losses[0] - 1e-5,
                     f"step 1's loss is log 2 (policy = reference: lora_B starts at 0) and it falls ({losses})")
        runs = {f"w2-s{stage}": {"stage": stage} for stage in (0, 1, 2, 3)}
        runs["w2-s2-offload"] = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
        stage3 = None
        for name, zero in runs.items():
            got = train(args.zerotune, workdir, model, data, name, 2, zero)
            compare(report, got, reference)
            stage3 = got if name == "w2-s3" else stage3
        # Exact resume at stage 3: rank 1 killed in step 4 (a checkpoint after step 3), then resumed.
        status = train(args.zerotune, workdir, model, data, "resumed-w2-s3", 2, {"stage": 3},
                       extra=["--save-every", 3], fault="kill:step:1:4")
        report.check(status != 0, f"rank 1 killed in step 4: the job failed (exit {status})")
        resumed = train(args.zerotune, workdir, model, data, "resumed-w2-s3", 2, {"stage": 3},
                        extra=["--save-every", 3, "--resume", "auto"])
        report.check("at step 3" in resumed["stdout"] and "resumed from" in resumed["stdout"],
                     "the second run resumed from the step-3 checkpoint")
        compare(report, resumed, stage3, exact=True)
        check_full_fine_tuning(report, args.zerotune, workdir, model, data)
    return report.finish()


def check_full_fine_tuning(report, zerotune, workdir, model, data):
    """The frozen-copy reference: 2 ranks vs 1 at stages 0, 2, 3, 4 ranks vs 1 at stage 3; exact resume
    at stage 3."""
    def full(name, ranks, stage, zero=None, **keywords):
        zero = zero or (STAGE3 if stage == 3 else {"stage": stage})
        return train(zerotune, workdir, model, data, "full-" + name, ranks, zero, lora=False, **keywords)
    reference = full("w1-s0", 1, 0)
    report.check(any(name.endswith("embed_tokens.weight") for name in reference["weights"]) and
                 not any("lora_" in name for name in reference["weights"]),
                 f"full fine-tuning trains the base weights ({len(reference['weights'])} tensors)")
    losses = [r["loss"] for r in reference["metrics"]]
    report.check(abs(losses[0] - 0.6931471805599453) < 1e-6 and losses[-1] < losses[0] - 1e-4,
                 f"full fine-tuning: step 1's loss is log 2 (the policy is its reference copy) and it falls ({losses})")
    stage3 = None
    for stage in (0, 2, 3):
        got = full(f"w2-s{stage}", 2, stage)
        compare(report, got, reference)
        stage3 = got if stage == 3 else stage3
    # 4 ranks (oversubscribed on 2 cores): a quarter of each unit of both models per rank.
    compare(report, full("w4-s3", 4, 3), reference)
    # Both offloads: the reference's partition in host memory, uploaded per gathered unit.
    offloaded = dict(STAGE3, offload_param={"device": "cpu"}, offload_optimizer={"device": "cpu"})
    compare(report, full("w2-s3-offload", 2, 3, zero=offloaded), reference)
    status = full("resumed-w2-s3", 2, 3, extra=["--save-every", 3], fault="kill:step:1:4")
    report.check(status != 0, f"full fine-tuning: rank 1 killed in step 4: the job failed (exit {status})")
    resumed = full("resumed-w2-s3", 2, 3, extra=["--save-every", 3, "--resume", "auto"])
    report.check("at step 3" in resumed["stdout"], "full fine-tuning: the second run resumed from the step-3 checkpoint")
    compare(report, resumed, stage3, exact=True)
    manifest_path = os.path.join(workdir, "full-resumed-w2-s3", "checkpoints", "global_step3", "manifest.json")
    with open(manifest_path) as stream:
        recorded = json.load(stream).get("reference_model", {})
    for name, ranks, got in (("full-w1-s0", 1, reference), ("full-w2-s3", 2, stage3)):
        check_memory(report, zerotune, workdir, model, data, name, ranks, got)
    report.check(recorded.get("model_dir") == model and len(recorded.get("model_weights_digest", "")) == 64,
                 f"the checkpoint's manifest names the reference: the model directory and its digest ({recorded})")


def check_memory(report, zerotune, workdir, model, data, name, ranks, got):
    """The estimate of a full-fine-tuning DPO run (its frozen reference counted) against rank 0's
    measured peak (mem_cpu_backend_peak: the CPU backend's count of its buffers)."""
    measured = max(record["mem_cpu_backend_peak"] for record in got["metrics"])
    stage = json.load(open(os.path.join(workdir, name + ".json")))["zero_optimization"]["stage"]
    predicted, run = predicted_peak(zerotune, "cpu", model, data, os.path.join(workdir, name + ".json"),
                                    (ranks, stage, False, False, False, 2, (0, 0), False), ["--objective", "dpo"])
    report.scalar(f"{name}: measured peak vs the estimate", measured, predicted, MEMORY_REL)
    report.check(run["host_peak_terms"].get("reference model", 0) > 0,
                 f"{name}: the estimate counts the reference model ({run['host_peak_terms']})")


if __name__ == "__main__":
    main_guard(main)


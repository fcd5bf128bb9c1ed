"""GPU (label gpu; on the emulated device label gpu-emu): the DPO objective (TRL's sigmoid loss,
train/dpo_objective.cpp) on `zerotune train --device cuda` against the CPU backend, on the tiny
LLaMA of data/tiny-llama with LoRA and random pairs (tests/mpi/test_reward_zero.py's writer). The
new device work is the reference forward with the adapters disabled, the per-row log-prob sums
(cross_entropy_accumulate into one fp64 slot per row) and the per-row weighted cross-entropy
gradient: 5 steps of losses, gradient norms and DPO figures within 1e-4 relative (rewards within
1e-6 absolute), the final adapter weights within 1e-5, and the evaluation's loss and figures; and
ZeRO-3 on 4 GPUs against 1 GPU (losses, margins, adapter weights). Full fine-tuning (the reference a
frozen copy of the initial weights, train/frozen_reference.h): ZeRO-3 on 2 GPUs, every unit of
both models gathered per use, against one CPU rank at stage 0 (losses, margins, every weight);
and exact resume: a new run started from that run's step-3 checkpoint (the reference rebuilt from
the model directory) gives its steps 4 and 5 bit for bit (losses, gradient norms, DPO figures,
every weight).
Without a GPU every check fails with zerotune's message (this test never skips).
"""
import json
import os
import subprocess

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, check_weights, load_weights, main_guard, parse_args, read_metrics, run_ranks,
                        temporary_directory, write_ds_config)
from test_reward_zero import write_pairs  # noqa: E402

STEPS = 5  # WarmupLR: updates 1 and 2 at learning rate 0
REL = 1e-4
REWARD_ATOL = 1e-6
WEIGHT_ATOL = 1e-5
FIGURES = ("rewards/chosen", "rewards/rejected", "rewards/margins")


def train(zerotune, workdir, model, data, name, device, ranks, flags, steps=STEPS):
    """One run (stage 0 on 1 rank; stage 3 on more, every unit of both models gathered per use) with
    an evaluation at the end: its metrics, final weights, evaluation records and standard output."""
    out = os.path.join(workdir, name)
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0} if ranks > 1 else {"stage": 0}
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 8, 4 // ranks, zero)
    command = [zerotune, "train", "--objective", "dpo", "--model", model, "--data", data, "--eval-data", data,
               "--eval-every", STEPS, "--out", out, "--deepspeed", ds, "--max-steps", steps, "--seed", 3,
               "--device", device, "--dump-final", out + ".safetensors"] + list(flags)
    result, _ = run_ranks(ranks, command)
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        evaluation = [json.loads(line) for line in stream if "eval_rewards/accuracies" in line]
    return read_metrics(out), load_weights(out + ".safetensors"), evaluation, result.stdout


def main():
    args = parse_args(__doc__)
    report = Report("DPO objective: GPU vs CPU, ZeRO-3 on 4 and 2 GPUs, exact resume")
    with temporary_directory(args, "zt-gpu-dpo-") as workdir:
        model = os.path.join(workdir, "model")
        subprocess.run([args.zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"),
                        "--out", model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(workdir, "pairs")
        write_pairs(os.path.join(data, "train-00000.h5"), seed=9, pairs=16)
        lora = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "q_proj,v_proj,down_proj"]
        runs = {}
        for name, device, ranks, flags in (("cuda", "cuda", 1, lora), ("cpu", "cpu", 1, lora),
                                           ("cuda-w4-s3", "cuda", 4, lora), ("full-cpu", "cpu", 1, []),
                                           ("full-cuda-w2-s3", "cuda", 2, ["--save-every", 3])):
            runs[name] = train(args.zerotune, workdir, model, data, name, device, ranks, flags)
        # A new run from the step-3 checkpoint of the last (its reference rebuilt from --model).
        checkpoint = os.path.join(workdir, "full-cuda-w2-s3", "checkpoints", "global_step3")
        runs["full-resumed-w2-s3"] = train(args.zerotune, workdir, model, data, "full-resumed-w2-s3", "cuda", 2,
                                           ["--resume", checkpoint])
        (gpu, gpu_weights, gpu_eval, _), (cpu, cpu_weights, cpu_eval, _) = runs["cuda"], runs["cpu"]
        report.check(len(gpu) == len(cpu) == STEPS, f"{STEPS} steps on each backend")
        for mine, theirs in zip(gpu, cpu):
            step = mine["step"]
            report.scalar(f"step {step} loss", mine["loss"], theirs["loss"], REL)
            report.scalar(f"step {step} grad_norm", mine["grad_norm"], theirs["grad_norm"], REL)
            for key in ("logps/chosen", "logps/rejected"):
                report.scalar(f"step {step} {key}", mine[key], theirs[key], REL)
            worst = max(abs(mine[key] - theirs[key]) for key in FIGURES)
            report.check(worst <= REWARD_ATOL, f"step {step}: rewards/* within {REWARD_ATOL:.0e} ({worst:.1e})")
        report.check(cpu[-1]["loss"] < cpu[0]["loss"] - 1e-4, "the loss falls on the CPU")
        check_weights(report, "dpo on cuda vs cpu", gpu_weights, cpu_weights, WEIGHT_ATOL, cpu)
        # ZeRO-3 on 4 emulated GPUs (the reference forward gathers the base once more) = 1 GPU.
        zero3, zero3_weights, _, _ = runs["cuda-w4-s3"]
        report.check(len(zero3) == STEPS, f"{STEPS} steps at stage 3 on 4 GPUs")
        for mine, theirs in zip(zero3, gpu):
            report.scalar(f"stage 3 x 4 step {mine['step']} loss", mine["loss"], theirs["loss"], REL)
            report.check(abs(mine["rewards/margins"] - theirs["rewards/margins"]) <= REWARD_ATOL,
                         f"stage 3 x 4 step {mine['step']}: rewards/margins within {REWARD_ATOL:.0e}")
        check_weights(report, "dpo at stage 3 on 4 GPUs vs 1", zero3_weights, gpu_weights, WEIGHT_ATOL, gpu)
        # Full fine-tuning: the frozen copy partitioned at stage 3 on 2 GPUs = the CPU at stage 0.
        full_gpu, full_gpu_weights, _, _ = runs["full-cuda-w2-s3"]
        full_cpu, full_cpu_weights, _, _ = runs["full-cpu"]
        report.check(len(full_gpu) == len(full_cpu) == STEPS and full_cpu[-1]["loss"] < full_cpu[0]["loss"] - 1e-4,
                     f"full fine-tuning: {STEPS} steps on each backend, the loss falls on the CPU")
        for mine, theirs in zip(full_gpu, full_cpu):
            report.scalar(f"full fine-tuning stage 3 x 2 GPUs step {mine['step']} loss", mine["loss"], theirs["loss"],
                          REL)
            report.check(abs(mine["rewards/margins"] - theirs["rewards/margins"]) <= REWARD_ATOL,
                         f"full fine-tuning step {mine['step']}: rewards/margins within {REWARD_ATOL:.0e}")
        check_weights(report, "full-fine-tuning dpo at stage 3 on 2 GPUs vs the CPU", full_gpu_weights,
                      full_cpu_weights, WEIGHT_ATOL, full_cpu)
        # Exact resume: the run from the step-3 checkpoint = the uninterrupted one's steps 4 and 5, bit for bit.
        resumed, resumed_weights, _, stdout = runs["full-resumed-w2-s3"]
        report.check("resumed from" in stdout and "at step 3" in stdout,
                     "full fine-tuning: the new run resumed from the step-3 checkpoint")
        keys = ("step", "loss", "grad_norm") + FIGURES + ("logps/chosen", "logps/rejected")
        report.check([[r[key] for key in keys] for r in resumed] == [[r[key] for key in keys] for r in full_gpu[3:]],
                     "full fine-tuning resumed after step 3 at stage 3 on 2 GPUs: steps 4 and 5's loss, grad_norm "
                     "and DPO figures identical to the uninterrupted run's")
        check_weights(report, "full fine-tuning resumed at stage 3 on 2 GPUs", resumed_weights, full_gpu_weights, 0.0,
                      full_gpu)
        report.check(len(gpu_eval) == len(cpu_eval) >= 1, "as many evaluations on each backend (each epoch's end, "
                     f"the last step's): {len(gpu_eval)} and {len(cpu_eval)}")
        if gpu_eval and cpu_eval:
            g, c = gpu_eval[-1], cpu_eval[-1]
            report.scalar("eval_loss", g["eval_loss"], c["eval_loss"], REL)
            report.scalar("eval_rewards/accuracies", g["eval_rewards/accuracies"], c["eval_rewards/accuracies"], 1e-12)
            report.check(abs(g["eval_rewards/margins"] - c["eval_rewards/margins"]) <= REWARD_ATOL,
                         "eval_rewards/margins within 1e-6")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

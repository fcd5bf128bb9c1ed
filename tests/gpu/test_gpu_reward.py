"""GPU (label gpu; on the emulated device label gpu-emu): the reward objective (DeepSpeed-Chat step 2,
train/reward_objective.cpp) on `zerotune train --device cuda` against the CPU backend, on the tiny
LLaMA of data/tiny-llama and random pairs (tests/mpi/test_reward_zero.py's writer). The value
head runs through backend ops only (its GEMMs; the values and d(values) cross to the host), so the
CUDA path must track the CPU's: 4 steps of losses and gradient norms within 1e-4 relative, the
final weights within 1e-2 of each tensor's move (mpi_common.check_weights_by_moves: a pairwise loss
leaves embedding rows and the final norm gradients that nearly cancel, whose rounding noise Adam
turns into lr-sized moves that differ by summation order, 1.3e-4 of the embedding's largest value in
one run; a state or step gone wrong is off by O(1) of the move), and the evaluation's accuracy, loss
and chosen-minus-rejected score margin within 1e-4. ZeRO-3 on 2 emulated GPUs (every unit gathered
per use) gives 1 GPU's losses and gradient norms within 1e-4 and its weights within 1e-2 of each
move; and exact resume: a new run started from that run's step-2 checkpoint gives its steps 3 and 4
bit for bit (losses, gradient norms, every weight). (The scores themselves
are only defined up to a common shift: the final norm's bias gets no gradient from a pairwise
loss, only rounding noise, which Adam turns into lr-sized moves of another sign on each backend.)
Without a GPU every check fails with zerotune's message (this test never skips).
"""
import json
import os
import subprocess

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, check_weights, check_weights_by_moves, load_weights, main_guard, parse_args,
                        read_metrics, run_ranks, temporary_directory, write_ds_config)
from test_reward_zero import write_pairs  # noqa: E402

STEPS = 4  # WarmupLR: updates 1 and 2 at learning rate 0
REL = 1e-4
MOVE_REL = 1e-2


def train(zerotune, workdir, model, data, name, device, ranks=1, steps=STEPS, extra=()):
    """One run (stage 0 on 1 rank, stage 3 on more, every unit gathered per use): its metrics,
    final weights, evaluation records and standard output."""
    out = os.path.join(workdir, name)
    zero = {"stage": 3, "stage3_param_persistence_threshold": 0} if ranks > 1 else {"stage": 0}
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 8, 4 // ranks, zero)
    command = [zerotune, "train", "--objective", "reward", "--model", model, "--data", data, "--out", out,
               "--deepspeed", ds, "--max-steps", steps, "--seed", 3, "--device", device,
               "--dump-final", out + ".safetensors"] + list(extra)
    result, _ = run_ranks(ranks, command)
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        evaluation = [line for line in stream if "eval_reward_accuracy" in line]
    return read_metrics(out), load_weights(out + ".safetensors"), evaluation, result.stdout


def check_moves(report, label, weights, reference, initial, metrics):
    """Final weights against the reference run's: what no gradient reaches (the LM head: the value
    head replaces it) unchanged on both, the rest within MOVE_REL of each tensor's move."""
    still = sorted(name for name in reference if bool((reference[name] == initial[name]).all()))
    report.check(all(bool((weights[name] == initial[name]).all()) for name in still),
                 f"{label}: the {len(still)} tensors no gradient reaches ({', '.join(still)}) stay unchanged")
    moved = [name for name in reference if name not in still]
    check_weights_by_moves(report, label, {name: weights[name] for name in moved},
                           {name: reference[name] for name in moved}, initial, MOVE_REL, metrics)


def main():
    args = parse_args(__doc__)
    report = Report("reward objective: GPU vs CPU, ZeRO-3 on 2 GPUs and exact resume")
    with temporary_directory(args, "zt-gpu-reward-") as workdir:
        model = os.path.join(workdir, "model")
        subprocess.run([args.zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"),
                        "--out", model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(workdir, "pairs")
        write_pairs(os.path.join(data, "train-00000.h5"), seed=6)
        evaluate = ["--eval-data", data, "--eval-every", STEPS]
        gpu, gpu_weights, gpu_eval, _ = train(args.zerotune, workdir, model, data, "cuda", "cuda", extra=evaluate)
        cpu, cpu_weights, cpu_eval, _ = train(args.zerotune, workdir, model, data, "cpu", "cpu", extra=evaluate)
        report.check(len(gpu) == len(cpu) == STEPS, f"{STEPS} steps on each backend")
        for mine, theirs in zip(gpu, cpu):
            report.scalar(f"step {mine['step']} loss", mine["loss"], theirs["loss"], REL)
            report.scalar(f"step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], REL)
        # The value head is not in the model directory: its move is measured from 0.
        initial = load_weights(os.path.join(model, "model.safetensors"))
        initial = {name: initial[name] if name in initial else 0 * tensor for name, tensor in cpu_weights.items()}
        check_moves(report, "reward on cuda vs cpu", gpu_weights, cpu_weights, initial, cpu)
        g, c = json.loads(gpu_eval[-1]), json.loads(cpu_eval[-1])
        report.scalar("eval_reward_accuracy", g["eval_reward_accuracy"], c["eval_reward_accuracy"], 1e-12)
        report.scalar("eval_loss", g["eval_loss"], c["eval_loss"], REL)
        report.scalar("eval score margin (chosen - rejected)", g["eval_chosen_score"] - g["eval_rejected_score"],
                      c["eval_chosen_score"] - c["eval_rejected_score"], REL)
        check_zero3_and_resume(report, args.zerotune, workdir, model, data, (gpu, gpu_weights), initial)
    return report.finish()


def check_zero3_and_resume(report, zerotune, workdir, model, data, one_gpu, initial):
    """ZeRO-3 on 2 emulated GPUs (the value head gathered with the head unit) against 1 GPU; exact
    resume: a new run started from that run's step-2 checkpoint gives its steps 3 and 4 and final
    weights bit for bit (the value head, Adam's state and the data position restored)."""
    zero3, zero3_weights, _, _ = train(zerotune, workdir, model, data, "cuda-w2-s3", "cuda", ranks=2,
                                       extra=["--save-every", 2])
    report.check(len(zero3) == STEPS, f"{STEPS} steps at stage 3 on 2 GPUs")
    for mine, theirs in zip(zero3, one_gpu[0]):
        report.scalar(f"stage 3 x 2 step {mine['step']} loss", mine["loss"], theirs["loss"], REL)
        report.scalar(f"stage 3 x 2 step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], REL)
    check_moves(report, "reward at stage 3 on 2 GPUs vs 1", zero3_weights, one_gpu[1], initial, one_gpu[0])
    checkpoint = os.path.join(workdir, "cuda-w2-s3", "checkpoints", "global_step2")
    resumed, resumed_weights, _, stdout = train(zerotune, workdir, model, data, "resumed-w2-s3", "cuda", ranks=2,
                                                extra=["--resume", checkpoint])
    report.check("resumed from" in stdout and "at step 2" in stdout, "the new run resumed from the step-2 checkpoint")
    report.check([(r["step"], r["loss"], r["grad_norm"]) for r in resumed] ==
                 [(r["step"], r["loss"], r["grad_norm"]) for r in zero3[2:]],
                 "resumed after step 2 at stage 3 on 2 GPUs: steps 3 and 4's loss and grad_norm identical")
    check_weights(report, "resumed at stage 3 on 2 GPUs", resumed_weights, zero3_weights, 0.0, zero3)


if __name__ == "__main__":
    main_guard(main)

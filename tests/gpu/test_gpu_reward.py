"""GPU (label gpu; on the emulated device label gpu-emu): the reward objective (DeepSpeed-Chat step 2,
train/reward_objective.cpp) on `zerotune train --device cuda` against the CPU backend, on the tiny
LLaMA of data/tiny-llama and random pairs (tests/mpi/test_reward_zero.py's writer). The value
head runs through backend ops only (its GEMMs; the values and d(values) cross to the host), so the
CUDA path must track the CPU's: 4 steps of losses and gradient norms within 1e-4 relative, the
final weights within 1e-2 of each tensor's move (mpi_common.check_weights_by_moves: a pairwise loss
leaves embedding rows and the final norm gradients that nearly cancel, whose rounding noise Adam
turns into lr-sized moves that differ by summation order, 1.3e-4 of the embedding's largest value in
one run; a state or step gone wrong is off by O(1) of the move), and the evaluation's accuracy, loss
and chosen-minus-rejected score margin within 1e-4. (The scores themselves are only defined up to a
common shift: the final norm's bias gets no gradient from a pairwise loss, only rounding noise,
which Adam turns into lr-sized moves of another sign on each backend.) Without a GPU every check
fails with zerotune's message (this test never skips).
"""
import json
import os
import subprocess

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, check_weights_by_moves, load_weights, main_guard, parse_args, read_metrics,
                        run_ranks, temporary_directory, write_ds_config)
from test_reward_zero import write_pairs  # noqa: E402

REL = 1e-4
MOVE_REL = 1e-2


def main():
    args = parse_args(__doc__)
    report = Report("reward objective: GPU vs CPU")
    with temporary_directory(args, "zt-gpu-reward-") as workdir:
        model = os.path.join(workdir, "model")
        subprocess.run([args.zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"),
                        "--out", model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(workdir, "pairs")
        write_pairs(os.path.join(data, "train-00000.h5"), seed=6)
        ds = write_ds_config(os.path.join(workdir, "ds.json"), 8, 4, {"stage": 0})
        runs = {}
        for device in ("cuda", "cpu"):
            out = os.path.join(workdir, device)
            run_ranks(1, [args.zerotune, "train", "--objective", "reward", "--model", model, "--data", data,
                          "--eval-data", data, "--eval-every", 4, "--out", out, "--deepspeed", ds, "--max-steps", 4,
                          "--seed", 3, "--device", device, "--dump-final", out + ".safetensors"])
            with open(os.path.join(out, "metrics.jsonl")) as stream:
                evaluation = [line for line in stream if "eval_reward_accuracy" in line]
            runs[device] = (read_metrics(out), load_weights(out + ".safetensors"), evaluation)
        (gpu, gpu_weights, gpu_eval), (cpu, cpu_weights, cpu_eval) = runs["cuda"], runs["cpu"]
        report.check(len(gpu) == len(cpu) == 4, "4 steps on each backend")
        for mine, theirs in zip(gpu, cpu):
            report.scalar(f"step {mine['step']} loss", mine["loss"], theirs["loss"], REL)
            report.scalar(f"step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], REL)
        # The value head is not in the model directory: its move is measured from 0.
        initial = load_weights(os.path.join(model, "model.safetensors"))
        initial = {name: initial[name] if name in initial else 0 * tensor for name, tensor in cpu_weights.items()}
        # What no gradient reaches (the LM head: the value head replaces it) must not move on either.
        still = sorted(name for name in cpu_weights if bool((cpu_weights[name] == initial[name]).all()))
        report.check(all(bool((gpu_weights[name] == initial[name]).all()) for name in still),
                     f"the {len(still)} tensors no gradient reaches ({', '.join(still)}) stay unchanged on cuda too")
        moved = [name for name in cpu_weights if name not in still]
        check_weights_by_moves(report, "reward on cuda vs cpu", {name: gpu_weights[name] for name in moved},
                               {name: cpu_weights[name] for name in moved}, initial, MOVE_REL, cpu)
        g, c = json.loads(gpu_eval[-1]), json.loads(cpu_eval[-1])
        report.scalar("eval_reward_accuracy", g["eval_reward_accuracy"], c["eval_reward_accuracy"], 1e-12)
        report.scalar("eval_loss", g["eval_loss"], c["eval_loss"], REL)
        report.scalar("eval score margin (chosen - rejected)", g["eval_chosen_score"] - g["eval_rejected_score"],
                      c["eval_chosen_score"] - c["eval_rejected_score"], REL)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

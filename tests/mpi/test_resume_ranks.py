"""Resuming on another number of ranks (issue 35 item 5). A checkpoint of 2 ranks x micro-batch 2
x accumulation 1 (train_batch_size 4) resumed on 1 rank with the same flags, whose arithmetic
gives 2: zerotune keeps the checkpoint's global batch by taking gradient_accumulation_steps 2,
says so ("resume: 1 rank instead of 2: ..."), records it in run.json, and the resumed steps'
losses match the uninterrupted 2-rank run within float reassociation (as test_checkpoints.py's
re-sliced resumes). Where it cannot (micro-batch 3 does not divide 4; --grad-accum 1 given), it
refuses before loading anything, naming the flags that would work."""
import json
import os

from mpi_common import REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, read_run, run_ranks, \
    temporary_directory

STEPS = 6


def write_ds(path):
    """The tour's optimizer and schedule (WarmupLR: the same on any run length), no batch numbers."""
    with open(os.path.join(REPO, "data", "tiny-llama", "ds_config.json")) as stream:
        config = json.load(stream)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        config.pop(key, None)
    config["zero_optimization"] = {"stage": 1}
    with open(path, "w") as stream:
        json.dump(config, stream, indent=1)
    return path


def main():
    args = parse_args(__doc__)
    report = Report("resume on another number of ranks: the checkpoint's train_batch_size kept by the accumulation")
    with temporary_directory(args, "zt-resume-ranks-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=32)
        ds = write_ds(os.path.join(workdir, "ds.json"))

        def command(out, steps, *extra, micro=2):
            return [args.zerotune, "train", "--model", model, "--data", data, "--out", os.path.join(workdir, out),
                    "--deepspeed", ds, "--micro-batch-size", micro, "--max-steps", steps, "--seed", 5] + list(extra)

        run_ranks(2, command("reference", STEPS))
        run_ranks(2, command("moved", 3))
        result, _ = run_ranks(1, command("moved", STEPS, "--resume", "auto"))
        decision = "resume: 1 rank instead of 2: gradient_accumulation_steps 1 -> 2 keeps train_batch_size 4"
        report.check(result.stdout.count(decision) == 1, f"said once: {decision!r}")
        record = read_run(os.path.join(workdir, "moved"))
        report.check(record["gradient_accumulation_steps"] == 2 and record["train_batch_size"] == 4
                     and record.get("resume_batch", {}).get("gradient_accumulation_steps") == 2
                     and record["resume_batch"]["checkpoint_world_size"] == 2,
                     f"run.json: accumulation 2, train_batch_size 4, the decision recorded ({record.get('resume_batch')})")
        got = [entry["loss"] for entry in read_metrics(os.path.join(workdir, "moved"))]
        ref = [entry["loss"] for entry in read_metrics(os.path.join(workdir, "reference"))]
        report.check(len(got) == len(ref) == STEPS, f"{len(got)} steps (reference {len(ref)})")
        worst = max(abs(a - b) / abs(b) for a, b in zip(got[3:], ref[3:]))
        report.check(worst <= 2e-6, f"resumed steps 4-{STEPS}: losses within 2e-6 relative of the 2-rank run "
                     f"(worst {worst:.2e})")

        step3 = os.path.join(workdir, "moved", "checkpoints", "global_step3")  # saved by the 2 ranks
        refusals = (("micro-batch 3", {"micro": 3},
                     "no gradient_accumulation_steps keeps 4 with micro-batch 3 on 1 rank: use --micro-batch-size 4 "
                     "--grad-accum 1, --micro-batch-size 2 --grad-accum 2 or --micro-batch-size 1 --grad-accum 4"),
                    ("--grad-accum 1", {"extra": ["--grad-accum", 1]},
                     "gradient_accumulation_steps 1 is given (--grad-accum or the DeepSpeed JSON), so zerotune does not "
                     "choose it: to keep train_batch_size 4 on 1 rank, use --micro-batch-size 2 --grad-accum 2"))
        for index, (label, change, needle) in enumerate(refusals):
            result, _ = run_ranks(1, command(f"refused-{index}", STEPS, "--resume", step3, *change.get("extra", []),
                                             micro=change.get("micro", 2)), expect_ok=False)
            text = result.stdout + result.stderr
            report.check(result.returncode != 0 and needle in text and "train_batch_size 4 (2 ranks x micro-batch 2 x "
                         "gradient_accumulation_steps 1)" in text, f"{label}: refused naming the flags that would work")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

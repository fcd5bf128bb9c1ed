# AdaLomo under ZeRO (issue 16): the optimizer fused into backward on stages 0-3 (2 ranks, and 4
# ranks at stage 3) gives one rank's losses, grad norms and final weights within float
# reassociation (global batch 16 everywhere, one micro-batch per rank), with the two-pass
# schedule (gradient_clipping) and, at stage 2, without it. Its per-tensor state (a row and a
# column vector per matrix) is whole on every rank: each rank sums its slice's rows and columns
# and the sums are added over the ranks, so slices cutting rows and tensors held by one rank
# alone all update as one rank does. A checkpoint holds one copy of that state
# (rank-00000.h5 tensor_state/<parameter>/<name>): a W=2 stage-3 run resumed on W=4 at stage 1
# continues as the uninterrupted run. The loss goes down on the tour data. Refusals name the
# setting: gradient accumulation, optimizer offload, resuming LOMO's checkpoint.
import os

import h5py

from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_lomo_zero import CLIP, check_gradient_bytes, train
from test_optimizers import STEPS, compare  # losses, grad norms and weights against one rank, the same tolerances

ADALOMO = {"type": "AdaLomo", "params": {"lr": 0.05, "weight_decay": 0.01, "clip_grad_value": 0.05,
                                         "clip_threshold": 0.8}}
CASES = ((2, 0, "none"), (2, 1, "none"), (2, 2, "none"), (2, 3, "cpu+param"), (4, 3, "none"))


def run(zerotune, workdir, model, data, ranks, stage, offload, clipping, **keywords):
    name = keywords.pop("name", None) or f"adalomo-clip{clipping}-w{ranks}-s{stage}-{offload}"
    return train(zerotune, workdir, model, data, ranks, stage, offload, clipping, name=name,
                 optimizer=keywords.pop("optimizer", ADALOMO), **keywords)


def check_against_one_rank(report, zerotune, workdir, model, data):
    for clipping, cases in ((CLIP, CASES), (0.0, ((2, 2, "none"),))):
        reference, _ = run(zerotune, workdir, model, data, 1, 0, "none", clipping)
        losses = [record["loss"] for record in read_metrics(reference)]
        report.check(losses[-1] < losses[0], f"AdaLomo clip {clipping}: the loss goes down over {STEPS} steps "
                     f"({losses[0]:.4f} -> {losses[-1]:.4f})")
        for ranks, stage, offload in cases:
            label = f"AdaLomo clip {clipping} W={ranks} stage {stage} offload {offload}"
            out, _ = run(zerotune, workdir, model, data, ranks, stage, offload, clipping)
            compare(report, label, out, reference)
            check_gradient_bytes(report, label, out)


def check_checkpoint_state(report, checkpoint):
    """One copy of the per-tensor state, in partition 0's file: rows and columns of matrices, one
    vector for a norm weight."""
    with h5py.File(os.path.join(checkpoint, "rank-00000.h5"), "r") as file:
        if not report.check("tensor_state" in file, f"{checkpoint}: rank-00000.h5 has a tensor_state group"):
            return
        state = file["tensor_state"]
        query = state["model.layers.0.self_attn.q_proj.weight"]
        norm = state["model.norm.weight"]
        report.check(set(query.keys()) == {"exp_avg_sq_row", "exp_avg_sq_col"} and set(norm.keys()) == {"exp_avg_sq"},
                     f"{checkpoint}: a matrix keeps exp_avg_sq_row and exp_avg_sq_col, a norm weight exp_avg_sq "
                     f"({sorted(query.keys())}, {sorted(norm.keys())})")
        report.check(float(query["exp_avg_sq_row"][()].min()) > 0.0,
                     f"{checkpoint}: the saved second moment is the trained one (positive)")
    with h5py.File(os.path.join(checkpoint, "rank-00001.h5"), "r") as file:
        report.check("tensor_state" not in file, f"{checkpoint}: rank-00001.h5 holds no copy of the per-tensor state")


def check_resume(report, zerotune, workdir, model, data):
    name = "adalomo-resume"
    out, _ = run(zerotune, workdir, model, data, 2, 3, "none", CLIP, name=name, steps=3)
    check_checkpoint_state(report, os.path.join(out, "checkpoints", "global_step3"))
    out, _ = run(zerotune, workdir, model, data, 4, 1, "none", CLIP, name=name, extra=["--resume", "auto"])
    compare(report, "AdaLomo W=2 stage 3 for 3 steps -> W=4 stage 1", out,
            os.path.join(workdir, f"adalomo-clip{CLIP}-w1-s0-none"))


def check_refusals(report, zerotune, workdir, model, data):
    _, result = run(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="refused-accum", accumulation=2,
                    expect_ok=False)
    report.check(result.returncode != 0 and "gradient_accumulation_steps must be 1" in result.stderr,
                 f"AdaLomo with gradient accumulation 2 is refused, naming the setting (status {result.returncode})")
    _, result = run(zerotune, workdir, model, data, 2, 2, "cpu", CLIP, name="refused-offload", expect_ok=False)
    report.check(result.returncode != 0 and "offload_optimizer must be none" in result.stderr,
                 f"AdaLomo with offload_optimizer cpu is refused, naming the setting (status {result.returncode})")
    lomo = {"type": "LOMO", "params": {"lr": 0.05}}
    run(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="lomo-then-adalomo", optimizer=lomo)
    _, result = run(zerotune, workdir, model, data, 2, 2, "none", CLIP, name="lomo-then-adalomo",
                    extra=["--resume", "auto"], steps=STEPS + 2, expect_ok=False)
    report.check(result.returncode != 0 and "optimizer lomo" in result.stderr and "this run uses adalomo" in result.stderr,
                 f"an AdaLomo run refuses a LOMO checkpoint naming both (status {result.returncode})")


def main():
    args = parse_args(__doc__)
    report = Report("AdaLomo under ZeRO: same losses and weights as one rank, per-tensor state whole on every rank")
    with temporary_directory(args, "zt-adalomo-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        check_against_one_rank(report, args.zerotune, workdir, model, data)
        check_resume(report, args.zerotune, workdir, model, data)
        check_refusals(report, args.zerotune, workdir, model, data)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

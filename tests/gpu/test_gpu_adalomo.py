# GPU (label gpu; on the emulated device gpu-emu): AdaLomo (issue 16) on the CUDA backend: its
# kernels (adalomo_square_sums, adalomo_moments, adalomo_direction) inside training. Stage 3 on 2
# ranks (its partitioned two-pass norm; stage 2 runs on the CPU in mpi.adalomo_zero) gives one GPU rank's losses and weights with the two-pass schedule (the checks of
# tests/mpi/test_adalomo_zero.py, which runs them on the CPU), the loss goes down, and a W=2
# stage-3 checkpoint resumed on one rank continues as the uninterrupted run (the per-tensor state
# read back into device memory). Without a GPU every run fails with zerotune's message (this test
# never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_adalomo_zero import run
from test_lomo_zero import CLIP
from test_optimizers import STEPS, compare

CASES = ((2, 3, "none"),)


def main():
    args = parse_args(__doc__)
    report = Report("AdaLomo on the CUDA backend: one rank's results, per-tensor state checkpointed")
    with temporary_directory(args, "zt-gpu-adalomo-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        reference, _ = run(args.zerotune, workdir, model, data, 1, 0, "none", CLIP, device="cuda", name="w1-cuda")
        losses = [record["loss"] for record in read_metrics(reference)]
        report.check(losses[-1] < losses[0], f"AdaLomo on cuda: the loss goes down over {STEPS} steps "
                     f"({losses[0]:.4f} -> {losses[-1]:.4f})")
        for ranks, stage, offload in CASES:
            out, _ = run(args.zerotune, workdir, model, data, ranks, stage, offload, CLIP, device="cuda",
                         name=f"w{ranks}-s{stage}-cuda")
            compare(report, f"AdaLomo on cuda W={ranks} stage {stage}", out, reference)
        run(args.zerotune, workdir, model, data, 2, 3, "none", CLIP, device="cuda", name="resume-cuda", steps=3)
        out, _ = run(args.zerotune, workdir, model, data, 1, 0, "none", CLIP, device="cuda", name="resume-cuda",
                     extra=["--resume", "auto"])
        compare(report, "AdaLomo on cuda W=2 stage 3 for 3 steps -> W=1", out, os.path.join(workdir, "w1-cuda"))
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

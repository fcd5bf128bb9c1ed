# GPU (label gpu; on the emulated device gpu-emu): SGD and Lamb (issue 16) under ZeRO on the CUDA
# backend, the cases of tests/mpi/test_optimizers.py that put the state and the per-tensor norms
# on the device (stages 2-3 on 2 ranks) or on the host (offload), against one rank at stage 0 on
# the GPU: same losses, grad norms and final weights within float reassociation, and the state
# bytes per rank. Without a GPU every run fails with zerotune's message (this test never skips).
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, temporary_directory
from test_optimizers import check_optimizers

CASES = ((2, 2, "cpu"), (2, 3, "none"))  # stage 0 on 2 ranks: mpi.optimizers (the same kernels as the 1-rank reference)


def main():
    args = parse_args(__doc__)
    report = Report("SGD and Lamb under ZeRO on the CUDA backend: same losses and weights as one rank")
    with temporary_directory(args, "zt-gpu-optim-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        check_optimizers(report, args.zerotune, workdir, model, data, CASES, "cuda")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

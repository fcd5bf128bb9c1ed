"""ZeRO++ on the CUDA backend (issue 36): tests/mpi/test_zero_plus_plus.py's plain ZeRO-3 and
all three of qwZ, hpZ and qgZ, 4 ranks as two "nodes" of 2, on the GPU (label gpu) or the emulated
device (label gpu-emu: each rank its own emulated GPU, the collectives through the emulated NCCL):
the block quantization kernels, the quantized gathers and the two-hop all-to-alls in a training
run. Losses within test_zero_plus_plus.LOSS_REL of ZeRO-3's on the same device; the plan within 5%
of the formulas, and each step's counters equal to it (NCCL, or host staging where ranks share one
GPU: its traffic counted by the host communicator). About 15 s on the emulated device."""
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, temporary_directory
from test_zero_plus_plus import LOSS_REL, check_bytes, check_losses, losses, trainer


def main():
    args = parse_args(__doc__)
    report = Report("ZeRO++ on the CUDA backend: ZeRO-3's losses within the bound, bytes as planned")
    with temporary_directory(args, "zt-gpu-zeropp-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=48)
        train = trainer(args.zerotune, workdir, model, data, "cuda")
        outs = {case: train(case, case) for case in ("plain", "all")}
        for case, out in outs.items():
            check_bytes(report, case, out)
        check_losses(report, "ZeRO++ against ZeRO-3 on the GPU", losses(outs["all"]), losses(outs["plain"]), LOSS_REL)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

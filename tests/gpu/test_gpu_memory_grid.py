# The memory estimate (`zerotune estimate --device cuda`, the memory model with this device's
# allocator) against the device's measured peak (mem_device_peak) within 10% over a grid of ZeRO
# stages, offload, activation checkpointing, micro-batches, sequence lengths, 1-2 ranks, full and
# LoRA (tests/mpi/memory_grid.py; issue 20). Label gpu-emu on the emulated device, gpu on a real one.
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from memory_grid import check_grid
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("memory estimate vs measured peaks on the device")
    with temporary_directory(args, "zt-gpu-memory-grid-") as workdir:
        check_grid(report, args.zerotune, workdir, "cuda")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

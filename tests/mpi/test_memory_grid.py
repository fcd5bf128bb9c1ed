# The memory estimate (`zerotune estimate --device cpu`, the memory model) against the CPU
# backend's measured peak (mem_cpu_backend_peak) within 10% over a grid of ZeRO stages, offload,
# activation checkpointing, micro-batches, sequence lengths, 1-2 ranks, full and LoRA
# (memory_grid.py; issue 20).
from memory_grid import check_grid
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("memory estimate vs measured peaks on the CPU backend")
    with temporary_directory(args, "zt-memory-grid-") as workdir:
        check_grid(report, args.zerotune, workdir, "cpu")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

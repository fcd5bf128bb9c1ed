# The memory model and the run allocate the same buffers, allocation by allocation, through
# set-up and the first step, on the CPU backend, for every ZeRO stage, offload, optimizer family,
# LoRA/QLoRA, packing, checkpointing and accumulation, pipeline stages (1F1B, GPipe, interleaved;
# a tied OPT's) (allocation_drift.py; issues 34, 32).
from allocation_drift import CASES, check_drift
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("memory model vs run, allocation by allocation (CPU backend)")
    with temporary_directory(args, "zt-allocation-drift-") as workdir:
        check_drift(report, args.zerotune, workdir, "cpu", CASES)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

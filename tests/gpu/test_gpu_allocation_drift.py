# The memory model and the run allocate the same buffers, allocation by allocation, through
# set-up and the first step, on the device (the emulated one, or a real GPU), for every ZeRO
# stage, offload, optimizer family, LoRA/QLoRA, packing (the device's packed positions),
# checkpointing, activation offload and accumulation, pipeline stages (1F1B, GPipe, interleaved;
# a tied OPT's)
# (tests/mpi/allocation_drift.py; issues 34, 32).
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from allocation_drift import CASES, GPU_CASES, check_drift
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("memory model vs run, allocation by allocation (device)")
    with temporary_directory(args, "zt-gpu-allocation-drift-") as workdir:
        check_drift(report, args.zerotune, workdir, "cuda", dict(CASES, **GPU_CASES))
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

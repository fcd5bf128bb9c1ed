# The memory model and the run allocate the same buffers, allocation by allocation, through
# set-up and the first step, on the device (the emulated one, or a real GPU), for every ZeRO
# stage, offload, optimizer family, LoRA/QLoRA, packing (the device's packed positions),
# checkpointing, activation offload and accumulation (tests/mpi/allocation_drift.py; issue 34).
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from allocation_drift import CASES, CPU_ONLY_CASES, GPU_CASES, check_drift
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("memory model vs run, allocation by allocation (device)")
    with temporary_directory(args, "zt-gpu-allocation-drift-") as workdir:
        cases = {name: case for name, case in CASES.items() if name not in CPU_ONLY_CASES}
        check_drift(report, args.zerotune, workdir, "cuda", dict(cases, **GPU_CASES))
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

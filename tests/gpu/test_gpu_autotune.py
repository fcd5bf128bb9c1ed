# `zerotune autotune` on the device (label gpu-emu on the emulated device, gpu on a GPU; its free
# memory under --device-memory-limit is the budget): the chosen setting fits and is the fastest measured; a
# budget nothing fits names the smallest need (tests/mpi/autotune_check.py; issue 20).
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from autotune_check import check_autotune
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("zerotune autotune on the device")
    with temporary_directory(args, "zt-gpu-autotune-") as workdir:
        check_autotune(report, args.zerotune, workdir, "cuda", 1)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

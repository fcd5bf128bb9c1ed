# `zerotune autotune` on the CPU backend, 2 ranks, with a small --device-memory budget: the
# chosen setting fits and is the fastest measured; a budget nothing fits names the smallest need
# (autotune_check.py; issue 20).
from autotune_check import check_autotune
from mpi_common import Report, main_guard, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("zerotune autotune on the CPU backend")
    with temporary_directory(args, "zt-autotune-") as workdir:
        check_autotune(report, args.zerotune, workdir, "cpu", 2)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

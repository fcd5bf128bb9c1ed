# Partial optimizer offload (offload_optimizer.ratio) on the CPU backend, 2 ranks at stage 3 with
# parameter offload (the checks: offload_ratio_checks.py): bit-identical to offloading everything
# (also with --delayed-param-update), where the bytes are, a run killed at ratio 0.5 resumed at
# ratio 1 from its checkpoint bit-identical to the uninterrupted ratio-0.5 run (every ratio gives
# the same bits on this backend); the refusals.
from mpi_common import Report, main_guard, parse_args, temporary_directory
from offload_ratio_checks import run_checks

OFFLOAD = {"device": "cpu"}
CASES = (
    ("stage 3 + offload_optimizer ratio 0.5 + offload_param, 2 ranks", 2,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": OFFLOAD, "offload_param": OFFLOAD},
     0.5, None, 0.0, "ratio 1"),
)


def main():
    args = parse_args("Partial optimizer offload (offload_optimizer.ratio) on the CPU backend")
    report = Report("ZeRO-Offload++'s partial optimizer offload (CPU backend)")
    with temporary_directory(args, "zt-offload-ratio-") as workdir:
        run_checks(report, args.zerotune, workdir, CASES, [])
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

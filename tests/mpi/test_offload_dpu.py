# ZeRO-Offload's delayed parameter update on the CPU backend, 1 and 2 ranks (the checks:
# offload_dpu_checks.py): never delayed = without the flag, the stale-parameter rule bit for bit,
# the loss falls, exact resume; the refusal without optimizer offload.
from mpi_common import Report, main_guard, parse_args, temporary_directory
from offload_dpu_checks import run_checks

OFFLOAD = {"device": "cpu"}
CASES = (
    ("stage 2 + offload_optimizer, 1 rank", 1, {"stage": 2, "offload_optimizer": OFFLOAD}, None),
    ("stage 3 + offload_optimizer + offload_param, 2 ranks", 2,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": OFFLOAD, "offload_param": OFFLOAD},
     None),
)


def main():
    args = parse_args("ZeRO-Offload's delayed parameter update on the CPU backend")
    report = Report("ZeRO-Offload's one-step delayed parameter update (CPU backend)")
    with temporary_directory(args, "zt-offload-dpu-") as workdir:
        run_checks(report, args.zerotune, workdir, CASES, [])
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# ZeRO-Offload's delayed parameter update on the emulated device (the checks:
# tests/mpi/offload_dpu_checks.py): bf16 with pinned optimizer offload, where the background thread
# rounds the updated master into the host staging copy that the next apply_update uploads, on one
# rank at stage 2, on one at stage 3 with half the optimizer offloaded, and on two at stage 3 with
# parameter offload. --update-per-bucket (bit-identical to
# the update after backward) at stage 2 only, where the worker rounds into the staging copy (stage 3
# with parameter offload takes the CPU backend's path, which tests/mpi/test_offload_dpu.py checks).
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from mpi_common import Report, main_guard, parse_args, temporary_directory  # noqa: E402
from offload_dpu_checks import run_checks  # noqa: E402

PINNED_CPU = {"device": "cpu", "pin_memory": True}
CASES = (
    ("emulated device, stage 2 bf16 + offload_optimizer, 1 rank", 1, {"stage": 2, "offload_optimizer": PINNED_CPU},
     "bf16"),
    # The update's rounded parameters go up unit by unit on the transfer queue, each unit's gather
    # ordered after its own upload (ZeroEngine::upload_rounded_partitions); the device-resident half
    # is updated and rounded on the device.
    ("emulated device, stage 3 bf16 + offload_optimizer ratio 0.5, 1 rank", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": dict(PINNED_CPU, ratio=0.5)},
     "bf16"),
    ("emulated device, stage 3 bf16 + offload_optimizer + offload_param, 2 ranks", 2,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": PINNED_CPU,
      "offload_param": PINNED_CPU}, "bf16"),
)


def main():
    args = parse_args("ZeRO-Offload's delayed parameter update on the emulated device")
    report = Report("ZeRO-Offload's one-step delayed parameter update (emulated device)")
    with temporary_directory(args, "zt-emu-offload-dpu-") as workdir:
        run_checks(report, args.zerotune, workdir, CASES, ["--device", "cuda"], per_bucket_cases=(0,))
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

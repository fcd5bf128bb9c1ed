# Partial optimizer offload (offload_optimizer.ratio) on the emulated device (the checks:
# tests/mpi/offload_ratio_checks.py): one rank at stage 3, bf16, pinned optimizer offload with ratio
# 0.5, where the first units' master and Adam moments are device buffers updated by the device's
# AdamW and rounded on the device, the rest by the CPU Adam and uploaded. Against ratio 1: losses
# and final weights bit-identical (the emulated device's AdamW kernel, compiled for the host, gives
# the CPU Adam's bits; a real GPU's may differ by its FMA contraction, so this check is the
# emulator's), also with --delayed-param-update and (the first case) with bf16 gradients, the loss
# falls, the bytes' places (device peak, host bytes, banner), and (the offload_param case) exact resume.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from mpi_common import Report, main_guard, parse_args, temporary_directory  # noqa: E402
from offload_ratio_checks import run_checks  # noqa: E402

PINNED_CPU = {"device": "cpu", "pin_memory": True}
CASES = (
    ("emulated device, stage 3 bf16 + offload_optimizer ratio 0.5, 1 rank", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": PINNED_CPU}, 0.5, "bf16", 0.0,
     None),
    # offload_param: the resident part's gathers round its master on the device in place (the rest
    # upload the host partition, which under --delayed-param-update swaps with the twin the host
    # update rounded into); on 2 ranks each rank's resident slice is rounded into the all-gather's input.
    ("emulated device, stage 3 bf16 + offload_optimizer ratio 0.5 + offload_param, 1 rank", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": PINNED_CPU,
      "offload_param": PINNED_CPU}, 0.5, "bf16", 0.0, "same ratio"),
    ("emulated device, stage 3 bf16 + offload_optimizer ratio 0.5 + offload_param, 2 ranks", 2,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": PINNED_CPU,
      "offload_param": PINNED_CPU}, 0.5, "bf16", 0.0, None),
)


def main():
    args = parse_args("Partial optimizer offload (offload_optimizer.ratio) on the emulated device")
    report = Report("ZeRO-Offload++'s partial optimizer offload (emulated device)")
    with temporary_directory(args, "zt-emu-offload-ratio-") as workdir:
        run_checks(report, args.zerotune, workdir, CASES, ["--device", "cuda"])
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

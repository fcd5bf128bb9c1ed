# Emulated device only (label gpu-emu; a GPU has no such counter): the host waits of a training
# step on the CUDA backend (issue 30, "a step that never waits"). The emulator counts every
# runtime call in which the host waits for device work that has not completed yet
# (cudaStreamSynchronize / cudaEventSynchronize with work left, cudaDeviceSynchronize, blocking
# cudaMemcpy, a copy into pageable memory, cudaFree, cudaFreeHost: src/emu/emu_counters.cpp);
# `--cuda-profiler-steps 3:4` brackets steps 3 and 4 with cudaProfilerStart/Stop, and the
# emulator counts their calls apart (ZT_EMU_CALL_REPORT's "captured host_waits").
#
# The budget (docs/emulated-device.md, "Host waits of a step"): ONE host wait per step, the
# gradient check (the global norm and the fp16 overflow flag, read together; the step's loss sum
# rides along), for every ZeRO stage, with optimizer offload and parameter offload (pinned host
# memory), gradient accumulation and activation offload. Micro-batch uploads go through pinned
# staging; ordering-only events carry no status copy. LOMO (the update fused into backward) reads
# the sum of squares of each unit's parameter groups (decay, no decay) as the unit completes, once
# per pass (its rule: a gradient that is not finite leaves its parameters unchanged, decided on
# the host): at most one wait per unit, group and pass. The delayed parameter update
# (--delayed-param-update, docs/zero-offload.md) adds none: its host gradient copy and 16-bit
# staging copy have twins, so the backward copies each bucket out as it completes while the update
# in flight reads the other copy, and the update starts without waiting for the uploads. The
# per-bucket update (--update-per-bucket, no clipping) waits, once the backward of the next unit is
# queued, for the copies of the buckets completed before it, and hands them to the host worker: at
# most one more wait per unit, and at least one (else nothing was updated during the backward).
# The pair objectives compute their loss on the host from what each micro-batch's forward leaves
# there: the reward model's values, DPO's reference and policy log-probabilities (the reference's
# queued and read after the policy's, so one wait for both): one wait per micro-batch; the loss
# itself joins the step's sum when that is read, not per micro-batch (before: one more wait each,
# for the whole backward, and DPO's reference another).
#
# The same report counts the bytes each direction moves on a queue that also computes and on a
# copy-only one ("copy_bytes"): on the compute queue at most a few KiB per step go to the host
# (the values above); with offload_optimizer the reduced gradients go on the transfer queue
# toward the host, beside the backward (issue 30: on a GPU the compute queue waited for them,
# 29 ms of an opt-1.3b step at ratio 0.3). After a host update that ran beside the device (DPU,
# per bucket) the rounded parameters go up on the transfer queue toward the device, unit by unit,
# each unit's gather ordered after its own upload; the compute queue uploads only the micro-batches.
# So do offload_param's gathers: on one rank the gather is an upload on the transfer queue, on several
# each rank's slice goes up on it and the collective waits for that upload, not the compute queue
# (before 2026-11-29 the slices went up on the compute queue: 476 KB in the 2-rank case's two steps).
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from mpi_common import (Report, main_guard, make_model_and_data, parse_args, read_run, run_ranks,  # noqa: E402
                        temporary_directory)
from test_reward_zero import write_pairs  # noqa: E402

WAITS_PER_STEP = 1
# Device-to-host bytes on the compute queue per step: the values the host reads (status words, the
# loss, an objective's values), never a tensor (the tiny model's gradients are 495 KB in bf16).
DOWNLOAD_BYTES_ON_COMPUTE_PER_STEP = 4096
# Host-to-device bytes on the compute queue per step after a host update that ran beside the device:
# the micro-batches (tokens, labels, positions: about 7.4 KB a step here), never the parameters (247 KB).
UPLOAD_BYTES_ON_COMPUTE_PER_STEP = 16384
CAPTURED_STEPS = (3, 4)
STEPS = 4

PINNED_CPU = {"device": "cpu", "pin_memory": True}
# (label, ranks, zero_optimization, precision, optimizer, extra flags)
CASES = (
    ("stage 0 bf16", 1, {"stage": 0}, "bf16", None, ()),
    ("stage 2 fp16 + offload_optimizer", 1, {"stage": 2, "offload_optimizer": PINNED_CPU}, "fp16", None, ()),
    ("stage 2 bf16, 2 ranks, activation offload", 2, {"stage": 2}, "bf16", None, ("--activation-checkpointing", "--offload-activations")),
    ("stage 3 fp16, 2 ranks", 2, {"stage": 3, "stage3_param_persistence_threshold": 0}, "fp16", None, ()),
    ("stage 3 bf16 + offload_optimizer + offload_param, 2 ranks", 2,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": PINNED_CPU,
      "offload_param": PINNED_CPU}, "bf16", None, ()),
    # One rank: the gathers are uploads from the pinned partition on the transfer queue (no
    # collective), or, where the master is on the device (the resident part of a partial offload;
    # all of it without optimizer offload), rounded from it in place.
    ("stage 3 fp16 + offload_optimizer ratio 0.5 + offload_param, 1 rank", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0,
      "offload_optimizer": dict(PINNED_CPU, ratio=0.5), "offload_param": PINNED_CPU}, "fp16", None, ()),
    ("stage 3 fp16 + offload_param, 1 rank", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_param": PINNED_CPU}, "fp16", None, ()),
    ("stage 2 bf16 + offload_optimizer, delayed parameter update", 1, {"stage": 2, "offload_optimizer": PINNED_CPU},
     "bf16", None, ("--delayed-param-update", "1")),
    ("stage 3 bf16 + offload_optimizer ratio 0.5, delayed parameter update", 1,
     {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_optimizer": dict(PINNED_CPU, ratio=0.5)},
     "bf16", None, ("--delayed-param-update", "1")),
    ("stage 2 bf16 + offload_optimizer, per-bucket update", 1, {"stage": 2, "offload_optimizer": PINNED_CPU},
     "bf16", None, ("--update-per-bucket",)),
    ("stage 2 bf16 LOMO (fused update, norm pass)", 1, {"stage": 2}, "bf16", {"type": "LOMO", "params": {"lr": 1e-3}},
     ()),
    ("stage 2 bf16, reward objective", 1, {"stage": 2}, "bf16", None, ("--objective", "reward")),
    ("stage 2 bf16, DPO objective, LoRA", 1, {"stage": 2}, "bf16", None, ("--objective", "dpo", "--lora-r", "4")),
)
# Host waits per micro-batch of the objectives whose loss is computed on the host.
OBJECTIVE_WAITS_PER_MICRO_BATCH = {"reward": 1, "dpo": 1}


def write_config(path, ranks, zero, precision, optimizer, extra):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "tiny-llama",
                           "ds_config.json")) as stream:
        config = json.load(stream)
    config["train_micro_batch_size_per_gpu"] = 4
    accumulation = 1 if optimizer else 2  # LOMO updates inside backward: one micro-batch per step
    config["gradient_accumulation_steps"] = accumulation
    config["train_batch_size"] = 4 * accumulation * ranks
    config["zero_optimization"] = zero
    config[precision] = {"enabled": True, **({"initial_scale_power": 8} if precision == "fp16" else {})}
    if optimizer:
        config["optimizer"] = optimizer
        config.pop("scheduler", None)
    if "--update-per-bucket" in extra:  # it refuses clipping (the update of a bucket cannot wait for the norm)
        config.pop("gradient_clipping")
    with open(path, "w") as stream:
        json.dump(config, stream)
    return path


def captured_waits(report_prefix):
    """Per rank: (captured host waits by call, capture ranges, all host waits of the run, captured bytes
    copied between host and device by direction and queue)."""
    results = []
    for path in sorted(glob.glob(report_prefix + ".*")):
        with open(path) as stream:
            counts = json.load(stream)
        results.append((counts.get("captured host_waits", {}), counts.get("capture_ranges", {}).get("cudaProfilerStart", 0),
                        sum(counts.get("host_waits", {}).values()), counts.get("captured copy_bytes", {})))
    return results


def check_downloads(report, label, copied, steps, offloads_optimizer):
    """Nothing but a few values crosses to the host on the compute queue; with offload_optimizer the
    reduced gradients go down on a copy queue beside the backward's compute."""
    on_compute = copied.get("device to host, on a compute stream", 0)
    report.check(on_compute <= DOWNLOAD_BYTES_ON_COMPUTE_PER_STEP * steps,
                 f"{label}: {on_compute} bytes device to host on the compute queue in steps "
                 f"{CAPTURED_STEPS[0]}-{CAPTURED_STEPS[1]} (at most {DOWNLOAD_BYTES_ON_COMPUTE_PER_STEP} per step): {copied}")
    if offloads_optimizer:
        beside = copied.get("device to host, on a copy stream", 0)
        report.check(beside > DOWNLOAD_BYTES_ON_COMPUTE_PER_STEP * steps,
                     f"{label}: the gradients go to the host on a copy queue ({beside} bytes in the captured steps)")


def check_uploads(report, label, copied, steps, parameters_uploaded=True):
    """A host update that ran beside the device (DPU, per bucket): its rounded parameters go up on a copy
    queue, unit by unit (each unit's gather waits for its own). offload_param: each gather's upload of the
    host partition (one rank: the gather itself; several: this rank's slice before the collective) goes on a
    copy queue too (none without offload_optimizer: the gathers round the device master in place, so
    nothing goes up). The compute queue uploads the micro-batches only."""
    on_compute = copied.get("host to device, on a compute stream", 0)
    beside = copied.get("host to device, on a copy stream", 0)
    least_beside = UPLOAD_BYTES_ON_COMPUTE_PER_STEP * steps if parameters_uploaded else -1
    report.check(on_compute <= UPLOAD_BYTES_ON_COMPUTE_PER_STEP * steps and beside > least_beside,
                 f"{label}: {on_compute} bytes host to device on the compute queue in steps {CAPTURED_STEPS[0]}-"
                 f"{CAPTURED_STEPS[1]} (at most {UPLOAD_BYTES_ON_COMPUTE_PER_STEP} per step), the parameters on a copy "
                 f"queue ({beside} bytes)")


def main():
    args = parse_args(__doc__)
    report = Report(f"host waits per training step on the emulated device: at most {WAITS_PER_STEP} (LOMO: per unit)")
    with temporary_directory(args, "zt-step-syncs-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        pairs = os.path.join(workdir, "pairs")
        os.makedirs(pairs)
        write_pairs(os.path.join(pairs, "train-00000.h5"), seed=9, pairs=32)
        for index, (label, ranks, zero, precision, optimizer, extra) in enumerate(CASES):
            objective = extra[extra.index("--objective") + 1] if "--objective" in extra else None
            out = os.path.join(workdir, f"run{index}")
            prefix = os.path.join(workdir, f"calls{index}")
            ds = write_config(out + ".json", ranks, zero, precision, optimizer, extra)
            os.environ["ZT_EMU_CALL_REPORT"] = prefix
            run_ranks(ranks, [args.zerotune, "train", "--model", model, "--data", pairs if objective else data, "--out", out,
                              "--deepspeed", ds,
                              "--max-steps", STEPS, "--seed", 3, "--device", "cuda", "--cuda-profiler-steps",
                              f"{CAPTURED_STEPS[0]}:{CAPTURED_STEPS[1]}"] + list(extra))
            ranks_counts = captured_waits(prefix)
            report.check(len(ranks_counts) == ranks, f"{label}: a call report from each of the {ranks} ranks")
            steps = CAPTURED_STEPS[1] - CAPTURED_STEPS[0] + 1
            budget, least = WAITS_PER_STEP, 0
            if optimizer:  # LOMO with clipping: a norm pass and an update pass, one read per unit and group
                budget = 2 * 2 * len(read_run(out)["zero_layout"]["unit_elements"])
            if "--update-per-bucket" in extra:  # + at most one per unit (one rank: a bucket per unit)
                budget, least = WAITS_PER_STEP + len(read_run(out)["zero_layout"]["unit_elements"]), WAITS_PER_STEP + 1
            if objective:  # + the values the host's loss reads, per micro-batch (2 per step)
                budget = WAITS_PER_STEP + 2 * OBJECTIVE_WAITS_PER_MICRO_BATCH[objective]
            for rank, (captured, ranges, everything, copied) in enumerate(ranks_counts):
                # The counter is live (set-up and tear-down wait) and the capture range happened once.
                report.check(ranges == 1 and everything > 0,
                             f"{label}, rank {rank}: one capture range ({ranges}), {everything} host waits in the run")
                waits = sum(captured.values())
                report.check(least * steps <= waits <= budget * steps,
                             f"{label}, rank {rank}: {waits} host waits in steps {CAPTURED_STEPS[0]}-{CAPTURED_STEPS[1]} "
                             f"(at most {budget} per step{f', at least {least}' if least else ''}): {captured}")
                check_downloads(report, f"{label}, rank {rank}", copied, steps, "offload_optimizer" in zero)
                if "--delayed-param-update" in extra or "--update-per-bucket" in extra or "offload_param" in zero:
                    check_uploads(report, f"{label}, rank {rank}", copied, steps, "offload_optimizer" in zero)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# Partial optimizer offload (zero_optimization.offload_optimizer.ratio < 1, DeepSpeed's
# ZeRO-Offload++; docs/zero-offload.md) on whole `zerotune train` runs at stage 3;
# tests/mpi/test_offload_ratio.py runs these checks on the CPU backend, tests/emu/test_offload_ratio.py
# on the emulated device. Per case, against the same run offloading everything (ratio 1):
#  1. the trajectory: bit-identical (atol 0: the device's and the host's AdamW give the same bits on
#     the CPU backend and the emulated device), else within `atol`, and the loss falls; the same with
#     --delayed-param-update 1 (the resident part's update delayed with the host's);
#  2. where the bytes are: run.json's zero_memory_per_rank.resident_optimizer > 0 (0 at ratio 1),
#     host bytes smaller by it plus the resident part's gradient copy, and the start banner's
#     "(ratio R: ... of it on the device)";
#  3. exact resume (`resume` "same ratio"): killed in step 5 and resumed from the checkpoint of step 3,
#     bit-identical to the uninterrupted run; with "ratio 1", resumed at ratio 1 instead (a checkpoint
#     holds each partition as one array whatever the ratio), bit-identical to the run at ratio R;
# on a device, the first case again with bf16 gradients (data_types.grad_accum_dtype: the resident
# pieces widened on the device); and once, on the CPU backend: the refusals (below stage 3; with
# --update-per-bucket).
import os

from mpi_common import read_run, run_ranks, write_ds_config
from offload_dpu_checks import DpuRuns, losses, repeated_sample_data, same_run
from mpi_common import check_weights, load_weights, make_model_and_data, read_metrics


OP_SCRATCH_BYTES = 64 << 10  # the CUDA backend's op scratch the memory model leaves out (train/memory_model.h)


def ratio_runs(zerotune, workdir, model, data, ranks, zero, ratio, extra, precision):
    """DpuRuns (offload_dpu_checks.py) at offload_optimizer.ratio `ratio`, in workdir/ratio-R."""
    directory = os.path.join(workdir, f"ratio-{ratio}")
    os.makedirs(directory)
    offload = dict(zero["offload_optimizer"], ratio=ratio)
    return DpuRuns(zerotune, directory, model, data, ranks, dict(zero, offload_optimizer=offload), extra, precision)


def compare(report, label, got, reference, atol):
    if atol == 0.0:
        same_run(report, label, got, reference)
    else:
        check_weights(report, label, load_weights(got + ".safetensors"), load_weights(reference + ".safetensors"), atol,
                      read_metrics(reference))


def check_memory(report, label, partial, full, ratio, grad_bytes, stdout):
    memory, whole = read_run(partial)["zero_memory_per_rank"], read_run(full)["zero_memory_per_rank"]
    resident = memory["resident_optimizer"]
    report.check(resident > 0 and whole["resident_optimizer"] == 0,
                 f"{label}: {resident} bytes of master + optimizer state on the device at ratio {ratio}, none at 1")
    # AdamW: master + 2 moments, 12 bytes per resident element, which also leaves the host's gradient copy.
    expected = resident + resident // 12 * grad_bytes
    report.check(whole["host"] - memory["host"] == expected,
                 f"{label}: host bytes {whole['host']} -> {memory['host']} (less by {expected})")
    peaks = [max(record.get("mem_device_peak") or 0 for record in read_metrics(out)) for out in (partial, full)]
    if peaks[1]:  # a device (the emulated one): the resident part is device memory
        report.check(peaks[0] - peaks[1] >= resident, f"{label}: the device's peak {peaks[1]} -> {peaks[0]} B "
                     f"(more by at least the {resident} resident bytes)")
        # The memory model's prediction of the step's peak (run.json) is the measured one, up to the
        # backend's op scratch it leaves out (a few KiB). With offload_param the resident part's
        # rounding to the host partition once went through op scratch of its whole size (on an H200,
        # opt-1.3b at ratio 0.3: 1.67 GiB over the prediction).
        for out, peak, name in ((partial, peaks[0], f"ratio {ratio}"), (full, peaks[1], "ratio 1")):
            predicted = read_run(out)["memory_predicted"]["device_peak_bytes"]
            report.check(0 <= peak - predicted <= OP_SCRATCH_BYTES,
                         f"{label}: {name}'s device peak {peak} B is the memory model's {predicted} B "
                         f"(+ at most {OP_SCRATCH_BYTES} B of op scratch)")
    banner = [line for line in stdout.splitlines() if line.startswith("zero: stage")]
    report.check(bool(banner) and f"(ratio {ratio}: " in banner[0] and "on the device)" in banner[0],
                 f"{label}: the banner says what stays on the device: {banner[:1]}")


def check_case(report, label, zerotune, workdir, model, data, case, extra):
    ranks, zero, ratio, precision, atol, resume = case
    full = ratio_runs(zerotune, workdir, model, data, ranks, zero, 1.0, extra, precision)
    partial = ratio_runs(zerotune, workdir, model, data, ranks, zero, ratio, extra, precision)
    flags = ["--save-every", 3]
    reference, got = full.train("full", flags), os.path.join(partial.workdir, "partial")
    result, _ = run_ranks(ranks, partial.command(got, flags))  # (its banner read below)
    compare(report, f"{label}: ratio {ratio} vs ratio 1", got, reference, atol)
    # With the one-step delayed update (from update 2): the resident part's update is delayed alike.
    delayed = ["--delayed-param-update", 1]
    compare(report, f"{label}, --delayed-param-update 1: ratio {ratio} vs ratio 1", partial.train("delayed", delayed),
            full.train("delayed", delayed), atol)
    trajectory = losses(got)
    report.check(trajectory[-1] < trajectory[0] - 0.1,
                 f"{label}: the loss falls ({trajectory[0]:.4f} -> {trajectory[-1]:.4f})")
    check_memory(report, label, got, reference, ratio, 4, result.stdout)

    if resume is None:
        return
    out, result = partial.train("killed", flags, env={"ZT_FAULT": f"kill:step:{ranks - 1}:5"})
    report.check(result.returncode != 0, f"{label}: the run killed in step 5 failed (status {result.returncode})")
    resumed_at = full if resume == "ratio 1" else partial
    run_ranks(ranks, resumed_at.command(out, flags + ["--resume", "auto"]))
    how = "at ratio 1" if resume == "ratio 1" else f"at ratio {ratio}"
    same_run(report, f"{label}: killed in step 5, resumed from step 3 {how}, vs uninterrupted at ratio {ratio}", out,
             got)


def check_16bit_gradients(report, label, zerotune, workdir, model, data, case, extra):
    """data_types.grad_accum_dtype bf16: the resident pieces' gradients widened on the device (a GPU's
    AdamW does not fuse it), the others on the host; ratio R vs 1 as in check_case."""
    ranks, zero, ratio, _, atol, _ = case
    precision = {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "bf16"}}
    full = ratio_runs(zerotune, workdir, model, data, ranks, zero, 1.0, extra, precision)
    partial = ratio_runs(zerotune, workdir, model, data, ranks, zero, ratio, extra, precision)
    compare(report, f"{label}, bf16 gradients: ratio {ratio} vs ratio 1", partial.train("bf16-grads"),
            full.train("bf16-grads"), atol)


def check_refusals(report, zerotune, workdir, model, data, extra):
    for zero, flags, words in (
            ({"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}, [], "needs ZeRO stage 3"),
            ({"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}, ["--update-per-bucket"],
             "--update-per-bucket")):
        ds = write_ds_config(os.path.join(workdir, "ds-refused.json"), 4, 2, zero)
        result, _ = run_ranks(1, [zerotune, "train", "--model", model, "--data", data, "--out",
                                  os.path.join(workdir, "refused"), "--deepspeed", ds, "--max-steps", 2] + flags +
                              list(extra), expect_ok=False)
        lines = [line for line in (result.stdout + result.stderr).splitlines() if "offload_optimizer.ratio" in line]
        report.check(result.returncode != 0 and bool(lines) and words in lines[0],
                     f"offload_optimizer.ratio refused naming {words!r} (status {result.returncode}): {lines[:1]}")


def run_checks(report, zerotune, workdir, cases, extra):
    """cases: (label, ranks, zero_optimization with offload_optimizer, ratio, precision or None,
    atol of the final weights against ratio 1 (0: bit-identical), resume: "same ratio", "ratio 1" or
    None (no resume check))."""
    model, _ = make_model_and_data(zerotune, workdir, samples=8)
    data = repeated_sample_data(os.path.join(workdir, "repeated"))
    if not extra:  # (checked at start, before any device work: the CPU backend's run covers both)
        check_refusals(report, zerotune, workdir, model, data, extra)
    for index, (label, *case) in enumerate(cases):
        case_dir = os.path.join(workdir, f"case{index}")
        os.makedirs(case_dir)
        check_case(report, label, zerotune, case_dir, model, data, case, extra)
        if index == 0 and extra:  # (a device's path: the CPU backend widens inside its fused update)
            os.makedirs(os.path.join(case_dir, "bf16-grads"))
            check_16bit_gradients(report, label, zerotune, os.path.join(case_dir, "bf16-grads"), model, data, case,
                                  extra)

# data_types.grad_accum_dtype bf16/fp16 (issue 18, "Gradient bytes") on the CPU backend over MPI,
# 2 ranks, micro-batch 4 x gradient accumulation 2, ZeRO stages 0-3: gradients held, accumulated
# (each += in fp32, rounded once) and reduced (MPI's user-defined 16-bit sum) in the compute dtype.
#  1. trajectories: for bf16 and for fp16 compute, the 16-bit-gradient run against the same run
#     with fp32 gradients (the default), per stage: losses, grad norms and final weights within
#     the tolerances below; both runs learn (the loss falls), so garbage gradients fail.
#  2. bytes, measured: the all-reduce / reduce-scatter bytes rank 0 sent (comm_bytes_sent, the
#     communicator's counters) are exactly half of the fp32 run's; the all-gathers unchanged.
#  3. memory, measured: the CPU backend's peak of its buffers (mem_cpu_backend_peak) drops by at
#     least 40% of the fp32 gradient bytes at stages 0/1 (the store's gradients are half, the
#     optimizer's fp32 copy is one unit's slice); the engine's gradient buffers (run.json) are half.
#  4. fp16 with the dynamic loss scaler: overflowing steps (scale 2^24) show as inf in the 16-bit
#     gradients exactly as in fp32 ones: the same steps are skipped, the same scales used.
#  5. offload_optimizer (16-bit host gradient copy, widened on the host) tracks stage 2 on device.
# Refusals are tested in tests/cli/test_decisions.sh.
#
# Tolerances. The fp32-gradient run of a 16-bit model already rounds each reduced gradient to the
# compute dtype once; the 16-bit run rounds each backward add, the reduction's sum and (stages 2/3)
# the sum over micro-batches too: a few ulps of the gradient, i.e. about 3 x 2^-9 relative in bf16
# (3 x 2^-12 in fp16). The global gradient norm is a sum over all elements, so its relative error
# is at most that: GRAD_NORM_REL. Adam divides by sqrt(v), so a few-ulp gradient change moves an
# update by a similar relative amount of lr (larger only where m and v are tiny); over 8 steps of
# lr <= 3e-3 the weights move by at most sum(lr) ~ 1e-2: WEIGHT_ATOL = 2e-3 bounds a 20% error of
# the total move, an order above a few ulps (measured below in the log); the weights are dumped in the
# compute dtype, so one ulp of each (ULP x |w|) comes on top. The loss of the tiny
# model moves by ~0.3 in 8 steps (checked); LOSS_REL = 2e-3 relative (~0.01 of a loss near 5.5) is
# a few % of that move, so zeroed or garbage gradients fail.
import json
import os

from mpi_common import (Report, load_weights, main_guard, make_model_and_data, parse_args, read_metrics, read_run,
                        run_ranks, temporary_directory, write_ds_config)

STEPS = 8
LOSS_REL = 2e-3
GRAD_NORM_REL = {"bf16": 1e-2, "fp16": 2e-3}
WEIGHT_ATOL = 2e-3
ULP = {"bf16": 2.0 ** -7, "fp16": 2.0 ** -10}  # relative spacing bound of the dumped (compute-dtype) weights
LEARNS = 0.1  # the loss falls by at least this much over the steps (both runs)


def train(zerotune, workdir, model, data, name, stage, precision, grad_dtype, device="cpu", zero=None, **sections):
    out = os.path.join(workdir, name)
    ds = os.path.join(workdir, name + ".json")
    write_ds_config(ds, 16, 4, dict({"stage": stage}, **(zero or {})))
    with open(ds) as stream:
        config = json.load(stream)
    config[precision] = sections.pop(precision, {"enabled": True})
    config["data_types"] = {"grad_accum_dtype": grad_dtype}
    with open(ds, "w") as stream:
        json.dump(config, stream)
    final = os.path.join(workdir, name + "-final.safetensors")
    run_ranks(2, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                  "--max-steps", STEPS, "--seed", 2, "--dump-final", final, "--no-save-at-end", "--device", device])
    return read_metrics(out), read_run(out), load_weights(final)


def sent(record, kind):
    return record["comm_bytes_sent"][kind]


def compare(report, label, half, full, precision):
    """The 16-bit-gradient run `half` against the fp32-gradient run `full`: (metrics, run, weights)."""
    (hm, hr, hw), (fm, fr, fw) = half, full
    report.check(len(hm) == len(fm) == STEPS, f"{label}: {STEPS} steps each")
    loss_gap = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(hm, fm))
    norm_gap = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(hm, fm)
                   if b["grad_norm"] > 0 and a["skipped"] == b["skipped"] == 0)
    # Final weights are dumped in the compute dtype: masters a hair apart may round one ulp apart.
    weight_gap = max(float(((hw[name] - fw[name]).abs() - fw[name].abs() * ULP[precision]).max()) for name in fw)
    print(f"{label}: loss gap {loss_gap:.2e}, grad norm gap {norm_gap:.2e}, weight gap {weight_gap:.2e}")
    report.check(loss_gap < LOSS_REL, f"{label}: losses within {LOSS_REL:.0e} relative of fp32 gradients ({loss_gap:.2e})")
    report.check(norm_gap < GRAD_NORM_REL[precision],
                 f"{label}: grad norms within {GRAD_NORM_REL[precision]:.0e} relative ({norm_gap:.2e})")
    report.check(weight_gap < WEIGHT_ATOL, f"{label}: final weights within {WEIGHT_ATOL:.0e} + one {precision} ulp "
                 f"({weight_gap:.2e} beyond the ulp)")
    report.check(sorted(hw) == sorted(fw), f"{label}: the same trainable tensors")
    for name, metrics in (("16-bit", hm), ("fp32", fm)):
        fall = metrics[0]["loss"] - metrics[-1]["loss"]
        report.check(fall > LEARNS, f"{label}: the {name}-gradient run learns (loss falls by {fall:.3f} > {LEARNS})")
    report.check(hr["grad_accum_dtype"] == precision and fr["grad_accum_dtype"] == "fp32",
                 f"{label}: run.json records the gradient dtypes")
    # The engine's gradient buffers (its own accounting of what it allocated) are exactly half; the
    # fp32 copy the optimizer reads is one unit's slice, counted apart.
    hg, fg = hr["zero_memory_per_rank"]["gradients"], fr["zero_memory_per_rank"]["gradients"]
    widening, total = hr["zero_memory_per_rank"]["gradient_widening"], hr["zero_layout"]["trainable_elements"]
    report.check(2 * hg == fg and fr["zero_memory_per_rank"]["gradient_widening"] == 0,
                 f"{label}: gradient buffers {hg} B exactly half of fp32's {fg} B")
    report.check(0 < widening <= 4 * total // 2, f"{label}: the fp32 copy for the update ({widening} B) is a piece, "
                 f"not the whole gradient ({4 * total} B)")
    # Bytes sent, counted by the communicator: the reductions exactly half, the gathers the same.
    for kind in ("all_reduce", "reduce_scatter"):
        halves = [sent(a, kind) * 2 == sent(b, kind) for a, b in zip(hm, fm)]
        report.check(all(halves), f"{label}: {kind} bytes exactly half of fp32's "
                     f"({sent(hm[-1], kind):.0f} vs {sent(fm[-1], kind):.0f} B in the last step)")
    report.check(any(sent(b, "reduce_scatter") + sent(b, "all_reduce") > 0 for b in fm), f"{label}: gradients were reduced")
    report.check(all(sent(a, "all_gather") == sent(b, "all_gather") for a, b in zip(hm, fm)),
                 f"{label}: all-gather bytes unchanged (parameters stay in the compute dtype)")


def check_trajectories(report, go, device, cases):
    """For each (precision, stage) of `cases`: the 16-bit-gradient run against the fp32-gradient one
    on `device` (compare); returns {(precision, stage): (half, full)}."""
    static_fp16 = {"enabled": True, "loss_scale": 1024}  # no skipped steps: comparable trajectories
    runs = {}
    for precision, stage in cases:
        extra = {"fp16": static_fp16} if precision == "fp16" else {}
        label = f"{device} {precision} stage {stage}"
        full = go(f"{device}-{precision}-s{stage}-fp32", stage, precision, "fp32", device=device, **dict(extra))
        half = go(f"{device}-{precision}-s{stage}-{precision}", stage, precision, precision, device=device, **dict(extra))
        compare(report, label, half, full, precision)
        runs[(precision, stage)] = (half, full)
    return runs


def main():
    args = parse_args(__doc__)
    report = Report("grad_accum_dtype bf16/fp16: 16-bit gradients track fp32 ones, half the bytes and memory")
    with temporary_directory(args, "zt-gad-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        go = lambda *a, **k: train(args.zerotune, workdir, model, data, *a, **k)  # noqa: E731
        runs = check_trajectories(report, go, "cpu", [(p, s) for p in ("bf16", "fp16") for s in (0, 1, 2, 3)])
        for (precision, stage), (half, full) in runs.items():
            hm, fm = half[0], full[0]
            label = f"{precision} stage {stage}"
            if stage <= 1:  # the whole local gradient is resident: the saving shows in the peak
                # What the engine says it saves: half the gradient buffers, less the fp32 copy of the
                # largest unit the update widens into (on this tiny model a third of the gradient:
                # the token table). Until 2026-11-28 the fp32-gradient run's peak also held a
                # temporary of CpuBackend::round_to that the memory model never counted.
                saved = fm[-1]["mem_cpu_backend_peak"] - hm[-1]["mem_cpu_backend_peak"]
                fp32_memory, half_memory = full[1]["zero_memory_per_rank"], half[1]["zero_memory_per_rank"]
                expected = fp32_memory["gradients"] - half_memory["gradients"] - half_memory["gradient_widening"]
                print(f"{label}: CPU backend peak {fm[-1]['mem_cpu_backend_peak']} -> {hm[-1]['mem_cpu_backend_peak']} "
                      f"B (saved {saved} B; the engine's gradient bytes less by {expected} B)")
                report.check(expected > 0.1 * fp32_memory["gradients"] and saved >= 0.9 * expected,
                             f"{label}: measured peak drops by {saved} B >= 90% of the {expected} B the gradient "
                             f"buffers and the widening copy save (> 10% of fp32's {fp32_memory['gradients']} B)")

        # The dynamic scaler: the first steps overflow at 2^24; inf shows in 16-bit gradients alike.
        dynamic = {"enabled": True, "initial_scale_power": 24, "loss_scale_window": 4, "hysteresis": 2}
        for stage in (0, 2):
            full, _, _ = go(f"fp16dyn-s{stage}-fp32", stage, "fp16", "fp32", fp16=dict(dynamic))
            half, _, _ = go(f"fp16dyn-s{stage}-fp16", stage, "fp16", "fp16", fp16=dict(dynamic))
            skips = [r["skipped"] for r in full]
            report.check(skips[0] >= 1, f"fp16 dynamic stage {stage}: the first step overflows ({skips})")
            report.check([r["skipped"] for r in half] == skips and
                         [r["loss_scale"] for r in half] == [r["loss_scale"] for r in full],
                         f"fp16 dynamic stage {stage}: 16-bit gradients overflow at the same steps, same scales "
                         f"({[r['loss_scale'] for r in half]})")

        # offload_optimizer: the 16-bit host copy, widened on the host, against stage 2 on the device.
        offload = go("bf16-s2-offload", 2, "bf16", "bf16", zero={"offload_optimizer": {"device": "cpu"}})
        device = go("bf16-s2-device", 2, "bf16", "bf16")
        gap = max(abs(a["loss"] - b["loss"]) for a, b in zip(offload[0], device[0]))
        weight_gap = max(float((offload[2][n] - device[2][n]).abs().max()) for n in device[2])
        report.check(gap == 0.0 and weight_gap == 0.0, f"bf16 stage 2 offload_optimizer: the same losses and weights "
                     f"as on the device (loss gap {gap:.1e}, weight gap {weight_gap:.1e})")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

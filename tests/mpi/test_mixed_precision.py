# Mixed precision on the CPU backend (issue 6; DESIGN.md "Numerics"), with the GPU's storage
# semantics: compute parameters (the fp32 master rounded to bf16/fp16) and activations are
# stored in the compute dtype, each op computes in fp32 and rounds its output once; weight
# gradients accumulate in fp32 and the reduced ones are rounded to the compute dtype (fp16
# overflow -> inf); master weights and Adam state stay fp32.
#  1. bf16 (W=2, ZeRO-2) tracks the fp32 trajectory: losses within 5e-3 relative over 12 steps;
#     bf16 on other layouts (W=1 stage 0; W=2 ZeRO-2 + offload_optimizer, where gradients are
#     rounded and copied to the host bucket by bucket; W=2 ZeRO-3 + offload_optimizer +
#     offload_param) tracks the W=2 ZeRO-2 bf16 run closely;
#  2. fp16 with DeepSpeed's dynamic loss scaler (initial_scale_power 24, window 4, hysteresis
#     2): the first steps overflow; every step's recorded scale follows DeepSpeed's
#     DynamicLossScaler.update_scale (re-implemented here from deepspeed/runtime/fp16/
#     loss_scaler.py) given which steps overflowed; a skipped step advances neither the
#     learning-rate schedule nor the weights; W=1/stage 0 and W=2/stage 3 agree;
#  3. a static fp16 loss scale (loss_scale 1024) never skips and tracks fp32;
#  4. an fp16 run killed and resumed restores the scaler: bit-identical losses and scales.
import json
import math
import os

from mpi_common import (Report, main_guard, make_model_and_data, parse_args, read_metrics, run_ranks,
                        temporary_directory, write_ds_config)

STEPS = 12
BF16_LAYOUT_REL = 1e-4  # bf16 on two ZeRO layouts: fp32 sums in another order, rounded to bf16 (measured
                        # 9e-6 for W=1 stage 0; 0 for the offload layouts, which sum in the same order)


def ds_with(path, zero_stage, **sections):
    write_ds_config(path, 16, 4, {"stage": zero_stage})
    with open(path) as stream:
        config = json.load(stream)
    config.update(sections)
    with open(path, "w") as stream:
        json.dump(config, stream)
    return path


def train(zerotune, workdir, model, data, name, ranks, stage, extra=(), **sections):
    out = os.path.join(workdir, name)
    ds = ds_with(os.path.join(workdir, name + ".json"), stage, **sections)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
               "--max-steps", STEPS, "--seed", 2] + list(extra)
    run_ranks(ranks, command)
    return read_metrics(out)


def deepspeed_scales(overflows, initial_power, window, hysteresis, min_scale=1.0, factor=2.0):
    """The scale used at each step by DeepSpeed's DynamicLossScaler, given each step's overflow."""
    scale, cur_iter, last_overflow, cur_hysteresis, used = 2.0 ** initial_power, 0, -1, hysteresis, []
    for overflow in overflows:
        used.append(scale)
        if overflow:
            if hysteresis == 1 or cur_hysteresis == 1:
                scale = max(scale / factor, min_scale)
            else:
                cur_hysteresis -= 1
            last_overflow = cur_iter
        elif (cur_iter - last_overflow) % window == 0:
            scale *= factor
            cur_hysteresis = hysteresis
        cur_iter += 1
    return used


def relative_gap(first, second):
    return max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(first, second))


def main():
    args = parse_args(__doc__)
    report = Report("mixed precision: bf16 tracks fp32, fp16 loss scaling as DeepSpeed")
    with temporary_directory(args, "zt-mp-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        go = lambda *a, **k: train(args.zerotune, workdir, model, data, *a, **k)  # noqa: E731
        fp32 = go("fp32", 2, 2)
        bf16 = go("bf16", 2, 2, bf16={"enabled": True})
        report.check(len(bf16) == STEPS and all(r["skipped"] == 0 for r in bf16), "bf16: no step skipped")
        gap = relative_gap(bf16, fp32)
        report.check(gap < 5e-3, f"bf16 losses track fp32 within 5e-3 relative (worst {gap:.2e})")
        report.check(gap > 0, f"bf16 really rounds (losses differ from fp32 by {gap:.2e})")
        for name, ranks, stage, zero in (("bf16-w1-s0", 1, 0, {}),
                                         ("bf16-s2-offload", 2, 2, {"offload_optimizer": {"device": "cpu"}}),
                                         ("bf16-s3-offload-param", 2, 3, {"offload_optimizer": {"device": "cpu"},
                                                                         "offload_param": {"device": "cpu"}})):
            other = go(name, ranks, stage, bf16={"enabled": True},
                       zero_optimization=dict(stage=stage, **zero))
            gap = relative_gap(other, bf16)
            print(f"{name}: worst relative loss gap to bf16 W=2 ZeRO-2: {gap:.2e}")
            report.check(gap < BF16_LAYOUT_REL, f"{name}: losses within {BF16_LAYOUT_REL:.0e} of bf16 W=2 ZeRO-2 "
                         f"(worst {gap:.2e})")

        fp16_section = {"enabled": True, "initial_scale_power": 24, "loss_scale_window": 4, "hysteresis": 2}
        fp16 = go("fp16", 2, 3, fp16=fp16_section)
        skipped = [r["skipped"] for r in fp16]
        overflows = [skipped[i] > (skipped[i - 1] if i else 0) for i in range(len(skipped))]
        report.check(overflows[0] and not all(overflows), f"fp16: steps overflowed: {overflows}")
        expected = deepspeed_scales(overflows, 24, 4, 2)
        report.check([r["loss_scale"] for r in fp16] == expected,
                     f"fp16: loss scales {[r['loss_scale'] for r in fp16]} follow DeepSpeed's update_scale {expected}")
        with open(os.path.join(workdir, "fp16.json")) as stream:
            config = json.load(stream)
        peak, warmup = config["scheduler"]["params"]["warmup_max_lr"], config["scheduler"]["params"]["warmup_num_steps"]
        updates = 0
        for record, overflow in zip(fp16, overflows):  # WarmupLR linear: lr(update u) = peak * min(1, (u-1)/warmup)
            expected_lr = 0.0 if updates == 0 else peak * min(1.0, (updates - 1) / warmup)
            if not math.isclose(record["lr"], expected_lr, rel_tol=1e-9, abs_tol=1e-15):
                report.fail(f"fp16 step {record['step']}: lr {record['lr']} != {expected_lr} after {updates} updates")
                break
            updates += 0 if overflow else 1
        else:
            report.check(True, "fp16: skipped steps do not advance the learning-rate schedule")
        one_rank = go("fp16-w1", 1, 0, fp16=fp16_section)
        report.check([r["loss_scale"] for r in one_rank] == [r["loss_scale"] for r in fp16] and
                     [r["skipped"] for r in one_rank] == skipped, "fp16: W=1 stage 0 overflows at the same steps as W=2 stage 3")
        gap = relative_gap(one_rank, fp16)
        report.check(gap < 1e-4, f"fp16: W=1 stage 0 and W=2 stage 3 losses agree (worst {gap:.2e})")

        static = go("fp16-static", 2, 1, fp16={"enabled": True, "loss_scale": 1024})
        report.check(all(r["skipped"] == 0 and r["loss_scale"] == 1024 for r in static),
                     "static fp16 scale 1024: never skipped")
        gap = relative_gap(static, fp32)
        report.check(gap < 5e-3, f"static fp16 losses track fp32 within 5e-3 relative (worst {gap:.2e})")

        name = "fp16-resume"
        ds = ds_with(os.path.join(workdir, name + ".json"), 2, fp16=fp16_section)
        out = os.path.join(workdir, name)
        base = [args.zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                "--max-steps", STEPS, "--seed", 2, "--save-every", 5]
        from mpi_common import MPI_ENV, mpiexec  # noqa: E402 (only this case kills a run)
        import subprocess
        killed = subprocess.run(mpiexec(2, base), env=dict(os.environ, **MPI_ENV, ZT_FAULT="kill:step:0:8"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        report.check(killed.returncode != 0, "fp16 resume: the run was killed in step 8")
        run_ranks(2, base + ["--resume", "auto"])
        resumed = read_metrics(out)
        reference = go("fp16-resume-ref", 2, 2, fp16=fp16_section)
        report.check([(r["loss"], r["loss_scale"], r["skipped"]) for r in resumed] ==
                     [(r["loss"], r["loss_scale"], r["skipped"]) for r in reference],
                     "fp16 resume: losses, scales and skips bit-identical to the uninterrupted run")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

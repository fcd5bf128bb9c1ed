# QLoRA under ZeRO (issue 19): a 4-bit NF4 base (double quantization) with LoRA adapters trains
# the same on 1, 2 and 4 ranks, stages 0-3, with offload_optimizer and (stage 3) offload_param, as
# on one rank at stage 0: losses, gradient norms and the final adapters within float
# reassociation. Stage 3 partitions the packed 4-bit bytes and scales and all-gathers them: its
# planned and counted all-gather bytes are those of the 4-bit layout, well under a quarter of the
# same run's with an fp32 base; each rank holds 1/W of the base's payload. A checkpoint holds the
# adapters and their optimizer state, never the base; resuming from it continues the same losses.
import os

from test_zero_equivalence import UnitReads
from mpi_common import (Report, check_weights, load_weights, main_guard, make_model_and_data, parse_args, read_metrics,
                        read_run, run_ranks, temporary_directory, write_ds_config)

STEPS = 4
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6
QLORA = ["--quantize", "nf4", "--double-quant"]
LORA = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear"]
KNOBS = {1: {}, 2: {"reduce_bucket_size": 12000, "allgather_bucket_size": 12000, "stage3_param_persistence_threshold": 0,
                    "stage3_max_reuse_distance": 0, "overlap_comm": False},
         4: {"overlap_comm": True, "stage3_param_persistence_threshold": 0}}


def train(zerotune, workdir, model, data, ranks, stage, offload="none", quant=True, steps=STEPS, extra=(), tag=""):
    name = f"{'q' if quant else 'f'}-w{ranks}-s{stage}-{offload}{tag}"
    out = os.path.join(workdir, name)
    zero = dict(KNOBS[ranks], stage=stage, offload_optimizer={"device": "cpu" if offload != "none" else "none"})
    if offload == "cpu+param":
        zero["offload_param"] = {"device": "cpu"}
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 16, 4, zero)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds, "--max-steps", steps,
               "--seed", 3, "--dump-final", out + ".safetensors", "--device", "cpu"] + LORA + (QLORA if quant else [])
    run_ranks(ranks, command + list(extra))
    return {"name": name, "out": out, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors"),
            "run": read_run(out)}


def compare(report, got, ref):
    label = got["name"]
    report.check(len(got["metrics"]) == STEPS, f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        report.scalar(f"{label} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.scalar(f"{label} step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
    check_weights(report, label, got["weights"], ref["weights"], WEIGHT_ATOL, ref["metrics"])


def directory_bytes(path):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def main():
    args = parse_args("QLoRA (4-bit NF4 base) under ZeRO stages 0-3 on 1, 2, 4 ranks")
    report = Report("QLoRA x ZeRO: every stage and world size trains as one rank does")
    with temporary_directory(args, "zt_mpi_qlora_") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        reference = train(args.zerotune, workdir, model, data, 1, 0)
        report.check(all(key.find("lora_") >= 0 for key in reference["weights"]),
                     f"the trainable parameters are the adapters only ({len(reference['weights'])} tensors)")
        runs = [train(args.zerotune, workdir, model, data, 2, stage) for stage in (0, 1, 2, 3)]
        runs.append(train(args.zerotune, workdir, model, data, 2, 3, "cpu+param"))
        runs.append(train(args.zerotune, workdir, model, data, 2, 2, "cpu"))
        runs.append(train(args.zerotune, workdir, model, data, 4, 3))
        for run in runs:
            compare(report, run, reference)

        # Stage 3 gathers the 4-bit payload: the ZeRO formula over the 4-bit layout, and against the
        # same run on an fp32 base (the tiny model's fp32 embedding and head, which stay unquantized as
        # in transformers, and the adapters keep the ratio well above a 7B's).
        quantized = runs[3]
        dense = train(args.zerotune, workdir, model, data, 2, 3, quant=False)
        layout = quantized["run"]["zero_layout"]
        accumulation = quantized["run"]["gradient_accumulation_steps"]
        q_gather = quantized["run"]["zero_comm_plan_bytes_per_step"]["all_gather"]
        f_gather = dense["run"]["zero_comm_plan_bytes_per_step"]["all_gather"]
        formula = accumulation * 0.5 * 4.0 * UnitReads(model).gathered_per_micro_batch(layout["unit_elements"])
        report.scalar(f"{quantized['name']}: planned all_gather bytes/step = ZeRO formula over the 4-bit layout",
                      q_gather, formula, 1e-12)
        for record in quantized["metrics"]:
            report.scalar(f"{quantized['name']} step {record['step']}: counted all_gather bytes = plan",
                          record["comm_bytes_sent"]["all_gather"], q_gather, 1e-12)
        print(f"      stage-3 all-gather bytes/step: 4-bit base {q_gather:.0f}, fp32 base {f_gather:.0f} "
              f"(ratio {q_gather / f_gather:.3f})")
        report.check(0 < q_gather < 0.45 * f_gather, f"stage 3 gathers the 4-bit bytes: {q_gather / f_gather:.3f} of an fp32 base's")
        frozen_q = layout["all_elements"] - layout["trainable_elements"]
        frozen_f = dense["run"]["zero_layout"]["all_elements"] - dense["run"]["zero_layout"]["trainable_elements"]
        report.check(frozen_q < 0.5 * frozen_f, f"frozen storage: 4-bit {4 * frozen_q} B vs fp32 {4 * frozen_f} B")

        # Checkpoints hold the adapters, not the base; resuming continues the same losses.
        checkpoint = os.path.join(quantized["out"], "checkpoints", f"global_step{STEPS}")
        saved = directory_bytes(checkpoint)
        lora_saved = directory_bytes(os.path.join(dense["out"], "checkpoints", f"global_step{STEPS}"))
        base_bytes = os.path.getsize(os.path.join(model, "model.safetensors"))
        report.check(os.path.isdir(checkpoint) and saved < 0.5 * base_bytes and abs(saved - lora_saved) < 0.1 * lora_saved,
                     f"the checkpoint ({saved} B) holds no base: the size of LoRA's on the fp32 base ({lora_saved} B), "
                     f"under half the model file ({base_bytes} B)")
        half = train(args.zerotune, workdir, model, data, 2, 3, steps=2, tag="-half")
        resumed_out = os.path.join(workdir, "resumed")
        zero = dict(KNOBS[2], stage=3, offload_optimizer={"device": "none"})
        ds = write_ds_config(os.path.join(workdir, "resumed.json"), 16, 4, zero)
        os.rename(half["out"], resumed_out)
        run_ranks(2, [args.zerotune, "train", "--model", model, "--data", data, "--out", resumed_out, "--deepspeed", ds,
                      "--max-steps", STEPS, "--seed", 3, "--device", "cpu", "--resume", "auto"] + LORA + QLORA)
        resumed = read_metrics(resumed_out)
        report.check([r["step"] for r in resumed] == list(range(1, STEPS + 1)), "resumed run recorded every step")
        for mine, theirs in zip(resumed[2:], reference["metrics"][2:]):
            report.scalar(f"resumed step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

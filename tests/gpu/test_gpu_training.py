# GPU (label gpu; needs an NVIDIA GPU and a CUDA build): `zerotune train --device cuda`
# against the CPU reference on the same tiny model and data (issue 6):
#  1. fp32 on the GPU tracks fp32 on the CPU: losses within 1e-4 relative over 8 steps, final
#     weights within 1e-4 absolute (GEMM and reduction orders differ);
#  2. bf16 on the GPU tracks fp32 on the CPU within 2e-2 relative, and bf16 on the CPU (the same
#     storage and rounding: bf16 parameters and activations, fp32 arithmetic per op) within 5e-3
#     in the loss and 1e-2 in the final weights (GEMM accumulation orders differ, so a few
#     roundings land on the other side; the GPU's attention, cuDNN's by default, also rounds P and
#     dS to bf16 once, which the CPU's does not: 7.8e-3 on the emulated cuDNN, under 5e-3 on an
#     H100 and with our tensor-core kernels);
#  3. LoRA on the GPU tracks LoRA on the CPU;
#  4. two ranks sharing the GPU (ZeRO-2, host-staged MPI collectives) = one rank;
#  5. the whole model's forward and backward: step-0 logits, loss and every gradient (--dump-step0)
#     on the GPU equal the CPU's within 1e-4 of each tensor's largest magnitude in fp32, and
#     within 3e-2 of it in bf16 (both backends store bf16; accumulation orders differ);
#  6. metrics.jsonl carries mem_device / mem_device_peak, and the peak stops growing after the
#     first steps (the caching allocator: no new device memory in steady state).
# A run that two checks need (e.g. the fp32 GPU run: case 1's, case 4's reference, case 6's) trains once.
# Without a GPU every check fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path, worst_relative_error  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (Report, load_weights, main_guard, make_model_and_data, parse_args, read_metrics, run_ranks,
                        temporary_directory, write_ds_config)

STEPS = 8


def main():
    args = parse_args(__doc__)
    report = Report("GPU training tracks the CPU reference")
    with temporary_directory(args, "zt-gpu-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)

        runs = {}  # identical runs (the same device, ranks, stage, flags and sections) train once

        def train(name, device, ranks=1, stage=0, extra=(), steps=STEPS, **sections):
            key = repr((device, ranks, stage, list(extra), steps, sorted(sections.items())))
            if key not in runs:
                runs[key] = train_once(name, device, ranks, stage, extra, steps, sections)
            return runs[key]

        def train_once(name, device, ranks, stage, extra, steps, sections):
            out = os.path.join(workdir, name)
            ds = write_ds_config(os.path.join(workdir, name + ".json"), 16, 4, {"stage": stage})
            if sections:
                import json
                with open(ds) as stream:
                    config = json.load(stream)
                config.update(sections)
                with open(ds, "w") as stream:
                    json.dump(config, stream)
            run_ranks(ranks, [args.zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                              "--max-steps", steps, "--seed", 4, "--device", device, "--dump-final",
                              out + ".safetensors"] + list(extra))
            return read_metrics(out), load_weights(out + ".safetensors")

        def compare(label, got, ref, loss_rel, weight_atol):
            worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(got[0], ref[0]))
            report.check(len(got[0]) == STEPS and worst <= loss_rel,
                         f"{label}: losses within {loss_rel:.0e} relative of the reference (worst {worst:.2e})")
            worst = max(float((got[1][k] - ref[1][k]).abs().max()) for k in ref[1])
            report.check(worst <= weight_atol, f"{label}: final weights within {weight_atol:.0e} (worst {worst:.2e})")

        for label, function in (
                ("fp32", lambda: compare("fp32 GPU vs CPU", train("gpu-fp32", "cuda"), train("cpu-fp32", "cpu"), 1e-4, 1e-4)),
                ("bf16", lambda: compare("bf16 GPU vs fp32 CPU", train("gpu-bf16", "cuda", bf16={"enabled": True}),
                                         train("cpu-fp32b", "cpu"), 2e-2, 1e-2)),
                ("bf16 vs bf16", lambda: compare("bf16 GPU vs bf16 CPU", train("gpu-bf16b", "cuda", bf16={"enabled": True}),
                                                 train("cpu-bf16", "cpu", bf16={"enabled": True}), 5e-3, 1e-2)),
                ("lora", lambda: compare("LoRA GPU vs CPU",
                                         train("gpu-lora", "cuda", extra=["--lora-r", 4, "--lora-targets", "all-linear"]),
                                         train("cpu-lora", "cpu", extra=["--lora-r", 4, "--lora-targets", "all-linear"]),
                                         1e-4, 1e-4)),
                ("two ranks", lambda: compare("2 ranks ZeRO-2 on one GPU vs 1 rank",
                                              train("gpu-w2", "cuda", ranks=2, stage=2), train("gpu-w1", "cuda"),
                                              1e-5, 1e-5))):
            try:
                function()
            except Exception as error:  # noqa: BLE001 - reported; the next case still runs
                report.fail(f"[{label}] {type(error).__name__}: {error}")
        def step0(name, device, **sections):
            path = os.path.join(workdir, name + "-dump.safetensors")
            train(name, device, extra=["--dump-step0", path], steps=1, **sections)  # the dump is step 0's
            return load_weights(path)

        for label, sections, bound in (("fp32", {}, 1e-4), ("bf16", {"bf16": {"enabled": True}}, 3e-2)):
            try:
                gpu, cpu = step0(f"gpu-dump-{label}", "cuda", **sections), step0(f"cpu-dump-{label}", "cpu", **sections)
                report.check(sorted(gpu) == sorted(cpu) and len(gpu) > 2, f"step-0 dump {label}: {len(gpu)} tensors on both")
                worst_name, worst = worst_relative_error(gpu, cpu)
                report.check(worst <= bound, f"step-0 forward/backward {label} GPU vs CPU: every tensor within "
                             f"{bound:.0e} of its largest magnitude (worst {worst:.2e} in {worst_name})")
            except Exception as error:  # noqa: BLE001
                report.fail(f"[step-0 dump {label}] {type(error).__name__}: {error}")
        try:
            records, _ = train("gpu-memory", "cuda")
            peaks = [r.get("mem_device_peak") for r in records]
            report.check(all(isinstance(p, int) and p > 0 for p in peaks), f"mem_device_peak recorded: {peaks}")
            report.check(len(set(peaks[2:])) == 1, f"device memory peak constant after step 2: {peaks}")
        except Exception as error:  # noqa: BLE001
            report.fail(f"[memory] {type(error).__name__}: {error}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# GPU (label gpu; needs an NVIDIA GPU and a CUDA build) and the emulated device (label gpu-emu):
# the pipeline equivalence of tests/mpi/test_pipeline_equivalence.py on the CUDA backend (issue
# 32), whose activations and their gradients go point to point through NCCL's grouped
# send/recv (each rank its own emulated GPU; on one real GPU, ranks sharing it go through MPI's
# host staging) and whose stage groups are NCCL communicators over split MPI ones. Against one
# rank on the same device, 4 steps: the tiny LLaMA full fine-tuning at P = 2, D = 1 (1f1b), LoRA
# at P = 2, D = 2 (gpipe, ZeRO-2); the tied OPT at P = 2, D = 2 (1f1b, ZeRO-1); and fp16 whose
# dynamic loss scale starts at 2^20, so that step 3 overflows: every layout skips the same step
# (the overflow flag all-reduced over the stages) and halves the same scale. The interleaved
# schedule is refused on the device's communicator. The D = 2 cases need
# 4 ranks: they run when ZT_GPU_TEST_WORLD_SIZES (default "1,2") lists 4 (the emulated device's
# run: 2,4). Without a GPU every run fails with zerotune's message (this test never skips).
import json
import os
import subprocess

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_pipeline_equivalence import GPIPE, P2, run_cases, train

FP16_OVERFLOW = {"fp16": {"enabled": True, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1}}
FP16_WEIGHT_ATOL = 1e-5  # the fp16 gradients rounded after reductions in another order


def main():
    args = parse_args(__doc__)
    report = Report("Pipeline stages on the CUDA backend: same losses and weights as one rank")
    four = 4 in [int(size) for size in os.environ.get("ZT_GPU_TEST_WORLD_SIZES", "1,2").split(",")]
    with temporary_directory(args, "zt-gpu-pipe-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        llama = {"full": [("p2-1f1b", 2, 0, P2, 2, 1)],
                 "lora": [("p2-d2-gpipe-zero2", 4, 2, P2 + GPIPE, 2, 2)] if four else []}
        run_cases(report, args.zerotune, workdir, model, data, "llama", llama, device="cuda")
        fp16 = {"full": [("p2-d2-1f1b-zero1" if four else "p2-1f1b", 4 if four else 2, 1 if four else 0, P2, 2,
                          2 if four else 1)]}
        run_cases(report, args.zerotune, workdir, model, data, "llama-fp16", fp16, device="cuda",
                  sections=FP16_OVERFLOW, weight_atol=FP16_WEIGHT_ATOL)
        skipped = read_metrics(os.path.join(workdir, "llama-fp16-full-ref"))[-1]["skipped"]
        report.check(skipped >= 1, f"llama-fp16: the reference skipped {skipped} step(s) for fp16 overflow")
        opt_dir = os.path.join(workdir, "opt")
        os.makedirs(opt_dir)
        opt_model, opt_data = make_model_and_data(args.zerotune, opt_dir, model="opt")
        opt = {"full": [("p2-d2-1f1b-zero1", 4, 1, P2, 2, 2) if four else ("p2-1f1b", 2, 0, P2, 2, 1)]}
        run_cases(report, args.zerotune, opt_dir, opt_model, opt_data, "opt", opt, device="cuda")
        # The interleaved schedule posts its sends ahead, which NCCL's in-order streams cannot take
        # (Megatron batches them): refused on the device's communicator, with the reason.
        config = os.path.join(workdir, "llama4.json")
        with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
            llama4 = dict(json.load(stream), num_hidden_layers=4)
        with open(config, "w") as stream:
            json.dump(llama4, stream)
        model4 = os.path.join(workdir, "model4")
        subprocess.run([args.zerotune, "init", "--config", config, "--out", model4, "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        result = train(args.zerotune, workdir, model4, data, "interleaved", 2, 0,
                       P2 + ["--pipeline-schedule", "interleaved"], device="cuda", expect_ok=False)
        report.check(result.returncode != 0 and "runs on the CPU backend's MPI communicator" in
                     result.stdout + result.stderr, f"interleaved on the device: refused (exit {result.returncode})")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

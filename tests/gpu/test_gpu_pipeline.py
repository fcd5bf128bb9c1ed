# GPU (label gpu; needs an NVIDIA GPU and a CUDA build) and the emulated device (label gpu-emu):
# the pipeline equivalence of tests/mpi/test_pipeline_equivalence.py on the CUDA backend (issue
# 32), whose activations and their gradients go point to point through NCCL's grouped
# send/recv (each rank its own emulated GPU; on one real GPU, ranks sharing it go through MPI's
# host staging) and whose stage groups are NCCL communicators over split MPI ones. Against one
# rank on the same device, 4 steps: the tiny LLaMA full fine-tuning at P = 2, D = 1 (1f1b), LoRA
# at P = 2, D = 2 (gpipe, ZeRO-2); the tied OPT at P = 2, D = 2 (1f1b, ZeRO-1); and fp16 whose
# dynamic loss scale starts at 2^20, so that step 3 overflows: every layout skips the same step
# (the overflow flag all-reduced over the stages) and halves the same scale. Then, 3 steps each,
# P = 4 and the interleaved schedule (Megatron's batched exchanges, one NCCL group each): an
# 8-layer LLaMA (hidden size 32) at P = 4 1f1b (full) and P = 4 x V = 2 chunks (full and LoRA),
# and at P = 2 x V = 2 on two ranks that share one GPU (CUDA_VISIBLE_DEVICES=0: MPI through host
# staging); a 4-layer tied OPT at P = 2 x V = 2 (full, ZeRO-1: the tie joins rank 0's chunk 0 and
# rank 1's chunk 1).
# The D = 2 and P = 4 cases need 4 ranks: they run when ZT_GPU_TEST_WORLD_SIZES (default "1,2")
# lists 4 (the emulated device's run: 2,4); else the LLaMA runs P = 2 x V = 2 (full and LoRA)
# instead of P = 4. Without a GPU every run fails with zerotune's
# message (this test never skips).
import json
import os
import time

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, load_weights, main_guard, make_model_and_data, parse_args, read_metrics,
                        temporary_directory)
from test_pipeline_equivalence import GPIPE, P2, compare, run_cases, train

FP16_OVERFLOW = {"fp16": {"enabled": True, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1}}
FP16_WEIGHT_ATOL = 1e-5  # the fp16 gradients rounded after reductions in another order


NEW_STEPS = 3  # the P = 4 and interleaved cases: two updates (WarmupLR's first is at learning rate 0)
P4 = ["--pipeline-stages", 4]
INTERLEAVED = ["--pipeline-schedule", "interleaved", "--pipeline-chunks", 2]


def check_host_staging(report, zerotune, workdir, model, data):
    """Two ranks that see one GPU (CUDA_VISIBLE_DEVICES=0) exchange through MPI's host staging: the
    interleaved schedule's batched exchanges there, against the 8-layer LLaMA's reference."""
    ref = {"metrics": read_metrics(os.path.join(workdir, "llama8-full-ref")),
           "weights": load_weights(os.path.join(workdir, "llama8-full-ref.safetensors"))}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = (visible or "0").split(",")[0]  # the ranks inherit it through mpiexec
    try:
        got = train(zerotune, workdir, model, data, "llama8-full-p2-v2-interleaved-staged", 2, 0, P2 + INTERLEAVED,
                    device="cuda", steps=NEW_STEPS)
    finally:
        if visible is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    report.check("communicator: mpi+host-staging" in got["stdout"],
                 "llama8-full-p2-v2-interleaved-staged: two ranks on one GPU exchange through host staging")
    compare(report, got, ref)


def check_p4_and_interleaved(report, zerotune, workdir, four):
    """P = 4 and the interleaved schedule on models deep enough for one layer per virtual stage."""
    with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
        # One layer per virtual stage of P = 4 x V = 2, at half tiny-llama's width (the emulated device's time).
        llama8 = dict(json.load(stream), num_hidden_layers=8, hidden_size=32, intermediate_size=86,
                      num_attention_heads=2, num_key_value_heads=1)
    config = os.path.join(workdir, "llama8.json")
    with open(config, "w") as stream:
        json.dump(llama8, stream)
    model, data = make_model_and_data(zerotune, workdir, config=config, tag="8")
    # (name, ranks, ZeRO stage, flags, P (None: interleaved, several unit ranges per rank), D)
    if four:
        llama = {"full": [("p4-1f1b", 4, 0, P4, 4, 1), ("p4-v2-interleaved", 4, 0, P4 + INTERLEAVED, None, 1)],
                 "lora": [("p4-v2-interleaved", 4, 0, P4 + INTERLEAVED, None, 1)]}
    else:
        llama = {"full": [("p2-v2-interleaved", 2, 0, P2 + INTERLEAVED, None, 1)],
                 "lora": [("p2-v2-interleaved", 2, 0, P2 + INTERLEAVED, None, 1)]}
    run_cases(report, zerotune, workdir, model, data, "llama8", llama, device="cuda", steps=NEW_STEPS)
    check_host_staging(report, zerotune, workdir, model, data)
    opt_dir = os.path.join(workdir, "opt4")
    os.makedirs(opt_dir)
    opt_model, opt_data = make_model_and_data(zerotune, opt_dir, model="opt", overrides={"num_hidden_layers": 4})
    opt = {"full": [("p2-v2-interleaved-zero1", 2, 1, P2 + INTERLEAVED, None, 1)]}
    run_cases(report, zerotune, opt_dir, opt_model, opt_data, "opt4", opt, device="cuda", steps=NEW_STEPS)


def main():
    args = parse_args(__doc__)
    report = Report("Pipeline stages on the CUDA backend: same losses and weights as one rank")
    begun = time.monotonic()
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
        started = time.monotonic()
        check_p4_and_interleaved(report, args.zerotune, workdir, four)
        print(f"timing: {time.monotonic() - started:.1f} s in the P = 4 and interleaved cases, "
              f"{time.monotonic() - begun:.1f} s in all")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

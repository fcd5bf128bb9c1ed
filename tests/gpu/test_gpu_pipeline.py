# GPU (label gpu; needs an NVIDIA GPU and a CUDA build) and the emulated device (label gpu-emu):
# the pipeline equivalence of tests/mpi/test_pipeline_equivalence.py on the CUDA backend (issue
# 32), whose activations and their gradients go point to point through NCCL's send/recv (1F1B
# grouped, GPipe and interleaved overlapped: docs/pipeline.md; each rank its own emulated GPU; on
# one real GPU, ranks sharing it go through MPI's host staging) and whose stage groups are NCCL
# communicators over split MPI ones. Against one rank on the same device (one reference per model
# and mode):
#  - the tiny LLaMA in fp16 whose dynamic loss scale starts at 2^20, so that step 3 overflows, at
#    P = 2, D = 2 (1f1b, ZeRO-1), 4 steps: every layout skips the same step (the overflow flag
#    all-reduced over the stages) and halves the same scale;
#  - 3 steps each: an 8-layer LLaMA (hidden size 32, one layer per virtual stage of P = 4 x V = 2)
#    at P = 4 1f1b (full), interleaved P = 4 x V = 2 (Megatron's batched exchanges, one NCCL group
#    each; full and LoRA) and P = 2 x D = 2 gpipe (LoRA, ZeRO-2), and at P = 2 x V = 2 on two ranks
#    that share one GPU (CUDA_VISIBLE_DEVICES=0: MPI through host staging);
#  - a 4-layer tied OPT (hidden size 32) at P = 4 x D = 2 1f1b (8 ranks, ZeRO-1: the tie joins
#    stages 0 and 3, summed over both replicas) and interleaved P = 2 x V = 2 (ZeRO-1: the tie joins
#    rank 0's chunk 0 and rank 1's chunk 1), whose checkpoint after step 2 resumes on one rank to
#    the same step 3 and final weights (the checkpoint format is the same on both backends:
#    tests/mpi/test_pipeline_equivalence.py checks its layout, exports it and resumes it on other
#    pipeline layouts); these runs also evaluate the split before the first step (--eval-data:
#    the forward through the stages over NCCL's send/recv, to the one rank's eval_loss).
# ZT_GPU_TEST_WORLD_SIZES (default "1,2") lists the world sizes the machine runs: the D = 2 and
# P = 4 cases need 4 ranks, P = 4 x D = 2 needs 8 (the emulated device's run: 2,4,8; each rank its
# own emulated GPU, ZT_EMU_DEVICES=8). Without 4 the fp16 case runs at P = 2, D = 1, the LLaMA at
# P = 2 x V = 2 (full and LoRA) and P = 2 gpipe (LoRA) instead; without 8 the OPT runs P = 2 1f1b
# instead of P = 4 x D = 2. Without a GPU every run fails with zerotune's message (this test never
# skips).
import json
import os
import time

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, load_weights, main_guard, make_model_and_data, parse_args, read_metrics,
                        temporary_directory)
from test_pipeline_equivalence import (GPIPE, P2, P4, SAVE_EVERY_2, compare, finished, resume_cases, run_cases,
                                       train)

FP16_OVERFLOW = {"fp16": {"enabled": True, "initial_scale_power": 20, "loss_scale_window": 2, "hysteresis": 1}}
FP16_WEIGHT_ATOL = 1e-5  # the fp16 gradients rounded after reductions in another order


NEW_STEPS = 3  # the 8-layer LLaMA and the OPT: one update at a learning rate above 0 (WarmupLR's first two are 0)
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


def check_llama8(report, zerotune, workdir, four):
    """P = 4, the interleaved schedule and GPipe LoRA on a LLaMA deep enough for one layer per
    virtual stage."""
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
                 "lora": [("p4-v2-interleaved", 4, 0, P4 + INTERLEAVED, None, 1),
                          ("p2-d2-gpipe-zero2", 4, 2, P2 + GPIPE, 2, 2)]}
    else:
        llama = {"full": [("p2-v2-interleaved", 2, 0, P2 + INTERLEAVED, None, 1)],
                 "lora": [("p2-v2-interleaved", 2, 0, P2 + INTERLEAVED, None, 1), ("p2-gpipe", 2, 0, P2 + GPIPE, 2, 1)]}
    run_cases(report, zerotune, workdir, model, data, "llama8", llama, device="cuda", steps=NEW_STEPS)
    check_host_staging(report, zerotune, workdir, model, data)


def check_tied(report, zerotune, workdir, eight):
    """The tied OPT at P = 4 x D = 2 and interleaved, and the interleaved run's checkpoint resumed on
    one rank."""
    opt_dir = os.path.join(workdir, "opt4")
    os.makedirs(opt_dir)
    # One layer per virtual stage of P = 2 x V = 2 (and per stage of P = 4), at half the family
    # case's width (the emulated device's time).
    model, data = make_model_and_data(zerotune, opt_dir, model="opt", overrides={
        "num_hidden_layers": 4, "hidden_size": 32, "ffn_dim": 48, "num_attention_heads": 2})
    opt = {"full": [("p4-d2-1f1b-zero1", 8, 1, P4, 4, 2) if eight else ("p2-1f1b", 2, 0, P2, 2, 1),
                    ("p2-v2-interleaved-zero1", 2, 1, P2 + INTERLEAVED + SAVE_EVERY_2, None, 1)]}
    run_cases(report, zerotune, opt_dir, model, data, "opt4", opt, device="cuda", steps=NEW_STEPS, evaluate=True)
    checkpoint = os.path.join(opt_dir, "opt4-full-p2-v2-interleaved-zero1", "checkpoints", "global_step2")
    resume_cases(report, zerotune, opt_dir, model, data, checkpoint, finished(opt_dir, "opt4-full-ref"),
                 (("opt4-interleaved-resumed-w1", 1, 0, []),), device="cuda")


def main():
    args = parse_args(__doc__)
    report = Report("Pipeline stages on the CUDA backend: same losses and weights as one rank")
    begun = time.monotonic()
    world_sizes = [int(size) for size in os.environ.get("ZT_GPU_TEST_WORLD_SIZES", "1,2").split(",")]
    four, eight = 4 in world_sizes, 8 in world_sizes
    with temporary_directory(args, "zt-gpu-pipe-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        fp16 = {"full": [("p2-d2-1f1b-zero1" if four else "p2-1f1b", 4 if four else 2, 1 if four else 0, P2, 2,
                          2 if four else 1)]}
        run_cases(report, args.zerotune, workdir, model, data, "llama-fp16", fp16, device="cuda",
                  sections=FP16_OVERFLOW, weight_atol=FP16_WEIGHT_ATOL)
        skipped = read_metrics(os.path.join(workdir, "llama-fp16-full-ref"))[-1]["skipped"]
        report.check(skipped >= 1, f"llama-fp16: the reference skipped {skipped} step(s) for fp16 overflow")
        started = time.monotonic()
        check_llama8(report, args.zerotune, workdir, four)
        check_tied(report, args.zerotune, workdir, eight)
        print(f"timing: {time.monotonic() - started:.1f} s in the 8-layer LLaMA and OPT cases, "
              f"{time.monotonic() - begun:.1f} s in all")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# Oracle: zerotune's LLaMA forward/backward against HF transformers. A tiny random
# LlamaForCausalLM (GQA, 2 layers) saved by transformers in fp32 is trained for one step by
# `zerotune train --dump-step0`; the dumped logits (micro-batch 0), the global-batch loss and the
# gradient of every parameter must match HF run in float64 on the same two padded micro-batches.
# The same run with --activation-checkpointing must give the same dump. Further model configs
# (rope_theta 500000 + rms_norm_eps 1e-5; linear rope_scaling) catch hard-coded constants.
import os

import oracle_common as oc

# Tolerances, zerotune in fp32 against an exact (float64) reference. fp32 rounding over these
# short sums (K <= 96 in a GEMM, <= 24 positions, 6 samples) gives errors around 1e-6 of the
# values' scale; the bounds leave a margin of ~50x while a real bug (wrong RoPE pair, eps, mask,
# a missing term in a backward) is off by 1e-2 or more.
LOGITS_ATOL = 1e-4       # logits are O(1)
LOSS_REL = 1e-5
GRAD_REL_OF_MAX = 1e-4   # max abs error <= 1e-4 * max|reference grad| of that tensor
CHECKPOINTING_ATOL = 1e-6  # recomputing a block's forward must not change anything

MICRO_BATCH, ACCUMULATION = 3, 2
# Six samples of different lengths: micro-batch 0 pads to 24 and micro-batch 1 to 20, so both
# carry right padding, and the prompt masks leave a different number of targets in each.
LENGTHS = [8, 24, 13, 17, 11, 20]

CASES = [
    ("default", dict()),
    ("theta500k_eps1e-5", dict(rope_theta=500000.0, rms_norm_eps=1e-5)),
    ("rope_linear_x2", dict(rope_scaling={"type": "linear", "factor": 2.0})),
]


def run_case(args, report, tmp, label, seed, overrides):
    model_dir = os.path.join(tmp, label, "model")
    data_dir = os.path.join(tmp, label, "data")
    config = oc.make_llama(model_dir, seed=seed, **overrides)
    samples = oc.make_samples(seed + 1, LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)

    common = ["train", "--model", model_dir, "--data", data_dir, "--no-shuffle",
              "--max-steps", 1, "--micro-batch-size", MICRO_BATCH, "--grad-accum", ACCUMULATION]
    dump_path = os.path.join(tmp, label, "dump.safetensors")
    out_dir = os.path.join(tmp, label, "out")
    oc.run_zerotune(args.zerotune, common + ["--out", out_dir, "--dump-step0", dump_path])
    dump = oc.load_dump(dump_path)

    model = oc.load_reference_llama(model_dir)
    if label == "default":
        oc.check_oracle_self_consistency(report, model, samples[:MICRO_BATCH])
    micro_batches = oc.step_micro_batches(samples, 0, MICRO_BATCH, ACCUMULATION)
    loss, logits = oc.reference_step(model, micro_batches)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}

    report.check(all(t.dtype == oc.torch.float32 for t in dump.values()),
                 f"[{label}] every dumped tensor is fp32")
    oc.compare_dump_logits(report, dump, logits, micro_batches[0][2], f"[{label}]",
                           atol=LOGITS_ATOL)
    oc.compare_dump_loss(report, dump, loss, f"[{label}]", rel=LOSS_REL)
    oc.compare_dump_grads(report, dump, grads, f"[{label}]", rel_of_max=GRAD_REL_OF_MAX)

    records = oc.read_metrics(out_dir)
    if report.check(len(records) == 1, f"[{label}] metrics.jsonl has 1 training record "
                    f"(has {len(records)})"):
        oc.check_metrics_keys(report, records, f"[{label}] metrics.jsonl")
        report.scalar(f"[{label}] metrics.jsonl loss of update 1", records[0]["loss"], loss,
                      rel=LOSS_REL)
    report.check(os.path.exists(os.path.join(out_dir, "run.json")), f"[{label}] run.json written")

    if label == "default":
        checkpointed_path = os.path.join(tmp, label, "dump_checkpointing.safetensors")
        oc.run_zerotune(args.zerotune, common + ["--out", os.path.join(tmp, label, "out_ac"),
                                                 "--dump-step0", checkpointed_path,
                                                 "--activation-checkpointing"])
        oc.compare_dumps_identical(report, dump, oc.load_dump(checkpointed_path),
                                   f"[{label}] --activation-checkpointing vs without",
                                   atol=CHECKPOINTING_ATOL)


def main():
    args = oc.parse_args("zerotune vs HF transformers: logits, loss, gradients")
    report = oc.Report("LLaMA parity: zerotune vs HF transformers (float64)")
    with oc.temporary_directory(args, "zt_oracle_llama_") as tmp:
        for index, (label, overrides) in enumerate(CASES):
            oc.run_guarded(report, label, run_case, args, report, tmp, label,
                           seed=100 + 10 * index, overrides=overrides)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

# Oracle: zerotune's LLaMA forward/backward against HF transformers. A tiny random
# LlamaForCausalLM (GQA, 2 layers) saved by transformers in fp32 is trained for one step by
# `zerotune train --dump-step0`; the dumped logits (micro-batch 0), the global-batch loss and the
# gradient of every parameter must match HF run in float64 on the same two padded micro-batches.
# The same run with --activation-checkpointing must give the same dump. Further model configs
# (rope_theta 500000; rms_norm_eps 1e-5; linear rope_scaling) catch hard-coded constants.
# Tolerances and batch layout: oracle_common.py, "step-0 parity".
import os

import oracle_common as oc

CASES = [
    ("default", dict()),
    ("theta500k", dict(rope_theta=500000.0)),
    ("eps1e-5", dict(rms_norm_eps=1e-5)),
    ("rope_linear_x2", dict(rope_scaling={"type": "linear", "factor": 2.0})),
]


def check_case_is_sensitive(report, label, model_dir, overrides, micro_batches, logits):
    """The case can fail: with the HF defaults instead of `overrides` (what a zerotune that
    ignores those keys would compute) the logits move by far more than the tolerance."""
    defaults = {key: oc.TINY_LLAMA.get(key) for key in overrides}
    with oc.torch.no_grad():
        default_logits = oc.forward_logits(oc.load_reference_llama(model_dir, **defaults),
                                           micro_batches[0][0])
    moved = float((default_logits - logits).abs().max())
    report.check(moved > 10 * oc.LOGITS_ATOL, f"[{label}] oracle: with {defaults} instead the "
                 f"logits move by {moved:.2e} > 10 x the logits tolerance")


def run_case(args, report, tmp, label, seed, overrides):
    run_dir = os.path.join(tmp, label)
    model_dir = os.path.join(run_dir, "model")
    data_dir = os.path.join(run_dir, "data")
    config = oc.make_llama(model_dir, seed=seed, **overrides)
    samples = oc.make_samples(seed + 1, oc.PARITY_LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    dump, out_dir = oc.run_step0_dump(args.zerotune, model_dir, data_dir, run_dir)

    model = oc.load_reference_llama(model_dir)
    if label == "default":
        oc.check_oracle_self_consistency(report, model, samples[:oc.PARITY_MICRO_BATCH])
    micro_batches = oc.parity_micro_batches(samples)
    loss, logits = oc.reference_step(model, micro_batches)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    if overrides:
        check_case_is_sensitive(report, label, model_dir, overrides, micro_batches, logits)
    oc.compare_step0(report, label, dump, micro_batches, loss, logits, grads)

    records = oc.read_metrics(out_dir)
    if report.check(len(records) == 1, f"[{label}] metrics.jsonl has 1 training record "
                    f"(has {len(records)})"):
        oc.check_metrics_keys(report, records, f"[{label}] metrics.jsonl")
        report.scalar(f"[{label}] metrics.jsonl loss of update 1", records[0]["loss"], loss,
                      rel=oc.LOSS_REL)
    report.check(os.path.exists(os.path.join(out_dir, "run.json")), f"[{label}] run.json written")

    if label == "default":
        checkpointed, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir,
                                            os.path.join(run_dir, "checkpointing"),
                                            ["--activation-checkpointing"])
        oc.compare_dumps_identical(report, dump, checkpointed,
                                   f"[{label}] --activation-checkpointing vs without",
                                   atol=oc.SAME_RUN_ATOL)


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

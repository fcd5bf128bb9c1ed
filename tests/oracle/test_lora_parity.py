# Oracle: zerotune's LoRA against PEFT 0.10. A PEFT adapter (lora_B set to non-zero random values,
# otherwise lora_A's gradients are zero) is saved with save_pretrained and continued by
# `zerotune train --adapter DIR --dump-step0`; logits, loss and the gradient of every lora_A /
# lora_B must match PEFT run in float64, and the dump must hold no gradient for a frozen base
# weight. Cases: q_proj,v_proj; all-linear (also with --activation-checkpointing); rsLoRA; and
# LoRA dropout > 0, where the masks come from zerotune's own RNG, so only its effect is checked.
# Tolerances and batch layout: oracle_common.py, "step-0 parity".
import math
import os

import oracle_common as oc

torch = oc.torch

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

CASES = [
    # label, target_modules given to PEFT, modules expected to carry LoRA, rslora
    ("q_v", ["q_proj", "v_proj"], ["q_proj", "v_proj"], False),
    ("all_linear", "all-linear", ALL_LINEAR, False),
    ("rslora_q_v_down", ["q_proj", "v_proj", "down_proj"], ["q_proj", "v_proj", "down_proj"], True),
]


def check_lora_layout(report, model, label, modules, layers):
    """The reference itself: LoRA exactly on the expected modules, only LoRA trainable."""
    trainable = [oc.zerotune_name(n) for n, p in model.named_parameters() if p.requires_grad]
    block = {m: "mlp" if m in ("gate_proj", "up_proj", "down_proj") else "self_attn"
             for m in modules}
    expected = sorted(f"model.layers.{layer}.{block[m]}.{m}.lora_{ab}.weight"
                      for layer in range(layers) for m in modules for ab in "AB")
    report.check(sorted(trainable) == expected,
                 f"[{label}] oracle: PEFT made exactly {len(expected)} trainable LoRA tensors")


def make_case(tmp, label, seed, target_modules, use_rslora, dropout, sample_count):
    """A model, a PEFT adapter on it and a dataset under tmp/label; returns their paths and
    the samples."""
    run_dir = os.path.join(tmp, label)
    model_dir = os.path.join(run_dir, "model")
    adapter_dir = os.path.join(run_dir, "adapter")
    data_dir = os.path.join(run_dir, "data")
    config = oc.make_llama(model_dir, seed=seed)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, target_modules, use_rslora, dropout)
    lengths = (oc.PARITY_LENGTHS * sample_count)[:sample_count]
    samples = oc.make_samples(seed + 1, lengths, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    return run_dir, model_dir, adapter_dir, data_dir, samples


def run_case(args, report, tmp, label, seed, target_modules, modules, use_rslora):
    run_dir, model_dir, adapter_dir, data_dir, samples = make_case(
        tmp, label, seed, target_modules, use_rslora, 0.0, len(oc.PARITY_LENGTHS))
    dump, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir, run_dir,
                                ["--adapter", adapter_dir])

    model = oc.load_reference_peft(model_dir, adapter_dir)
    check_lora_layout(report, model, label, modules, len(model.get_base_model().model.layers))
    if use_rslora:  # the reference really is rsLoRA: scaling alpha / sqrt(r) = 4, not alpha/r = 2
        scaling = model.get_base_model().model.layers[0].self_attn.q_proj.scaling["default"]
        report.check(abs(scaling - 8 / math.sqrt(4)) < 1e-12,
                     f"[{label}] oracle: PEFT scaling {scaling} == alpha/sqrt(r)")
    micro_batches = oc.parity_micro_batches(samples)
    loss, logits = oc.reference_step(model, micro_batches)

    base_grads = sorted(k for k in dump if k.startswith("grad.") and ".lora_" not in k)
    report.check(not base_grads, f"[{label}] no gradient of a frozen base weight in the dump"
                 + (f" (found {base_grads[:4]})" if base_grads else ""))
    oc.compare_step0(report, label, dump, micro_batches, loss, logits,
                     oc.trainable_lora_grads(model))

    if label == "all_linear":
        checkpointed, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir,
                                            os.path.join(run_dir, "checkpointing"),
                                            ["--adapter", adapter_dir,
                                             "--activation-checkpointing"])
        oc.compare_dumps_identical(report, dump, checkpointed,
                                   f"[{label}] --activation-checkpointing vs without",
                                   atol=oc.SAME_RUN_ATOL)


def run_dropout_case(args, report, tmp, seed):
    """LoRA dropout 0.1 (all-linear): zerotune trains (finite losses, metrics written); dropout
    really acts (the step-0 loss differs from the dropout-free PEFT loss, but not wildly); the
    masks depend on --seed only (same seed: identical dump; another seed: another loss)."""
    label = "dropout"
    run_dir, model_dir, adapter_dir, data_dir, samples = make_case(
        tmp, label, seed, "all-linear", False, 0.1, 2 * len(oc.PARITY_LENGTHS))

    def run(name, train_seed, steps):
        return oc.run_step0_dump(args.zerotune, model_dir, data_dir, os.path.join(run_dir, name),
                                 ["--adapter", adapter_dir, "--seed", train_seed], steps=steps)

    dump, out_dir = run("seed7", 7, 2)
    records = oc.read_metrics(out_dir)
    model = oc.load_reference_peft(model_dir, adapter_dir)
    model.eval()  # dropout off: the loss that LoRA dropout perturbs
    clean_loss, _ = oc.reference_step(model, oc.parity_micro_batches(samples))
    if report.check(len(records) == 2, f"[{label}] metrics.jsonl has 2 training records "
                    f"(has {len(records)})"):
        report.check(all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
                         for r in records),
                     f"[{label}] finite losses {[r['loss'] for r in records]} and grad norms")
    report.check(all(bool(torch.isfinite(t).all()) for t in dump.values()),
                 f"[{label}] every dumped tensor is finite")
    dumped_loss = float(dump["loss"].reshape(-1)[0]) if "loss" in dump else float("nan")
    relative_change = abs(dumped_loss - clean_loss) / clean_loss
    report.check(1e-4 < relative_change < 0.2,
                 f"[{label}] dropout changes the step-0 loss: {dumped_loss:.6f} vs "
                 f"dropout-free {clean_loss:.6f} (relative {relative_change:.2e} in (1e-4, 0.2))")

    same_dump, _ = run("seed7_again", 7, 1)
    oc.compare_dumps_identical(report, dump, same_dump, f"[{label}] same --seed, same dump",
                               atol=oc.SAME_RUN_ATOL)
    other_dump, _ = run("seed8", 8, 1)
    other_loss = float(other_dump["loss"].reshape(-1)[0])
    report.check(abs(other_loss - dumped_loss) > 1e-6 * clean_loss,
                 f"[{label}] another --seed gives other dropout masks: loss {other_loss:.6f} vs "
                 f"{dumped_loss:.6f}")


def main():
    args = oc.parse_args("zerotune LoRA vs PEFT: logits, loss, LoRA gradients")
    report = oc.Report("LoRA parity: zerotune vs PEFT 0.10 (float64)")
    with oc.temporary_directory(args, "zt_oracle_lora_") as tmp:
        for index, (label, targets, modules, rslora) in enumerate(CASES):
            oc.run_guarded(report, label, run_case, args, report, tmp, label, 200 + 10 * index,
                           targets, modules, rslora)
        oc.run_guarded(report, "dropout", run_dropout_case, args, report, tmp, 290)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

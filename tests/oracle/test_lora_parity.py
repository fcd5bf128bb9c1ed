# Oracle: zerotune's LoRA against PEFT 0.10. A PEFT adapter (lora_B set to non-zero random values,
# otherwise lora_A's gradients are zero) is saved with save_pretrained and continued by
# `zerotune train --adapter DIR --dump-step0`; logits, loss and the gradient of every lora_A /
# lora_B must match PEFT run in float64, and the dump must hold no gradient for a frozen base
# weight. Cases: q_proj,v_proj; all-linear (also with --activation-checkpointing); rsLoRA; and
# LoRA dropout > 0, where the masks come from zerotune's own RNG, so only its effect is checked.
import math
import os

import oracle_common as oc

torch = oc.torch
peft = oc.peft

# Same reasoning as test_llama_parity.py: fp32 against float64, errors ~1e-6 of the scale.
LOGITS_ATOL = 1e-4
LOSS_REL = 1e-5
GRAD_REL_OF_MAX = 1e-4
SAME_RUN_ATOL = 1e-6  # reruns (activation checkpointing, same seed) change nothing

MICRO_BATCH, ACCUMULATION = 3, 2
LENGTHS = [8, 24, 13, 17, 11, 20]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

CASES = [
    # label, target_modules given to PEFT, modules expected to carry LoRA, rslora, dropout
    ("q_v", ["q_proj", "v_proj"], ["q_proj", "v_proj"], False, 0.0),
    ("all_linear", "all-linear", ALL_LINEAR, False, 0.0),
    ("rslora_q_v_down", ["q_proj", "v_proj", "down_proj"], ["q_proj", "v_proj", "down_proj"],
     True, 0.0),
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


def run_case(args, report, tmp, label, seed, target_modules, modules, use_rslora, dropout):
    model_dir = os.path.join(tmp, label, "model")
    adapter_dir = os.path.join(tmp, label, "adapter")
    data_dir = os.path.join(tmp, label, "data")
    config = oc.make_llama(model_dir, seed=seed)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, target_modules, use_rslora, dropout)
    samples = oc.make_samples(seed + 1, LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)

    common = ["train", "--model", model_dir, "--data", data_dir, "--adapter", adapter_dir,
              "--no-shuffle", "--max-steps", 1, "--micro-batch-size", MICRO_BATCH,
              "--grad-accum", ACCUMULATION]
    dump_path = os.path.join(tmp, label, "dump.safetensors")
    oc.run_zerotune(args.zerotune, common + ["--out", os.path.join(tmp, label, "out"),
                                             "--dump-step0", dump_path])
    dump = oc.load_dump(dump_path)

    model = oc.load_reference_peft(model_dir, adapter_dir)
    check_lora_layout(report, model, label, modules, config.num_hidden_layers)
    if use_rslora:  # the reference really is rsLoRA: scaling alpha / sqrt(r) = 4, not alpha/r = 2
        scaling = model.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"]
        report.check(abs(scaling - 8 / math.sqrt(4)) < 1e-12,
                     f"[{label}] oracle: PEFT scaling {scaling} == alpha/sqrt(r)")
    micro_batches = oc.step_micro_batches(samples, 0, MICRO_BATCH, ACCUMULATION)
    loss, logits = oc.reference_step(model, micro_batches)

    base_grads = sorted(k for k in dump if k.startswith("grad.") and ".lora_" not in k)
    report.check(not base_grads, f"[{label}] no gradient of a frozen base weight in the dump"
                 + (f" (found {base_grads[:4]})" if base_grads else ""))
    oc.compare_dump_logits(report, dump, logits, micro_batches[0][2], f"[{label}]",
                           atol=LOGITS_ATOL)
    oc.compare_dump_loss(report, dump, loss, f"[{label}]", rel=LOSS_REL)
    oc.compare_dump_grads(report, dump, oc.trainable_lora_grads(model), f"[{label}]",
                          rel_of_max=GRAD_REL_OF_MAX)

    if label == "all_linear":
        checkpointed_path = os.path.join(tmp, label, "dump_checkpointing.safetensors")
        oc.run_zerotune(args.zerotune, common + ["--out", os.path.join(tmp, label, "out_ac"),
                                                 "--dump-step0", checkpointed_path,
                                                 "--activation-checkpointing"])
        oc.compare_dumps_identical(report, dump, oc.load_dump(checkpointed_path),
                                   f"[{label}] --activation-checkpointing vs without",
                                   atol=SAME_RUN_ATOL)


def run_dropout_case(args, report, tmp, seed):
    """LoRA dropout 0.1 (all-linear): zerotune trains (finite losses, metrics written); dropout
    really acts (the step-0 loss differs from the dropout-free PEFT loss, but not wildly); the
    masks depend on --seed only (same seed: identical dump; another seed: another loss)."""
    label = "dropout"
    model_dir = os.path.join(tmp, label, "model")
    adapter_dir = os.path.join(tmp, label, "adapter")
    data_dir = os.path.join(tmp, label, "data")
    config = oc.make_llama(model_dir, seed=seed)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", False, 0.1)
    samples = oc.make_samples(seed + 1, LENGTHS * 2, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)

    def run(name, train_seed, steps):
        out_dir = os.path.join(tmp, label, name)
        dump_path = os.path.join(tmp, label, name + ".safetensors")
        oc.run_zerotune(args.zerotune, [
            "train", "--model", model_dir, "--data", data_dir, "--adapter", adapter_dir,
            "--out", out_dir, "--no-shuffle", "--max-steps", steps, "--micro-batch-size",
            MICRO_BATCH, "--grad-accum", ACCUMULATION, "--seed", train_seed,
            "--dump-step0", dump_path])
        return oc.load_dump(dump_path), oc.read_metrics(out_dir)

    dump, records = run("seed7", 7, 2)
    model = oc.load_reference_peft(model_dir, adapter_dir)
    model.eval()  # dropout off: the loss LoRA dropout perturbs
    clean_loss, _ = oc.reference_step(model, oc.step_micro_batches(samples, 0, MICRO_BATCH,
                                                                   ACCUMULATION))
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
                               atol=SAME_RUN_ATOL)
    other_dump, _ = run("seed8", 8, 1)
    other_loss = float(other_dump["loss"].reshape(-1)[0])
    report.check(abs(other_loss - dumped_loss) > 1e-6 * clean_loss,
                 f"[{label}] another --seed gives other dropout masks: loss {other_loss:.6f} vs "
                 f"{dumped_loss:.6f}")


def main():
    args = oc.parse_args("zerotune LoRA vs PEFT: logits, loss, LoRA gradients")
    report = oc.Report("LoRA parity: zerotune vs PEFT 0.10 (float64)")
    with oc.temporary_directory(args, "zt_oracle_lora_") as tmp:
        for index, (label, targets, modules, rslora, dropout) in enumerate(CASES):
            oc.run_guarded(report, label, run_case, args, report, tmp, label, 200 + 10 * index,
                           targets, modules, rslora, dropout)
        oc.run_guarded(report, "dropout", run_dropout_case, args, report, tmp, 290)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

"""Oracle: zerotune's evaluation (--eval-data, --eval-every, --eval-at-start, end of epoch) against HF.

eval_loss must be the token-weighted mean CE over the WHOLE eval split (sum over every target
token / their count, not a mean of per-batch means), eval_ppl = exp(eval_loss). With lr 0 the
weights never change, so every eval record must equal the HF float64 loss of the saved model
over the eval samples; a different micro-batch size must not change it; LoRA dropout must be off
in evaluation (a PEFT adapter with dropout 0.3 evaluates to the PEFT model's loss in eval mode)."""
import json
import math
import os

import oracle_common as oc

EVAL_LENGTHS = [9, 23, 14, 31, 6, 17, 12]   # 7 samples: the last micro-batch is partial
TRAIN_LENGTHS = [10, 12, 9, 15, 11, 13, 8, 14]


def eval_records(out_dir):
    path = os.path.join(out_dir, "metrics.jsonl")
    with open(path) as stream:
        return [json.loads(line) for line in stream if '"eval_loss"' in line]


def reference_eval_loss(model, samples):
    loss_sum, targets = 0.0, 0
    with oc.torch.no_grad():
        for sample in samples:  # one at a time: padding cannot matter
            input_ids, labels, _ = oc.micro_batch([sample])
            loss_sum += float(oc.cross_entropy_sum(oc.forward_logits(model, input_ids), labels))
            targets += oc.target_count(labels)
    return loss_sum / targets


def run(zerotune, work, report):
    model_dir, train_dir, eval_dir = (os.path.join(work, name) for name in ("model", "train", "eval"))
    oc.make_llama(model_dir, seed=5)
    vocab = oc.TINY_LLAMA["vocab_size"]
    oc.write_data(train_dir, oc.make_samples(1, TRAIN_LENGTHS, vocab), vocab)
    eval_samples = oc.make_samples(2, EVAL_LENGTHS, vocab)
    oc.write_data(eval_dir, eval_samples, vocab)
    reference = reference_eval_loss(oc.load_reference_llama(model_dir), eval_samples)

    common = ["train", "--model", model_dir, "--data", train_dir, "--eval-data", eval_dir, "--lr", "0",
              "--no-shuffle", "--grad-accum", "1"]
    # micro-batch 2: 4 steps per epoch; eval before the first step (--eval-at-start, DeepSpeed-Chat's
    # "Epoch 0"), every 3 steps and at the epoch end (step 4).
    out = os.path.join(work, "out-micro2")
    oc.run_zerotune(zerotune, common + ["--out", out, "--micro-batch-size", "2", "--eval-every", "3", "--epochs", "1",
                                       "--eval-at-start"])
    records = eval_records(out)
    report.check([r["step"] for r in records] == [0, 3, 4], f"eval records at steps 0, 3 and 4 (start, every 3, "
                 f"epoch end): {[r['step'] for r in records]}")
    for record in records:
        report.scalar(f"micro-batch 2, step {record['step']} eval_loss", record["eval_loss"], reference, rel=1e-5)
        report.scalar(f"micro-batch 2, step {record['step']} eval_ppl", record["eval_ppl"], math.exp(reference), rel=1e-5)
        report.check(record["eval_samples"] == len(EVAL_LENGTHS), f"eval_samples {record['eval_samples']}")

    # micro-batch 3 (a partial last eval batch), eval only at the end of each of 2 epochs.
    out = os.path.join(work, "out-micro3")
    oc.run_zerotune(zerotune, common + ["--out", out, "--micro-batch-size", "3", "--epochs", "2"])
    records = eval_records(out)
    report.check([r["step"] for r in records] == [2, 4], f"eval records at the epoch ends 2 and 4: "
                 f"{[r['step'] for r in records]}")
    for record in records:
        report.scalar(f"micro-batch 3, step {record['step']} eval_loss", record["eval_loss"], reference, rel=1e-5)

    # LoRA with dropout 0.3 on a PEFT adapter with nonzero B: evaluation must run without
    # dropout, so its eval_loss is the PEFT model's loss in eval mode (dropout on would move it).
    adapter_dir = os.path.join(work, "adapter")
    oc.make_adapter(model_dir, adapter_dir, seed=9, target_modules="all-linear", use_rslora=False, dropout=0.3)
    peft_model = oc.load_reference_peft(model_dir, adapter_dir)
    peft_model.eval()
    peft_reference = reference_eval_loss(peft_model, eval_samples)
    report.check(abs(peft_reference - reference) > 1e-3, f"the adapter changes the loss ({peft_reference} vs {reference})")
    out = os.path.join(work, "out-lora-dropout")
    oc.run_zerotune(zerotune, common + ["--out", out, "--micro-batch-size", "2", "--max-steps", "1", "--eval-every", "1",
                                        "--adapter", adapter_dir])
    records = eval_records(out)
    report.check(len(records) == 1, f"one eval record with --eval-every 1 --max-steps 1: {len(records)}")
    for record in records:
        report.scalar("LoRA adapter (dropout 0.3) eval_loss, no dropout in evaluation", record["eval_loss"],
                      peft_reference, rel=1e-5)


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report("Evaluation: zerotune eval_loss/eval_ppl vs HF (float64) over the whole split")
    with oc.temporary_directory(args, "zt-oracle-eval-") as work:
        oc.run_guarded(report, "eval", run, args.zerotune, work, report)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

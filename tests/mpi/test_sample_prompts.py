"""`train --sample-prompts` (issue 35 item 7): greedy completions of a prompts file during
training, every --sample-every steps and after the last, printed on rank 0 and appended to
OUT/samples.jsonl. On the tour's tiny LLaMA (SentencePiece tokenizer, rm-static prompts as JSON
lines), 2 steps of AdamW (1e-3, LoRA 2e-2) with --sample-every 1:
 - 2 ranks at ZeRO-3 (every rank runs the generation forwards, its parameters gathered through the
   engine's hooks) and at ZeRO-1, and 1 rank at ZeRO-0: samples.jsonl holds one record per prompt
   and sampling step with the prompt, the completion (decoded), its ids and why it stopped; the
   three runs' records are identical (the same global batches give the same weights); each rank
   chose the same tokens (no "ranks chose different tokens" warning); rank 0 alone printed them;
 - the final samples equal `zerotune generate --checkpoint` on the run's final checkpoint, for the
   full fine-tuning run and for a LoRA run at ZeRO-3 (the adapter applied in both), and differ from
   the untrained model's."""
import json
import os
import subprocess
import sys

import sentencepiece

from mpi_common import OracleError, REPO, Report, main_guard, parse_args, run_ranks, temporary_directory

PROMPTS = 2
NEW_TOKENS = 8


def make_tour_inputs(zerotune, work):
    """The tour's model (data/tour-llama) with a SentencePiece tokenizer trained on the sample
    data, the data prepared with it (128 tokens at most), and a JSONL prompts file."""
    model, data = os.path.join(work, "model"), os.path.join(work, "data")
    # initializer_range 0.2 (the tour's 0.02 gives near-uniform logits, which one step of training
    # turns into one repeated token): continuations that vary before and after two steps.
    with open(os.path.join(REPO, "data", "tour-llama", "config.json")) as stream:
        config = json.load(stream)
    config["initializer_range"] = 0.2
    config_path = os.path.join(work, "config.json")
    with open(config_path, "w") as out:
        json.dump(config, out)
    subprocess.run([zerotune, "init", "--config", config_path, "--out", model, "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(os.path.join(REPO, "data", "rm-static-sample.jsonl"))]
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w") as out:
        for row in rows:
            out.write(row["prompt"] + row.get("chosen", row.get("response", "")) + "\n")
    # SentencePiece's Python module, not its spm_train program: GPU nodes have the module (with
    # torch and transformers) but seldom the program (gpu_check.sh runs test_gpu_generate there).
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=f"{model}/tokenizer", vocab_size=1000, model_type="bpe", byte_fallback=True,
        split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=3, minloglevel=2)
    subprocess.run([zerotune, "prep", "--input", os.path.join(REPO, "data", "rm-static-sample.jsonl"), "--tokenizer", model,
                    "--out", data, "--max-seq-len", "128"], check=True, stdout=subprocess.DEVNULL)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as out:
        for row in rows[:PROMPTS]:
            out.write(json.dumps({"prompt": row["prompt"][:80]}) + "\n")
    return model, data, prompts, [row["prompt"][:80] for row in rows[:PROMPTS]]


def write_ds_config(work):
    """AdamW at a constant 1e-3 (no warm-up; LoRA runs take --lr 2e-2): two steps move the tiny
    model's greedy continuations without collapsing them to one token, so samples that ignored the
    training (or a checkpoint that did) would show."""
    path = os.path.join(work, "ds.json")
    with open(path, "w") as out:
        json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0, "steps_per_print": 1,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}}, out)
    return path


def train(zerotune, ranks, model, data, prompts, out, stage, extra=(), device="cpu"):
    result, _ = run_ranks(ranks, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed",
                                  os.path.join(os.path.dirname(out), "ds.json"), "--zero-stage", stage,
                                  "--max-steps", 2, "--seed", 1, "--device", device, "--sample-prompts", prompts,
                                  "--sample-every", 1, "--sample-max-new-tokens", NEW_TOKENS, *extra], timeout_s=300)
    with open(os.path.join(out, "samples.jsonl")) as stream:
        return [json.loads(line) for line in stream if line.strip()], result.stdout + result.stderr


def check_records(report, label, records, prompts, log):
    report.check([r["step"] for r in records] == [1] * PROMPTS + [2] * PROMPTS,
                 f"{label}: samples at steps 1 and 2, one record per prompt ({[r['step'] for r in records]})")
    report.check([r["prompt"] for r in records] == prompts * 2, f"{label}: the records' prompts are the file's")
    report.check(all(set(r) >= {"step", "prompt", "completion", "completion_ids", "stop"} for r in records),
                 f"{label}: every record has step, prompt, completion, completion_ids and stop")
    report.check(all(r["stop"] == "eos" and len(r["completion_ids"]) < NEW_TOKENS or
                     r["stop"] == "length" and len(r["completion_ids"]) == NEW_TOKENS for r in records),
                 f"{label}: each completion ends at EOS or after {NEW_TOKENS} tokens")
    report.check(any(r["completion"].strip() for r in records), f"{label}: the completions decode to text")
    report.check(log.count("sample at step ") == len(records), f"{label}: rank 0 alone printed each sample "
                 f"({log.count('sample at step ')} lines for {len(records)} records)")
    report.check("ranks chose different tokens" not in log, f"{label}: every rank chose rank 0's tokens")


def generate(zerotune, model, prompt, checkpoint=(), device="cpu"):
    result = subprocess.run([zerotune, "generate", "--model", model, *checkpoint, "--prompt", prompt, "--max-new-tokens",
                             str(NEW_TOKENS), "--device", device, "--json"], capture_output=True, text=True, timeout=300)
    if result.returncode:
        raise OracleError(f"generate {' '.join(checkpoint)} exited {result.returncode}: {result.stderr[-400:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_against_generate(report, label, zerotune, model, out, final):
    """The last samples equal `generate --checkpoint` on the final checkpoint, and differ from the
    untrained model's continuations (the training shows in them)."""
    trained = [generate(zerotune, model, r["prompt"], ["--checkpoint", out]) for r in final]
    untrained = [generate(zerotune, model, r["prompt"]) for r in final]
    report.check([g["completion_ids"] for g in trained] == [r["completion_ids"] for r in final] and
                 [g["completion"] for g in trained] == [r["completion"] for r in final],
                 f"{label}: generate --checkpoint gives the last samples {[r['completion_ids'] for r in final]}")
    report.check([g["completion_ids"] for g in untrained] != [r["completion_ids"] for r in final],
                 f"{label}: the untrained model continues otherwise {[g['completion_ids'] for g in untrained]}")


def main():
    args = parse_args(__doc__)
    report = Report("train --sample-prompts")
    with temporary_directory(args, "zt-mpi-samples-") as work:
        model, data, prompts, texts = make_tour_inputs(args.zerotune, work)
        write_ds_config(work)
        runs = {}
        # The same global batch of 8 everywhere: micro-batch 4 x 2 ranks, or x 2 accumulation steps on 1.
        for label, ranks, stage, extra in (("2 ranks ZeRO-3", 2, 3, ["--grad-accum", 1]),
                                           ("2 ranks ZeRO-1", 2, 1, ["--grad-accum", 1]),
                                           ("1 rank ZeRO-0", 1, 0, ["--grad-accum", 2])):
            out = os.path.join(work, f"run{ranks}-{stage}")
            records, log = train(args.zerotune, ranks, model, data, prompts, out, stage, extra)
            check_records(report, label, records, texts, log)
            runs[label] = (records, out)
        reference = runs["1 rank ZeRO-0"][0]
        report.check(len({i for r in reference for i in r["completion_ids"]}) > 4,
                     "the samples hold more than a few distinct tokens (the comparisons below can fail)")
        for label in ("2 ranks ZeRO-3", "2 ranks ZeRO-1"):
            report.check([r["completion_ids"] for r in runs[label][0]] == [r["completion_ids"] for r in reference],
                         f"{label}: the same completions as 1 rank")
        records, out = runs["2 ranks ZeRO-3"]
        check_against_generate(report, "full, ZeRO-3", args.zerotune, model, out, records[PROMPTS:])
        lora_out = os.path.join(work, "lora3")
        lora_records, log = train(args.zerotune, 2, model, data, prompts, lora_out, 3,
                                  ["--grad-accum", 1, "--lr", 2e-2, "--lora-r", 8, "--lora-alpha", 16, "--lora-targets", "all-linear"])
        check_records(report, "LoRA 2 ranks ZeRO-3", lora_records, texts, log)
        check_against_generate(report, "LoRA, ZeRO-3", args.zerotune, model, lora_out, lora_records[PROMPTS:])
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

"""The reward objective (DeepSpeed-Chat step 2, train/reward_objective.cpp) under ZeRO on 2 MPI ranks:
stage 3 (the value head gathered with the head unit) and stage 2 give the same losses, gradient
norms and final weights (value head included) as one rank with the same global batch, within float
reassociation, and so do stage 3 on 4 ranks and stage 2 with the optimizer offloaded to the CPU;
exact resume: a new run started from the stage-3 2-rank run's step-2 checkpoint gives that run's
steps 3 and 4 and final weights bit for bit; with LoRA at stage 3 the value head trains (PEFT's
modules_to_save) and the base stays frozen, and QLoRA (an nf4 base) at stage 2 gives its one-rank
run. Pairs are written straight into a pair shard (format: src/data/token_shards.h) for the tiny
LLaMA of data/tiny-llama: random prompts, responses that share a prefix (the divergence falls inside
them), some ending with an unscored EOS.
"""
import os
import random
import subprocess

import h5py
import numpy

from mpi_common import (REPO, Report, check_weights, load_weights, main_guard, parse_args, read_metrics, run_ranks,
                        temporary_directory, write_ds_config)
from oracle_common import check_refused  # noqa: E402 (mpi_common puts tests/oracle on the path)

STEPS = 4            # WarmupLR gives updates 1 and 2 a learning rate of 0 (test_zero_equivalence.py)
PAIRS = 32
VOCAB = 256          # data/tiny-llama
BOS, EOS, PAD = 1, 2, 0
MAX_SEQ_LEN = 48
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6


def write_pairs(path, seed, vocab=VOCAB, pairs=PAIRS):
    """One pair shard of `pairs` random pairs of token ids in [3, vocab)."""
    rng = random.Random(seed)
    tokens, mask, offsets, prompt_lengths, chosen_lengths = [], [], [0], [], []
    for _ in range(pairs):
        prompt = [BOS] + [rng.randrange(3, vocab) for _ in range(rng.randrange(3, 12))]
        shared = [rng.randrange(3, vocab) for _ in range(rng.randrange(0, 6))]
        sides = []
        for _ in range(2):
            response = shared + [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 14))]
            scored = [1] * len(response)
            if rng.random() < 0.5:  # an end-of-text EOS, not scored
                response, scored = response + [EOS], scored + [0]
            sides.append((response, scored))
        tokens += prompt + sides[0][0] + sides[1][0]
        mask += [0] * len(prompt) + sides[0][1] + sides[1][1]
        offsets.append(len(tokens))
        prompt_lengths.append(len(prompt))
        chosen_lengths.append(len(sides[0][0]))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with h5py.File(path, "w") as shard:
        shard["tokens"] = numpy.array(tokens, dtype=numpy.int32)
        shard["loss_mask"] = numpy.array(mask, dtype=numpy.uint8)
        shard["offsets"] = numpy.array(offsets, dtype=numpy.int64)
        shard["prompt_lengths"] = numpy.array(prompt_lengths, dtype=numpy.int64)
        shard["chosen_lengths"] = numpy.array(chosen_lengths, dtype=numpy.int64)
        for key, value in dict(format="zerotune-tokens", tokenizer_sha256="test", split="train", source="test",
                               record="pair").items():
            shard.attrs[key] = value
        for key, value in dict(version=2, vocab_size=vocab, bos_id=BOS, eos_id=EOS, pad_id=PAD,
                               max_seq_len=MAX_SEQ_LEN).items():
            shard.attrs[key] = numpy.int64(value)


def train(zerotune, workdir, model, data, name, ranks, stage, lora=False, steps=STEPS, extra=(), zero=None):
    out = os.path.join(workdir, name)
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 8, 2, dict(zero or {}, stage=stage))
    command = [zerotune, "train", "--objective", "reward", "--model", model, "--data", data, "--out", out,
               "--deepspeed", ds, "--max-steps", steps, "--seed", 3, "--dump-final", out + ".safetensors"] + list(extra)
    if lora:
        command += ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "q_proj,v_proj"]
    run_ranks(ranks, command)
    return {"name": name, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors")}


def compare(report, got, ref):
    label = got["name"]
    report.check(len(got["metrics"]) == STEPS, f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        report.scalar(f"{label} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.scalar(f"{label} step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
    check_weights(report, label, got["weights"], ref["weights"], WEIGHT_ATOL, ref["metrics"])


def main():
    args = parse_args(__doc__)
    report = Report("reward objective under ZeRO (2 and 4 ranks vs 1) and exact resume")
    with temporary_directory(args, "zt-reward-zero-") as workdir:
        model = os.path.join(workdir, "model")
        subprocess.run([args.zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"),
                        "--out", model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        data = os.path.join(workdir, "pairs")
        write_pairs(os.path.join(data, "train-00000.h5"), seed=5)

        reference = train(args.zerotune, workdir, model, data, "full-w1-s0", 1, 0)
        report.check("v_head.weight" in reference["weights"], "the value head is a trainable parameter")
        report.check(all(r["loss"] > 0.0 for r in reference["metrics"]), "the pair losses are positive")
        stage3 = train(args.zerotune, workdir, model, data, "full-w2-s3", 2, 3, extra=["--save-every", 2])
        compare(report, stage3, reference)
        compare(report, train(args.zerotune, workdir, model, data, "full-w2-s2", 2, 2), reference)
        # 4 ranks (oversubscribed on 2 cores): each holds a quarter of every unit, the value head's too.
        compare(report, train(args.zerotune, workdir, model, data, "full-w4-s3", 4, 3), reference)
        compare(report, train(args.zerotune, workdir, model, data, "offload-w2-s2", 2, 2,
                              zero={"offload_optimizer": {"device": "cpu"}}), reference)
        # Exact resume at stage 3: a new run from the step-2 checkpoint (value head included) continues
        # as the uninterrupted run, bit for bit.
        checkpoint = os.path.join(workdir, "full-w2-s3", "checkpoints", "global_step2")
        resumed = train(args.zerotune, workdir, model, data, "resumed-w2-s3", 2, 3, extra=["--resume", checkpoint])
        report.check([(r["step"], r["loss"], r["grad_norm"]) for r in resumed["metrics"]] ==
                     [(r["step"], r["loss"], r["grad_norm"]) for r in stage3["metrics"][2:]],
                     "resumed from step 2 at stage 3: steps 3 and 4's loss and grad_norm identical")
        check_weights(report, "resumed-w2-s3", resumed["weights"], stage3["weights"], 0.0, stage3["metrics"])

        lora_reference = train(args.zerotune, workdir, model, data, "lora-w1-s0", 1, 0, lora=True)
        trained = sorted(lora_reference["weights"])
        report.check("v_head.weight" in trained and all("lora_" in n or n == "v_head.weight" for n in trained),
                     f"LoRA: the adapters and the value head train, nothing else ({len(trained)} tensors)")
        compare(report, train(args.zerotune, workdir, model, data, "lora-w2-s3", 2, 3, lora=True), lora_reference)
        qlora = ["--quantize", "nf4"]
        qlora_reference = train(args.zerotune, workdir, model, data, "qlora-w1-s0", 1, 0, lora=True, extra=qlora)
        compare(report, train(args.zerotune, workdir, model, data, "qlora-w2-s2", 2, 2, lora=True, extra=qlora),
                qlora_reference)
        # A LoRA reward model exports merged as ...ForSequenceClassification, not as a PEFT adapter
        # (its value head is no part of one); the export's own check is tests/oracle/test_reward_model.py.
        checkpoint = os.path.join(workdir, "lora-w1-s0", "checkpoints", f"global_step{STEPS}")
        check_refused(args.zerotune, report, "export a LoRA reward model as --format peft",
                      ["export", "--checkpoint", checkpoint, "--model", model, "--out", os.path.join(workdir, "peft"),
                       "--format", "peft"], "is a reward model")
        merged = os.path.join(workdir, "merged")
        subprocess.run([args.zerotune, "export", "--checkpoint", checkpoint, "--model", model, "--out", merged,
                        "--format", "hf", "--merge"], check=True, stdout=subprocess.DEVNULL)
        exported = load_weights(os.path.join(merged, "model.safetensors"))
        report.check("score.weight" in exported and "v_head.weight" not in exported and "lm_head.weight" not in exported,
                     "the merged export names the value head score.weight and has no LM head")
        report.close("exported score.weight = the trained v_head.weight", exported["score.weight"],
                     lora_reference["weights"]["v_head.weight"], atol=0.0)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

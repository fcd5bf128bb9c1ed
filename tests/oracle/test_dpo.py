"""Oracle: `zerotune train --objective dpo` (train/dpo_objective.cpp) against a PyTorch
transcription of TRL's DPOTrainer (loss_type "sigmoid": dpo_loss and concatenated_forward, written
here from their formulas) on a tiny random LLaMA with a PEFT LoRA adapter whose lora_B is random
(so the policy differs from the reference from the first step), the reference being the same
model under PEFT's `disable_adapter()` (TRL's null_ref_context for a PEFT model).

Per pair: logp = the sum of log p(target) over the row's loss-masked targets (the response tokens),
z = beta * ((logp_c - ref_c) - (logp_r - ref_r)), loss = -(1 - ls) logsigmoid(z) - ls logsigmoid(-z),
averaged over the global batch's pairs, with beta 0.2 and label smoothing 0.1 (not the defaults, so
both flags are exercised). Checked: step 1's loss, logits and the gradient of every LoRA tensor
(--dump-step0, 2 micro-batches of 4 pairs accumulated), that the dump has no gradient for a frozen
weight, and the evaluation's eval_loss and TRL's figures (rewards/chosen, rewards/rejected,
rewards/accuracies, rewards/margins, logps/chosen, logps/rejected) over every pair at lr 0.

Full fine-tuning: the reference is a frozen copy of the initial weights (TRL's ref_model, here
copy.deepcopy of the policy before training; train/frozen_reference.h). Two SGD steps (lr 2): step
1's loss (log 2: the policy is its copy), logits and the gradient of every weight; then, after the
update, the evaluation's figures and step 2's loss, where the policy has moved and the reference
must not have. Also that sample data and a bad label smoothing are refused by name.
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi"))
import oracle_common as oc  # noqa: E402
from test_reward_zero import write_pairs  # noqa: E402

import h5py  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PAIRS = 12
MICRO_BATCH = 4
ACCUMULATION = 2
BETA = 0.2
LABEL_SMOOTHING = 0.1
FIGURE_ATOL = 1e-6  # rewards are beta x differences of O(10) log-probs computed in fp32
LOGPS_REL = 1e-5


def read_pairs(path):
    """[(chosen ids, chosen mask), (rejected ids, rejected mask)] per pair of a pair shard."""
    pairs = []
    with h5py.File(path, "r") as shard:
        tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
        prompts, chosen = shard["prompt_lengths"][:], shard["chosen_lengths"][:]
        for i in range(len(offsets) - 1):
            begin, p, c = int(offsets[i]), int(prompts[i]), int(chosen[i])
            ids, m = [int(t) for t in tokens[begin:offsets[i + 1]]], [int(v) for v in mask[begin:offsets[i + 1]]]
            pairs.append(((ids[:p + c], m[:p + c]), (ids[:p] + ids[p + c:], m[:p] + m[p + c:])))
    return pairs


def concatenated_logps(model, pairs):
    """TRL's concatenated_forward on zerotune's layout: the chosen rows, then the rejected rows,
    right-padded; per row the sum of the log-probs of its loss-masked targets. Returns (logps [2P],
    logits [2P, T, V], lengths [2P])."""
    rows = [side for side, _ in pairs] + [side for _, side in pairs]
    longest = max(len(ids) for ids, _ in rows)
    input_ids = torch.tensor([ids + [oc.PAD_ID] * (longest - len(ids)) for ids, _ in rows])
    mask = torch.tensor([m + [0] * (longest - len(m)) for _, m in rows], dtype=torch.float64)
    logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits  # [2P, T, V]
    logprobs = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    per_token = torch.gather(logprobs, 2, input_ids[:, 1:].unsqueeze(2)).squeeze(2)  # [2P, T-1]
    return (per_token * mask[:, 1:]).sum(dim=1), logits, [len(ids) for ids, _ in rows]


def dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta, label_smoothing):
    """TRL's DPOTrainer.dpo_loss, loss_type "sigmoid"."""
    logits = (chosen_logps - rejected_logps) - (ref_chosen_logps - ref_rejected_logps)
    losses = (-F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing)
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps).detach()
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps).detach()
    return losses, chosen_rewards, rejected_rewards


def pair_terms(model, pairs, ref_model=None):
    """The policy's and the reference's log-probs of the pairs and TRL's loss terms; the reference
    is `ref_model`, or without one the PEFT model with its adapters disabled."""
    logps, logits, lengths = concatenated_logps(model, pairs)
    with torch.no_grad():
        if ref_model is not None:
            ref_logps, _, _ = concatenated_logps(ref_model, pairs)
        else:
            with model.disable_adapter():
                ref_logps, _, _ = concatenated_logps(model, pairs)
    count = len(pairs)
    losses, chosen_rewards, rejected_rewards = dpo_loss(logps[:count], logps[count:], ref_logps[:count],
                                                        ref_logps[count:], BETA, LABEL_SMOOTHING)
    return losses, chosen_rewards, rejected_rewards, logps.detach(), logits, lengths


def check_step(report, zerotune, work, model_dir, adapter_dir, data_dir, pairs):
    run_dir = os.path.join(work, "run")
    dump_path = os.path.join(work, "dump.safetensors")
    oc.run_zerotune(zerotune, ["train", "--objective", "dpo", "--dpo-beta", BETA, "--dpo-label-smoothing",
                               LABEL_SMOOTHING, "--model", model_dir, "--adapter", adapter_dir, "--data", data_dir,
                               "--eval-data", data_dir, "--eval-every", 1, "--out", run_dir, "--no-shuffle",
                               "--max-steps", 1, "--micro-batch-size", MICRO_BATCH, "--grad-accum", ACCUMULATION,
                               "--lr", 0.0, "--dump-step0", dump_path])
    dump = oc.load_dump(dump_path)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    step = [r for r in records if "loss" in r][0]
    evaluation = [r for r in records if "eval_rewards/accuracies" in r][0]

    model = oc.load_reference_peft(model_dir, adapter_dir)
    losses, logits0 = [], None
    for first in range(0, MICRO_BATCH * ACCUMULATION, MICRO_BATCH):
        part_losses, _, _, _, logits, lengths = pair_terms(model, pairs[first:first + MICRO_BATCH])
        losses.append(part_losses)
        if logits0 is None:
            logits0, lengths0 = logits.detach(), lengths
    loss = torch.cat(losses).mean()  # TRL: losses.mean() over the (global) batch
    loss.backward()
    report.check(abs(float(loss) - 0.6931471805599453) > 1e-3,
                 f"the policy differs from the reference at step 1 (loss {float(loss):.6f} is not log 2)")
    oc.compare_dump_logits(report, dump, logits0, lengths0, "step 1 policy", atol=oc.LOGITS_ATOL)
    oc.compare_dump_loss(report, dump, float(loss), "step 1", rel=oc.LOSS_REL)
    oc.compare_dump_grads(report, dump, oc.trainable_lora_grads(model), "step 1", rel_of_max=oc.GRAD_REL_OF_MAX)
    report.scalar("metrics.jsonl step 1 loss", step["loss"], float(loss), oc.LOSS_REL)

    # The evaluation over every pair (lr 0: the weights are the adapter's), TRL's figures.
    with torch.no_grad():
        terms = [pair_terms(model, pairs[first:first + MICRO_BATCH]) for first in range(0, len(pairs), MICRO_BATCH)]
    check_eval_figures(report, evaluation, terms, pairs, "")
    for name in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
        report.check(name in step, f"metrics.jsonl's step record has {name}")


def check_eval_figures(report, evaluation, terms, pairs, what):
    """An evaluation record against TRL's figures of `terms` (pair_terms per micro-batch)."""
    losses = torch.cat([t[0] for t in terms])
    chosen, rejected = torch.cat([t[1] for t in terms]), torch.cat([t[2] for t in terms])
    chosen_logps = torch.cat([t[3][:len(t[0])] for t in terms])
    rejected_logps = torch.cat([t[3][len(t[0]):] for t in terms])
    report.check(evaluation["eval_pairs"] == len(pairs), f"{what}eval_pairs = {len(pairs)}")
    report.scalar(f"{what}eval_loss", evaluation["eval_loss"], float(losses.mean()), oc.LOSS_REL)
    expected = {"rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),
                "rewards/accuracies": (chosen > rejected).double().mean(),
                "rewards/margins": (chosen - rejected).mean()}
    for name, value in expected.items():
        report.close(f"{what}eval_{name}", evaluation["eval_" + name], float(value), atol=FIGURE_ATOL)
    report.scalar(f"{what}eval_logps/chosen", evaluation["eval_logps/chosen"], float(chosen_logps.mean()), LOGPS_REL)
    report.scalar(f"{what}eval_logps/rejected", evaluation["eval_logps/rejected"], float(rejected_logps.mean()),
                  LOGPS_REL)
    report.check(0.0 < float(expected["rewards/accuracies"]) < 1.0,
                 f"{what}the pairs are ranked both ways (accuracy strictly between 0 and 1)")


FULL_LR = 2.0  # SGD: large enough that step 2's loss is far from log 2


def global_batch_loss(model, ref_model, pairs):
    """TRL's loss over the global batch (ACCUMULATION micro-batches of MICRO_BATCH pairs), its
    backward into model's .grad, and micro-batch 0's (logits, lengths)."""
    losses, first = [], None
    for begin in range(0, MICRO_BATCH * ACCUMULATION, MICRO_BATCH):
        part_losses, _, _, _, logits, lengths = pair_terms(model, pairs[begin:begin + MICRO_BATCH], ref_model)
        losses.append(part_losses)
        first = first or (logits.detach(), lengths)
    loss = torch.cat(losses).mean()
    loss.backward()
    return float(loss), first


def check_full_fine_tuning(report, zerotune, work, model_dir, data_dir, pairs):
    """The reference a frozen copy of the initial weights: two SGD steps against TRL with a
    deep-copied ref_model."""
    run_dir = os.path.join(work, "full")
    dump_path = os.path.join(work, "full-dump.safetensors")
    ds_path = os.path.join(work, "full-sgd.json")
    with open(ds_path, "w") as stream:
        json.dump({"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": ACCUMULATION,
                   "optimizer": {"type": "SGD", "params": {"lr": FULL_LR}}}, stream)
    oc.run_zerotune(zerotune, ["train", "--objective", "dpo", "--dpo-beta", BETA, "--dpo-label-smoothing",
                               LABEL_SMOOTHING, "--model", model_dir, "--data", data_dir, "--eval-data", data_dir,
                               "--eval-every", 1, "--out", run_dir, "--no-shuffle", "--max-steps", 2,
                               "--deepspeed", ds_path, "--dump-step0", dump_path])
    dump = oc.load_dump(dump_path)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    steps = [r for r in records if "loss" in r]
    evaluation = [r for r in records if "eval_rewards/accuracies" in r and r.get("step") == 1][0]

    model = oc.load_reference_llama(model_dir)
    ref_model = copy.deepcopy(model).requires_grad_(False)  # TRL: ref_model = a copy of the policy at the start
    loss, (logits0, lengths0) = global_batch_loss(model, ref_model, pairs)
    report.scalar("full fine-tuning step 1 loss is log 2 (the policy is its reference)", loss, 0.6931471805599453,
                  1e-12)
    oc.compare_dump_logits(report, dump, logits0, lengths0, "full fine-tuning step 1 policy", atol=oc.LOGITS_ATOL)
    oc.compare_dump_loss(report, dump, loss, "full fine-tuning step 1", rel=oc.LOSS_REL)
    oc.compare_dump_grads(report, dump, {name: p.grad for name, p in model.named_parameters()},
                          "full fine-tuning step 1", rel_of_max=oc.GRAD_REL_OF_MAX)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= FULL_LR * parameter.grad
    model.zero_grad(set_to_none=True)
    with torch.no_grad():  # after step 1: the policy moved, the reference did not
        terms = [pair_terms(model, pairs[first:first + MICRO_BATCH], ref_model)
                 for first in range(0, len(pairs), MICRO_BATCH)]
    check_eval_figures(report, evaluation, terms, pairs, "full fine-tuning after step 1: ")
    loss2, _ = global_batch_loss(model, ref_model, pairs)
    report.check(abs(loss2 - 0.6931471805599453) > 1e-2, f"full fine-tuning: step 2's loss {loss2:.6f} is not log 2")
    report.scalar("full fine-tuning metrics.jsonl step 2 loss", steps[1]["loss"], loss2, oc.LOSS_REL)


def check_refusals(report, zerotune, work, model_dir, data_dir):
    samples_dir = os.path.join(work, "samples")
    oc.write_data(samples_dir, oc.make_samples(3, [8, 12], oc.TINY_LLAMA["vocab_size"]), oc.TINY_LLAMA["vocab_size"])
    oc.check_refused(zerotune, report, "--objective dpo on samples",
                     ["train", "--objective", "dpo", "--model", model_dir, "--data", samples_dir, "--lora-r", 4,
                      "--out", os.path.join(work, "samples-run"), "--max-steps", 1], "not preference pairs")
    oc.check_refused(zerotune, report, "--dpo-label-smoothing 0.5",
                     ["train", "--objective", "dpo", "--model", model_dir, "--data", data_dir, "--lora-r", 4,
                      "--dpo-label-smoothing", 0.5, "--out", os.path.join(work, "ls-run"), "--max-steps", 1],
                     "--dpo-label-smoothing = 0.5")
    oc.check_refused(zerotune, report, "--dpo-beta with another objective",
                     ["train", "--model", model_dir, "--data", samples_dir, "--dpo-beta", 0.3,
                      "--out", os.path.join(work, "beta-run"), "--max-steps", 1], "--dpo-beta")


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report("DPO (TRL's sigmoid loss; reference: adapters disabled (LoRA), a frozen copy (full))")
    with oc.temporary_directory(args, "zt-dpo-") as work:
        model_dir = os.path.join(work, "model")
        adapter_dir = os.path.join(work, "adapter")
        oc.make_llama(model_dir, seed=21)
        oc.make_adapter(model_dir, adapter_dir, 23, ["q_proj", "v_proj"], False, 0.0)
        data_dir = os.path.join(work, "pairs")
        write_pairs(os.path.join(data_dir, "train-00000.h5"), seed=7, vocab=oc.TINY_LLAMA["vocab_size"], pairs=PAIRS)
        pairs = read_pairs(os.path.join(data_dir, "train-00000.h5"))
        oc.run_guarded(report, "step and evaluation", check_step, report, args.zerotune, work, model_dir, adapter_dir,
                       data_dir, pairs)
        oc.run_guarded(report, "full fine-tuning", check_full_fine_tuning, report, args.zerotune, work, model_dir,
                       data_dir, pairs)
        oc.run_guarded(report, "refusals", check_refusals, report, args.zerotune, work, model_dir, data_dir)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

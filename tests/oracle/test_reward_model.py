"""Oracle: `zerotune prep --pairs` and `zerotune train --objective reward` (DeepSpeed-Chat step 2)
on a tiny random OPT model with a byte-level BPE tokenizer in OPT's layout (trained here by
make_bpe_tokenizer.py, no download).

1. prep --pairs against a Python transcription of DeepSpeed-Chat's step-2 data
   (create_dataset_split, train_phase 2): chosen = tokenizer(prompt + chosen + "</s>",
   max_length, truncation=True), rejected likewise; the shared prompt = tokenizer(prompt)
   (BOS included); a pair is kept when both sides hold a response token, and the scored tokens
   are the response's (the EOS after them is not: pad = eos in DeepSpeed-Chat's OPT recipe).
   Every pair's ids and masks, and the written / skipped / truncated counts, must agree.
2. The reward objective against a PyTorch transcription of DeepSpeed-Chat's RewardModel.forward
   (written here from its formulas) over HF's OPTModel with the same weights plus a v_head
   stored in the model directory: per pair the first divergence d, the ends c_ind / r_ind
   (DeepSpeed-Chat's rule with pad = eos and num_padding_at_beginning = 1), end = max of them,
   loss = mean over [d, end) of -logsigmoid(r_c - r_r), scores = values at c_ind - 1 / r_ind - 1.
   The model runs on zerotune's batch layout (pad id of the data, padded positions attending
   causally: attention_mask of ones), which is what zerotune computes; the scores are also
   checked against the model with DeepSpeed-Chat's own padding mask (they are at real tokens).
   Checked: step 1's loss and gradient norm (the backward through value head and decoder), and
   the evaluation's accuracy, mean chosen/rejected scores and loss (lr 0: weights unchanged).
3. The exports: --format hf loads in transformers as OPTForSequenceClassification with the same
   scores; --format dschat (DeepSpeed-Chat's layout: pytorch_model.bin of its RewardModel) loads
   with torch.load(weights_only=True) as an OrderedDict holding exactly v_head.weight and
   "rwtranformer." + each of AutoModel's names, into a RewardModel built as its step 3 builds the
   critic (AutoModel.from_config of the exported config.json, strict load), with the same scores;
   its fp16 and bf16 exports hold the fp32 export's values rounded (torch's own conversion).
"""
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402
import make_bpe_tokenizer  # noqa: E402

import h5py  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "data", "rm-static-sample.jsonl")
VOCAB = 400
MAX_SEQ_LEN = 80
ROWS = 24
MICRO_BATCH = 4
EOS = 2  # OPT's </s>: also its BOS and, in DeepSpeed-Chat, its pad
LOSS_REL = 1e-5
SCORE_ATOL = 1e-5
GRAD_NORM_REL = 1e-4


def input_rows(work):
    """ROWS sample rows, plus one whose prompt fills max_seq_len (skipped) and one whose chosen
    is cut (truncated), written as JSONL."""
    with open(SAMPLE, encoding="utf-8") as stream:
        rows = [json.loads(line) for line in stream if line.strip()][:ROWS]
    rows = [{key: row[key] for key in ("prompt", "chosen", "rejected")} for row in rows]
    rows.insert(3, {"prompt": "\n\nHuman: " + "tell me more " * 60 + "\n\nAssistant:",
                    "chosen": " Sure.", "rejected": " No."})
    rows.insert(5, {"prompt": "\n\nHuman: Hi\n\nAssistant:", "chosen": " word" * 200, "rejected": " Hello."})
    path = os.path.join(work, "pairs.jsonl")
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return rows, path


def reference_pairs(tokenizer, rows):
    """DeepSpeed-Chat's step-2 sides per row -> [(prompt, chosen ids/mask, rejected ids/mask)] of
    the kept rows, and the skipped / truncated counts."""
    pairs, skipped, truncated = [], 0, 0
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"][:MAX_SEQ_LEN]  # [BOS] + prompt
        sides, cut = [], False
        for key in ("chosen", "rejected"):
            full = tokenizer(row["prompt"] + row[key] + "</s>")["input_ids"]
            ids = tokenizer(row["prompt"] + row[key] + "</s>", max_length=MAX_SEQ_LEN, truncation=True)["input_ids"]
            cut = cut or len(full) > MAX_SEQ_LEN
            response = ids[len(prompt):]
            mask = [1] * len(response)
            if len(full) <= MAX_SEQ_LEN:  # the EOS survived: not scored
                mask[-1] = 0
            sides.append((ids, [0] * len(prompt) + mask))
        if not any(sides[0][1]) or not any(sides[1][1]):
            skipped += 1
            continue
        truncated += int(cut)
        pairs.append((prompt, sides[0], sides[1]))
    return pairs, skipped, truncated


def read_pair_shards(data_dir):
    """[(prompt ids, (chosen ids, mask), (rejected ids, mask))] from the pair shards."""
    pairs = []
    for name in sorted(os.listdir(data_dir)):
        with h5py.File(os.path.join(data_dir, name), "r") as shard:
            if shard.attrs["version"] != 2 or shard.attrs["record"] != "pair":
                raise oc.OracleError(f"{name}: not a pair shard (version {shard.attrs['version']})")
            tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
            prompts, chosen = shard["prompt_lengths"][:], shard["chosen_lengths"][:]
            for i in range(len(offsets) - 1):
                begin, p, c = int(offsets[i]), int(prompts[i]), int(chosen[i])
                ids, m = [int(t) for t in tokens[begin:offsets[i + 1]]], [int(v) for v in mask[begin:offsets[i + 1]]]
                pairs.append((ids[:p], (ids[:p + c], m[:p + c]), (ids[:p] + ids[p + c:], m[:p] + m[p + c:])))
    return pairs


def summary_count(stdout, label):
    for line in stdout.splitlines():
        if line.strip().startswith(label):
            return int(line.split()[len(label.split())])
    raise oc.OracleError(f"prep's summary has no line {label!r}:\n{stdout}")


def check_prep(zerotune, report, work, model_dir, tokenizer):
    rows, input_path = input_rows(work)
    data_dir = os.path.join(work, "pairs")
    result = oc.run_zerotune(zerotune, ["prep", "--pairs", "--input", input_path, "--tokenizer", model_dir,
                                        "--out", data_dir, "--max-seq-len", MAX_SEQ_LEN, "--shard-samples", 10])
    expected, skipped, truncated = reference_pairs(tokenizer, rows)
    report.check(skipped >= 1 and truncated >= 1, f"the reference has skipped ({skipped}) and truncated "
                 f"({truncated}) rows (the test exercises both rules)")
    report.check(summary_count(result.stdout, "pairs written") == len(expected),
                 f"prep: pairs written = {len(expected)}")
    report.check(summary_count(result.stdout, "skipped") == skipped, f"prep: skipped = {skipped}")
    report.check(summary_count(result.stdout, "truncated") == truncated, f"prep: truncated = {truncated}")
    got = read_pair_shards(data_dir)
    report.check(len(got) == len(expected), f"prep: {len(got)} pairs in the shards, reference {len(expected)}")
    mismatched = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    report.check(not mismatched, f"prep: every pair's prompt, ids and masks equal the reference's"
                 + (f" (first mismatch: pair {mismatched[0]}: {got[mismatched[0]]} vs "
                    f"{expected[mismatched[0]]})" if mismatched else ""))
    # Bad inputs: rows without the rejected column, pairs trained with the sft objective.
    no_rejected = os.path.join(work, "no-rejected.jsonl")
    with open(no_rejected, "w", encoding="utf-8") as out:
        out.write(json.dumps({"prompt": "Hi", "chosen": " Hello"}) + "\n")
    oc.check_refused(zerotune, report, "prep --pairs without a rejected column",
                     ["prep", "--pairs", "--input", no_rejected, "--tokenizer", model_dir, "--out",
                      os.path.join(work, "bad")], "missing column 'rejected'")
    oc.check_refused(zerotune, report, "train --objective sft on pairs",
                     ["train", "--model", model_dir, "--data", data_dir, "--out", os.path.join(work, "bad-run"),
                      "--max-steps", "1"], "holds preference pairs")
    inspect = oc.run_zerotune(zerotune, ["inspect", data_dir, "--sample", 1])
    report.check("chosen" in inspect.stdout and "rejected" in inspect.stdout,
                 "inspect shows a pair's chosen and rejected sides")
    return data_dir, expected


def make_reward_model(model_dir, vocab_size):
    """A tiny random OPT (the family row's settings) with a random v_head.weight [1, hidden] added
    to its model.safetensors, as DeepSpeed-Chat saves a reward model."""
    config_class, model_class, settings = oc.family_case("opt", vocab_size=vocab_size,
                                                         max_position_embeddings=MAX_SEQ_LEN + 8)
    oc.make_family_model(model_dir, 7, config_class, model_class, settings)
    path = os.path.join(model_dir, "model.safetensors")
    tensors = safetensors.torch.load_file(path)
    torch.manual_seed(11)
    tensors["v_head.weight"] = 0.5 * torch.randn(1, settings["hidden_size"], dtype=torch.float32)
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    return tensors["v_head.weight"].to(torch.float64)


def ds_chat_end(ids, pad, num_padding_at_beginning, seq_len):
    """DeepSpeed-Chat's c_ind: the index of the first pad after num_padding_at_beginning of them."""
    found = (ids == pad).nonzero()
    return int(found[num_padding_at_beginning]) if len(found) > num_padding_at_beginning else seq_len


def reward_model_forward(values, ids, pairs):
    """DeepSpeed-Chat's RewardModel.forward after the v_head, from its formulas: values [2P, T],
    ids [2P, T] padded with pad = eos (rows [0, P) chosen). Returns (loss, chosen, rejected)."""
    seq_len = ids.shape[1]
    loss, chosen_scores, rejected_scores = 0.0, [], []
    for i in range(pairs):
        chosen_ids, rejected_ids = ids[i], ids[pairs + i]
        c_ind = ds_chat_end(chosen_ids, EOS, 1, seq_len)
        divergence = (chosen_ids != rejected_ids).nonzero()
        if len(divergence) == 0:
            end_ind, divergence_ind, r_ind = seq_len, seq_len - 1, c_ind
        else:
            r_ind = ds_chat_end(rejected_ids, EOS, 1, seq_len)
            end_ind, divergence_ind = max(c_ind, r_ind), int(divergence[0])
        assert divergence_ind > 0
        c_truncated = values[i][divergence_ind:end_ind]
        r_truncated = values[pairs + i][divergence_ind:end_ind]
        chosen_scores.append(values[i][c_ind - 1])
        rejected_scores.append(values[pairs + i][r_ind - 1])
        loss = loss + (-F.logsigmoid(c_truncated - r_truncated).mean())
    return loss / pairs, torch.stack(chosen_scores), torch.stack(rejected_scores)


def reference_batch(model, v_head, pairs, data_pad, padding_mask=False):
    """Values [2P, T] of the pairs on zerotune's layout (rows padded with the data's pad id,
    attention_mask of ones; or DeepSpeed-Chat's padding mask), and the rows padded with EOS."""
    rows = [side[0] for _, side, _ in pairs] + [side[0] for _, _, side in pairs]
    longest = max(len(row) for row in rows)
    input_ids = torch.tensor([row + [data_pad] * (longest - len(row)) for row in rows])
    eos_padded = torch.tensor([row + [EOS] * (longest - len(row)) for row in rows])
    attention = torch.tensor([[1] * len(row) + [0 if padding_mask else 1] * (longest - len(row)) for row in rows])
    hidden = model(input_ids=input_ids, attention_mask=attention).last_hidden_state  # [2P, T, E]
    return (hidden @ v_head.T).squeeze(-1), eos_padded


def check_reward_training(zerotune, report, work, model_dir, data_dir, pairs, v_head, data_pad):
    out = os.path.join(work, "run")
    oc.run_zerotune(zerotune, ["train", "--objective", "reward", "--model", model_dir, "--data", data_dir,
                               "--eval-data", data_dir, "--eval-every", 1, "--out", out, "--no-shuffle",
                               "--max-steps", 1, "--micro-batch-size", MICRO_BATCH, "--grad-accum", 2,
                               "--lr", 0.0])
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    step = [r for r in records if "loss" in r][0]
    evaluation = [r for r in records if "eval_reward_accuracy" in r][0]
    model = oc.load_reference_family(model_dir, "OPTModel")
    # The padded positions feed the loss here (the shorter side's values up to the longer side's
    # end), so their pad token's embedding row gets a gradient, as in zerotune and in DeepSpeed-
    # Chat (whose pad, OPT's EOS, is not the embedding's padding_idx); the data's pad id here
    # happens to be the config's padding_idx, whose row nn.Embedding would keep at 0.
    model.decoder.embed_tokens.padding_idx = None
    v_head = v_head.clone().requires_grad_(True)

    # Step 1: the global batch = the first 2 * MICRO_BATCH pairs, the loss their mean.
    batch = pairs[:2 * MICRO_BATCH]
    losses = []
    for first in range(0, len(batch), MICRO_BATCH):
        values, eos_padded = reference_batch(model, v_head, batch[first:first + MICRO_BATCH], data_pad)
        losses.append(reward_model_forward(values, eos_padded, MICRO_BATCH)[0])
    loss = sum(losses) / len(losses)
    loss.backward()
    grads = [p.grad for p in list(model.parameters()) + [v_head] if p.grad is not None]
    grad_norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    report.scalar("step 1 loss", step["loss"], float(loss), LOSS_REL)
    report.scalar("step 1 grad_norm (value head + decoder backward)", step["grad_norm"], grad_norm, GRAD_NORM_REL)

    # Evaluation over every pair (weights unchanged at lr 0), micro-batches of MICRO_BATCH.
    with torch.no_grad():
        loss_sum, chosen, rejected, chosen_masked, rejected_masked = 0.0, [], [], [], []
        for first in range(0, len(pairs), MICRO_BATCH):
            part = pairs[first:first + MICRO_BATCH]
            values, eos_padded = reference_batch(model, v_head, part, data_pad)
            pair_loss, c, r = reward_model_forward(values, eos_padded, len(part))
            loss_sum += float(pair_loss) * len(part)
            chosen.append(c)
            rejected.append(r)
            masked_values, _ = reference_batch(model, v_head, part, data_pad, padding_mask=True)
            _, c, r = reward_model_forward(masked_values, eos_padded, len(part))
            chosen_masked.append(c)
            rejected_masked.append(r)
    chosen, rejected = torch.cat(chosen), torch.cat(rejected)
    report.close("scores: zerotune's layout vs DeepSpeed-Chat's padding mask (same: real positions)",
                 torch.cat(chosen_masked), chosen, atol=1e-9)
    report.close("rejected scores: likewise", torch.cat(rejected_masked), rejected, atol=1e-9)
    report.check(evaluation["eval_pairs"] == len(pairs), f"eval_pairs = {len(pairs)}")
    report.scalar("eval_reward_accuracy", evaluation["eval_reward_accuracy"],
                  float((chosen > rejected).double().mean()), 1e-12)
    report.close("eval_chosen_score", evaluation["eval_chosen_score"], float(chosen.mean()), atol=SCORE_ATOL)
    report.close("eval_rejected_score", evaluation["eval_rejected_score"], float(rejected.mean()), atol=SCORE_ATOL)
    report.scalar("eval_loss", evaluation["eval_loss"], loss_sum / len(pairs), LOSS_REL)
    report.check(len({c > r for c, r in zip(chosen.tolist(), rejected.tolist())}) == 2,
                 "the pairs are scored both ways (accuracy strictly between 0 and 1)")


def check_export(zerotune, report, work, model_dir, data_dir, pairs):
    """2 steps at lr 1e-2, evaluated after the last; the checkpoint exported with --format hf must
    load in transformers as OPTForSequenceClassification (score.weight = v_head) and give the
    same scores: each side fed alone, up to its last scored token (the EOS after it left out)."""
    out = os.path.join(work, "trained")
    oc.run_zerotune(zerotune, ["train", "--objective", "reward", "--model", model_dir, "--data", data_dir,
                               "--eval-data", data_dir, "--eval-every", 2, "--out", out, "--no-shuffle",
                               "--max-steps", 2, "--micro-batch-size", MICRO_BATCH, "--lr", 1e-2])
    evaluation = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))
                  if "eval_reward_accuracy" in line][-1]
    exported = os.path.join(work, "exported")
    oc.run_export(zerotune, os.path.join(out, "checkpoints", "global_step2"), model_dir, exported, "--format", "hf")
    torch.set_default_dtype(torch.float64)
    model, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
        exported, torch_dtype=torch.float64, attn_implementation="eager", output_loading_info=True)
    report.check(not loading["missing_keys"] and not loading["unexpected_keys"],
                 f"the export holds exactly the model's weights (missing {loading['missing_keys']}, "
                 f"unexpected {loading['unexpected_keys']})")
    report.check(type(model).__name__ == "OPTForSequenceClassification" and model.config.num_labels == 1,
                 f"transformers loads the export as {type(model).__name__} with num_labels {model.config.num_labels}")
    chosen, rejected = [], []
    with torch.no_grad():
        for _, (c_ids, c_mask), (r_ids, r_mask) in pairs:
            for ids, mask, scores in ((c_ids, c_mask, chosen), (r_ids, r_mask, rejected)):
                end = max(i for i, m in enumerate(mask) if m) + 1  # one past the last scored token
                scores.append(float(model(input_ids=torch.tensor([ids[:end]])).logits[0, 0]))
    chosen, rejected = torch.tensor(chosen), torch.tensor(rejected)
    report.close("export: transformers' mean chosen score = zerotune's eval_chosen_score",
                 evaluation["eval_chosen_score"], float(chosen.mean()), atol=SCORE_ATOL)
    report.close("export: mean rejected score", evaluation["eval_rejected_score"], float(rejected.mean()),
                 atol=SCORE_ATOL)
    report.scalar("export: accuracy", evaluation["eval_reward_accuracy"], float((chosen > rejected).double().mean()),
                  1e-12)
    checkpoint = os.path.join(out, "checkpoints", "global_step2")
    check_deepspeed_chat_export(zerotune, report, work, checkpoint, model_dir, pairs, chosen, rejected)


class RewardModelWeights(torch.nn.Module):
    """The parameters of DeepSpeed-Chat's RewardModel: the base AutoModel as `rwtranformer` (its
    attribute's spelling) and v_head = Linear(hidden, 1, bias=False)."""

    def __init__(self, base, hidden):
        super().__init__()
        self.rwtranformer = base
        self.v_head = torch.nn.Linear(hidden, 1, bias=False)

    def score(self, ids):
        """The value at the last position of one unpadded sequence."""
        hidden = self.rwtranformer(input_ids=torch.tensor([ids])).last_hidden_state  # [1, T, E]
        return float(self.v_head(hidden)[0, -1, 0])


def check_deepspeed_chat_export(zerotune, report, work, checkpoint, model_dir, pairs, chosen, rejected):
    exported = {}
    for dtype in ("fp32", "fp16", "bf16"):
        exported[dtype] = os.path.join(work, f"dschat-{dtype}")
        oc.run_export(zerotune, checkpoint, model_dir, exported[dtype], "--format", "dschat", "--dtype", dtype)
    state = torch.load(os.path.join(exported["fp32"], "pytorch_model.bin"), map_location="cpu", weights_only=True)
    config = transformers.AutoConfig.from_pretrained(exported["fp32"])
    base = transformers.AutoModel.from_config(config, torch_dtype=torch.float64)
    expected = {"v_head.weight"} | {"rwtranformer." + name for name in base.state_dict()}
    report.check(type(state).__name__ == "OrderedDict" and set(state) == expected,
                 f"dschat: pytorch_model.bin is an OrderedDict of v_head.weight and rwtranformer.* (missing "
                 f"{sorted(expected - set(state))[:4]}, unexpected {sorted(set(state) - expected)[:4]})")
    report.check(all(t.dtype == torch.float32 for t in state.values()), "dschat --dtype fp32: float32 tensors")
    with zipfile.ZipFile(os.path.join(exported["fp32"], "pytorch_model.bin")) as archive:
        bad = archive.testzip()  # every entry's CRC-32
        names = archive.namelist()
        starts = {info.filename: info.header_offset for info in archive.infolist()}
    with open(os.path.join(exported["fp32"], "pytorch_model.bin"), "rb") as stream:
        raw = stream.read()
    misaligned = []
    for name, header in starts.items():  # data = header + 30 + name + the local extra field
        extra = int.from_bytes(raw[header + 28:header + 30], "little")
        if (header + 30 + len(name) + extra) % 64:
            misaligned.append(name)
    report.check(bad is None and names[0] == "pytorch_model/data.pkl" and not misaligned,
                 f"dschat: a valid zip (first bad CRC {bad}), torch.save's records ({names[:3]}...), "
                 f"data 64-byte aligned (misaligned {misaligned})")
    model = RewardModelWeights(base, config.word_embed_proj_dim).double()
    model.load_state_dict({name: tensor.double() for name, tensor in state.items()}, strict=True)
    model.eval()
    dschat_chosen, dschat_rejected = [], []
    with torch.no_grad():
        for _, (c_ids, c_mask), (r_ids, r_mask) in pairs:
            for ids, mask, scores in ((c_ids, c_mask, dschat_chosen), (r_ids, r_mask, dschat_rejected)):
                end = max(i for i, m in enumerate(mask) if m) + 1
                scores.append(model.score(ids[:end]))
    worst = max(float((torch.tensor(dschat_chosen) - chosen).abs().max()),
                float((torch.tensor(dschat_rejected) - rejected).abs().max()))
    report.check(worst <= SCORE_ATOL, f"dschat: RewardModel's scores = the HF export's (worst {worst:.2e})")
    for dtype, torch_dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        narrow = torch.load(os.path.join(exported[dtype], "pytorch_model.bin"), map_location="cpu", weights_only=True)
        same = set(narrow) == set(state) and all(
            narrow[k].dtype == torch_dtype and torch.equal(narrow[k], state[k].to(torch_dtype)) for k in state)
        report.check(same, f"dschat --dtype {dtype}: the fp32 export's tensors rounded to {torch_dtype}")


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report("reward model (DeepSpeed-Chat step 2): prep --pairs and --objective reward")
    with oc.temporary_directory(args, "zt-reward-") as work:
        model_dir = os.path.join(work, "model")
        make_bpe_tokenizer.write_tokenizer("opt", model_dir, vocab_size=VOCAB, files="tokenizer.json")
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
        v_head = make_reward_model(model_dir, len(tokenizer))
        data_dir, pairs = check_prep(zerotune=args.zerotune, report=report, work=work, model_dir=model_dir,
                                     tokenizer=tokenizer)
        with h5py.File(os.path.join(data_dir, "train-00000.h5"), "r") as shard:
            data_pad = int(shard.attrs["pad_id"])  # what zerotune pads its batches with
        oc.run_guarded(report, "training", check_reward_training, args.zerotune, report, work, model_dir, data_dir,
                       pairs, v_head, data_pad)
        oc.run_guarded(report, "export", check_export, args.zerotune, report, work, model_dir, data_dir, pairs)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

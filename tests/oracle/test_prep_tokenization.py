"""Oracle: `zerotune prep` against HF transformers' LlamaTokenizer (the slow, SentencePiece one,
legacy behaviour as in 4.40) built from the same tokenizer.model, which spm_train trains here on
data/rm-static-sample.jsonl (LLaMA's layout: unk 0, bos 1, eos 2, BPE, byte fallback).

The documented rule (src/data/prep.h): sample = [BOS] + encode(prompt) + encode_continuation(
response) + [EOS], cut to --max-seq-len; loss_mask 0 on BOS and prompt, 1 on response and EOS
(--loss-on all: 1 after BOS). HF side of it: the prompt ids are tokenizer(prompt,
add_special_tokens=False), and the response ids are what tokenizer(prompt + response) holds after
BOS and the prompt (rm-static responses start with a space, so HF does not merge across the
boundary: checked). A response with no leading space must keep its text exactly (no dummy-prefix
space). Finally a prepped dataset trains: `zerotune init` + `zerotune train --max-steps 2`.
"""
import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402 (exits with a clear message when a package is missing)

try:
    import h5py  # noqa: E402
    import sentencepiece  # noqa: F401,E402 (LlamaTokenizer needs it)
except ImportError as error:
    print(f"oracle: missing Python package: {error} (LlamaTokenizer needs sentencepiece; "
          f"run scripts/setup.sh)", file=sys.stderr)
    sys.exit(1)
import transformers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "data", "rm-static-sample.jsonl")
TINY_CONFIG = os.path.join(REPO, "data", "tiny-llama", "config.json")
VOCAB = 400


def read_rows(path):
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def train_tokenizer(work):
    """spm_train (Debian's sentencepiece) on the sample's texts -> work/model/tokenizer.model."""
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as out:
        for row in read_rows(SAMPLE):
            out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
    model_dir = os.path.join(work, "model")
    os.makedirs(model_dir)
    spm_train = shutil.which("spm_train")
    if spm_train is None:
        raise oc.OracleError("spm_train not found (Debian package sentencepiece)")
    subprocess.run([spm_train, f"--input={corpus}", f"--model_prefix={model_dir}/tokenizer",
                    f"--vocab_size={VOCAB}", "--model_type=bpe", "--byte_fallback=true",
                    "--split_digits=true", "--normalization_rule_name=identity",
                    "--remove_extra_whitespaces=false", "--add_dummy_prefix=true",
                    "--allow_whitespace_only_pieces=true", "--unk_id=0", "--bos_id=1", "--eos_id=2",
                    "--pad_id=-1", "--minloglevel=2"], check=True, capture_output=True)
    return model_dir


def read_shards(data_dir, split="train"):
    """[(tokens, mask)] over the split's shards in name order, and the first shard's attrs."""
    paths = sorted(glob.glob(os.path.join(data_dir, f"{split}-*.h5")))
    samples, attrs = [], None
    for path in paths:
        with h5py.File(path, "r") as shard:
            tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
            attrs = attrs or {key: shard.attrs[key] for key in shard.attrs}
            for i in range(len(offsets) - 1):
                samples.append(([int(t) for t in tokens[offsets[i]:offsets[i + 1]]],
                                [int(m) for m in mask[offsets[i]:offsets[i + 1]]]))
    return samples, attrs, paths


def hf_reference(tokenizer, prompt, response, report, label):
    """HF's prompt ids and response ids (the response as it continues the prompt)."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    full = tokenizer(prompt + response).input_ids
    report.check(full[:1 + len(prompt_ids)] == [tokenizer.bos_token_id] + prompt_ids,
                 f"{label}: HF's tokenizer(prompt + response) starts with BOS + tokenizer(prompt)")
    return prompt_ids, full[1 + len(prompt_ids):]


def check_prep(zerotune, report, work, tokenizer, model_dir):
    rows = read_rows(SAMPLE)
    data = os.path.join(work, "data-full")
    result = oc.run_zerotune(zerotune, ["prep", "--input", SAMPLE, "--tokenizer", model_dir,
                                        "--out", data, "--max-seq-len", 4096, "--shard-samples", 80])
    print(result.stdout)
    report.check(f"rows read         {len(rows)}\n" in result.stdout
                 and f"samples written   {len(rows)}\n" in result.stdout,
                 f"the summary reports {len(rows)} rows read and {len(rows)} samples written")
    samples, attrs, paths = read_shards(data)
    report.check([os.path.basename(p) for p in paths] ==
                 [f"train-0000{i}.h5" for i in range((len(rows) + 79) // 80)],
                 f"shards of 80 samples: {paths}")
    with open(os.path.join(model_dir, "tokenizer.model"), "rb") as stream:
        digest = hashlib.sha256(stream.read()).hexdigest()
    expected_attrs = dict(vocab_size=tokenizer.vocab_size, bos_id=tokenizer.bos_token_id,
                          eos_id=tokenizer.eos_token_id, pad_id=tokenizer.unk_token_id,
                          max_seq_len=4096, split="train", source="rm-static-sample.jsonl",
                          tokenizer_sha256=digest, format="zerotune-tokens", version=1)
    for key, value in expected_attrs.items():
        got = attrs.get(key)
        got = got.decode() if isinstance(got, bytes) else got
        got = got.item() if hasattr(got, "item") else got
        report.check(got == value, f"attribute {key} = {got!r} (expected {value!r})")
    if not report.check(len(samples) == len(rows), f"{len(samples)} samples for {len(rows)} rows"):
        return

    expected_full = []
    for index, (row, (tokens, mask)) in enumerate(zip(rows, samples)):
        label = f"row {index + 1}"
        prompt_ids, response_ids = hf_reference(tokenizer, row["prompt"], row["chosen"], report, label)
        ids = [tokenizer.bos_token_id] + prompt_ids + response_ids + [tokenizer.eos_token_id]
        expected_full.append((ids, len(prompt_ids)))
        report.check(tokens == ids, f"{label}: ids == BOS + HF prompt ids ({len(prompt_ids)}) + HF "
                     f"response ids ({len(response_ids)}) + EOS")
        report.check(mask == [0] * (1 + len(prompt_ids)) + [1] * (len(response_ids) + 1),
                     f"{label}: loss_mask 0 on BOS + prompt, 1 on response + EOS")

    # --loss-on all with truncation: the first 48 ids, mask 1 everywhere after BOS.
    data_all = os.path.join(work, "data-all")
    oc.run_zerotune(zerotune, ["prep", "--input", SAMPLE, "--tokenizer", model_dir, "--out", data_all,
                               "--max-seq-len", 48, "--loss-on", "all"])
    cut_samples, cut_attrs, _ = read_shards(data_all)
    report.check(int(cut_attrs["max_seq_len"]) == 48, "--max-seq-len 48 recorded")
    ok = len(cut_samples) == len(rows)
    for (ids, _), (tokens, mask) in zip(expected_full, cut_samples):
        ok = ok and tokens == ids[:48] and mask == [0] + [1] * (min(len(ids), 48) - 1)
    report.check(ok, "--loss-on all --max-seq-len 48: ids are the reference cut to 48, mask 1 after BOS")

    # A response without a leading space: the boundary stays exact and no space is invented.
    odd_rows = os.path.join(work, "no-space.jsonl")
    prompt, response = "\n\nHuman: Say something.\n\nAssistant:", "Sure thing, 12 apples."
    with open(odd_rows, "w", encoding="utf-8") as out:
        out.write(json.dumps({"prompt": prompt, "chosen": response}) + "\n")
    data_odd = os.path.join(work, "data-no-space")
    oc.run_zerotune(zerotune, ["prep", "--input", odd_rows, "--tokenizer", model_dir, "--out", data_odd])
    (tokens, mask), = read_shards(data_odd)[0]
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    report.check(tokens[:1 + len(prompt_ids)] == [tokenizer.bos_token_id] + prompt_ids,
                 "no-space response: the prompt ids are HF's")
    response_ids = tokens[1 + len(prompt_ids):-1]
    text = "".join(tokenizer.convert_ids_to_tokens(response_ids)).replace("\u2581", " ")
    report.check(text == response, f"no-space response: its pieces spell {text!r} exactly "
                 f"(no dummy-prefix space)")
    report.check(sum(mask) == len(response_ids) + 1, "no-space response: targets = response + EOS")


def check_trains(zerotune, report, work, model_dir):
    data = os.path.join(work, "data-train")
    oc.run_zerotune(zerotune, ["prep", "--input", SAMPLE, "--tokenizer", model_dir, "--out", data,
                               "--max-seq-len", 128])
    with open(TINY_CONFIG) as stream:
        config = json.load(stream)
    config["vocab_size"] = VOCAB
    config_path = os.path.join(work, "config.json")
    with open(config_path, "w") as stream:
        json.dump(config, stream)
    model = os.path.join(work, "tiny-model")
    oc.run_zerotune(zerotune, ["init", "--config", config_path, "--out", model, "--seed", 1])
    shutil.copy(os.path.join(model_dir, "tokenizer.model"), model)
    out = os.path.join(work, "run")
    oc.run_zerotune(zerotune, ["train", "--model", model, "--data", data, "--out", out,
                               "--max-steps", 2, "--micro-batch-size", 2, "--grad-accum", 1])
    records = oc.read_metrics(out)
    report.check(len(records) == 2 and all(math.isfinite(r["loss"]) for r in records),
                 f"zerotune train --max-steps 2 on the prepped data: 2 steps with finite loss "
                 f"({[round(r['loss'], 4) for r in records]})")


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report(f"prep tokenization vs transformers {transformers.__version__} "
                       f"LlamaTokenizer (legacy)")
    with oc.temporary_directory(args, "zt-prep-") as work:
        model_dir = train_tokenizer(work)
        tokenizer = transformers.LlamaTokenizer(vocab_file=os.path.join(model_dir, "tokenizer.model"),
                                                legacy=True)
        report.check(tokenizer.vocab_size == VOCAB, f"HF sees {tokenizer.vocab_size} tokens")
        oc.run_guarded(report, "prep vs HF", check_prep, args.zerotune, report, work, tokenizer, model_dir)
        oc.run_guarded(report, "prep -> train", check_trains, args.zerotune, report, work, model_dir)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

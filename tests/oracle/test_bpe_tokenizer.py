"""Oracle: zerotune's byte-level BPE tokenizers (src/data/bpe_tokenizer.h, tokenizer_json.h,
gpt2_vocab_files.h) against HF tokenizers 0.19 / transformers 4.40 (PreTrainedTokenizerFast), on
small tokenizers trained here by tests/oracle/make_bpe_tokenizer.py (no download):
  opt-json    OPT layout as tokenizer.json (ByteLevel, BOS </s> from TemplateProcessing)
  opt-vocab   the same as vocab.json + merges.txt + OPT's tokenizer_config.json (transformers
              converts it through GPT2Tokenizer)
  opt-pairs   opt-json with its merges written as ["a", "b"] pairs (tokenizers 0.20's form;
              0.19 cannot read it, so opt-json's HF tokenizer is the reference)
  roberta     ByteLevel(add_prefix_space) + RobertaProcessing (<s> before, </s> after)
  llama3      Split(Llama-3 regex) + ByteLevel(use_regex=false), ignore_merges, <|begin_of_text|>
  qwen2       NFC, Split(Qwen2 regex), no BOS, added tokens with lstrip/rstrip/single_word/normalized
Everything goes through `zerotune prep` and the shards it writes, and `zerotune inspect`:
  - a corpus of hard text (accents, decomposed accents, CJK, Cyrillic, Greek, Arabic, Devanagari,
    Thai, emoji with ZWJ sequences and modifiers, digits and long numbers, runs of spaces, tabs
    and newlines, trailing spaces, contractions, special-token strings inside text) as prompts
    and as responses: sample = [BOS] + HF(prompt) + HF_continuation(response) + [EOS] with the
    mask 0 on BOS + prompt (HF_continuation: HF without add_prefix_space);
  - every row of data/rm-static-sample.jsonl (chosen and rejected): ids == HF's
    tokenizer(prompt + response) framed by BOS/EOS, i.e. DeepSpeed-Chat's step-1 sample
    tokenizer(prompt + chosen + eos_token); with --eot-token '<|endoftext|>' the pre-Sep-2024
    DeepSpeed-Chat sample tokenizer(prompt + chosen + "<|endoftext|>"); --loss-on all and
    truncation;
  - the shard attributes (vocab size, BOS/EOS/pad ids, tokenizer sha256);
  - inspect --json decodes a sample (CJK and emoji) to HF's decode of the same ids.
"""
import glob
import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402 (exits with a clear message when a package is missing)

try:
    import h5py  # noqa: E402
    import tokenizers  # noqa: E402
    from tokenizers import pre_tokenizers  # noqa: E402
    import transformers  # noqa: E402
except ImportError as error:
    print(f"oracle: missing Python package: {error} (run scripts/setup.sh)", file=sys.stderr)
    sys.exit(1)
import make_bpe_tokenizer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "data", "rm-static-sample.jsonl")
CJK_TEXT = "日本語のテキストです。中文字符测试，你好世界 🇯🇵 👨‍👩‍👧‍👦"

CORPUS = [
    "Hello world",
    "  leading spaces and trailing spaces   ",
    "tabs\tand\t\tmore tabs\t",
    "new\nlines\n\n\nmany\n",
    "windows\r\nline\r\n\r\nends",
    "mixed \t \n whitespace  \n \t",
    "     ",
    "\n",
    "I'm sure you'll see they've said it's 'quoted' and WE'LL SHOUT, DON'T we? O'Neil's",
    "Numbers: 1234567890 12 123 1234 12345 3.14159 1,000,000 and 2024-05-01",
    "a long number 98765432109876543210987654321 and x2y3z4",
    "Café déjà vu, naïve façade, Ångström, crème brûlée",
    "decomposed cafe\u0301 and nai\u0308ve (NFC composes them)",
    CJK_TEXT,
    "Привет, как дела? Ёжик в тумане.",
    "Καλημέρα κόσμε. مرحبا بالعالم. नमस्ते दुनिया. สวัสดีครับ",
    "I love 🍕 and 🚀!! family 👨‍👩‍👧‍👦 coder 👩🏽‍💻 flags 🇫🇷🇯🇵 thumbs 👍🏿 keycap 1️⃣",
    "<html><body class=\"x\">x &amp; y</body></html>",
    "a+b=c; f(x) = x^2 // comment /* block */ #hash @at $dollar %percent",
    "€100 £50 ¥30 «guillemets» „quotes“ ‘single’ — dash … ellipsis",
    "math ∑∫√∞≈≠ and arrows →⇒↔",
    "before</s>after and <s>x<pad>y<unk>",
    "x <|endoftext|> y<|endoftext|>z",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|>inside<|end_of_text|> and <|eot_id|>",
    "the <mask> token, a   <mask>b and <mask>",
    "[R]   after, [R]x and x[R]\n\nnext",
    "qword alone, aqword glued, qword_under, x qword9, (qword)",
    "café as a token, cafe\u0301 decomposed, CAFÉ upper",
    "zerotune zerotune, Zerotune",
    "\u00a0nbsp\u00a0here zero\u200bwidth soft\u00adhyphen \u2028line sep \u3000ideographic space",
    "control \x07 bell \x1b[0m escape \x00 nul",
    "trailing newline and spaces  \n  ",
]


def read_rows(path):
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def write_rows(path, rows):
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_shards(data_dir):
    """[(tokens, mask)] over the train split's shards, and the first shard's attributes."""
    samples, attrs = [], None
    for path in sorted(glob.glob(os.path.join(data_dir, "train-*.h5"))):
        with h5py.File(path, "r") as shard:
            tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
            if attrs is None:
                attrs = {}
                for key in shard.attrs:
                    value = shard.attrs[key]
                    value = value.decode() if isinstance(value, bytes) else value
                    attrs[key] = value.item() if hasattr(value, "item") else value
            for i in range(len(offsets) - 1):
                samples.append(([int(t) for t in tokens[offsets[i]:offsets[i + 1]]],
                                [int(m) for m in mask[offsets[i]:offsets[i + 1]]]))
    return samples, attrs


class Style:
    """One tokenizer directory and its HF references."""

    def __init__(self, name, directory, hf, continuation, sha256):
        self.name, self.dir, self.hf = name, directory, hf
        self.continuation = continuation  # text -> HF ids without add_prefix_space's space
        self.sha256 = sha256
        framed, bare = hf("x").input_ids, hf("x", add_special_tokens=False).input_ids
        self.bos = framed[0] if len(framed) > len(bare) and framed[1:1 + len(bare)] == bare else None
        self.eos = hf.eos_token_id
        # Does HF's post-processor put EOS after a text (RobertaProcessing)? Then DeepSpeed-Chat's
        # tokenizer(text + eos_token) would end with two.
        self.post_processor_eos = framed[-1] == self.eos and bare[-1:] != [self.eos]

    def encode(self, text):
        return self.hf(text, add_special_tokens=False).input_ids

    def frame(self, ids):
        return ([self.bos] if self.bos is not None else []) + ids + [self.eos]


def sha256_of(*paths):
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as stream:
            digest.update(stream.read())
    return digest.hexdigest()


def make_styles(work):
    """Writes every tokenizer directory and returns its Style."""
    dirs = {name: os.path.join(work, name) for name in ("opt-json", "opt-vocab", "opt-pairs", "roberta", "llama3", "qwen2")}
    make_bpe_tokenizer.write_tokenizer("opt", dirs["opt-json"], files="tokenizer.json")
    make_bpe_tokenizer.write_tokenizer("opt", dirs["opt-vocab"], files="vocab.json")
    shutil.copytree(dirs["opt-json"], dirs["opt-pairs"])
    pairs_path = os.path.join(dirs["opt-pairs"], "tokenizer.json")
    with open(pairs_path, encoding="utf-8") as stream:
        document = json.load(stream)
    document["model"]["merges"] = [merge.split(" ") for merge in document["model"]["merges"]]
    with open(pairs_path, "w", encoding="utf-8") as stream:
        json.dump(document, stream, ensure_ascii=False)
    for name in ("roberta", "llama3", "qwen2"):
        make_bpe_tokenizer.write_tokenizer(name, dirs[name])

    def auto(name):
        return transformers.AutoTokenizer.from_pretrained(dirs[name])

    def plain(hf):
        return lambda text: hf(text, add_special_tokens=False).input_ids

    styles = []
    opt = auto("opt-json")
    styles.append(Style("opt-json", dirs["opt-json"], opt, plain(opt), sha256_of(os.path.join(dirs["opt-json"], "tokenizer.json"))))
    opt_vocab = auto("opt-vocab")
    styles.append(Style("opt-vocab", dirs["opt-vocab"], opt_vocab, plain(opt_vocab),
                        sha256_of(os.path.join(dirs["opt-vocab"], "vocab.json"), os.path.join(dirs["opt-vocab"], "merges.txt"))))
    styles.append(Style("opt-pairs", dirs["opt-pairs"], opt, plain(opt), sha256_of(pairs_path)))
    roberta = auto("roberta")
    no_prefix = tokenizers.Tokenizer.from_file(os.path.join(dirs["roberta"], "tokenizer.json"))
    no_prefix.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)

    def roberta_continuation(text):
        """HF's ids of `text` inside a longer text: no prefix space before its first piece, and
        add_prefix_space's space again after each added token (tokenizers adds it to every piece
        between added tokens)."""
        found = [text.find(token) for token in roberta.get_added_vocab() if token in text]
        cut = min(found) if found else len(text)
        return (no_prefix.encode(text[:cut], add_special_tokens=False).ids
                + roberta(text[cut:], add_special_tokens=False).input_ids)
    styles.append(Style("roberta", dirs["roberta"], roberta, roberta_continuation,
                        sha256_of(os.path.join(dirs["roberta"], "tokenizer.json"))))
    for name in ("llama3", "qwen2"):
        hf = auto(name)
        styles.append(Style(name, dirs[name], hf, plain(hf), sha256_of(os.path.join(dirs[name], "tokenizer.json"))))
    return styles


def check_hf_agrees(report, style):
    """The two HF references agree: transformers' fast tokenizer and tokenizers' own encode."""
    path = os.path.join(style.dir, "tokenizer.json")
    if style.name == "opt-pairs" or not os.path.exists(path):
        return
    raw = tokenizers.Tokenizer.from_file(path)
    same = all(raw.encode(text, add_special_tokens=False).ids == style.encode(text) for text in CORPUS)
    report.check(same, f"{style.name}: HF tokenizers and transformers agree on the corpus (reference sanity)")


def run_prep(zerotune, style, rows_path, out, *extra):
    oc.run_zerotune(zerotune, ["prep", "--input", rows_path, "--tokenizer", style.dir, "--out", out,
                               "--max-seq-len", 8192, *extra])
    return read_shards(out)


def check_attributes(report, style, attrs):
    expected = dict(vocab_size=len(style.hf), bos_id=style.bos if style.bos is not None else -1, eos_id=style.eos,
                    tokenizer_sha256=style.sha256)
    for key, value in expected.items():
        report.check(attrs.get(key) == value, f"{style.name}: attribute {key} = {attrs.get(key)!r} (HF: {value!r})")
    pad = style.hf.pad_token_id if style.hf.pad_token_id is not None else style.eos
    report.check(attrs.get("pad_id") == pad, f"{style.name}: attribute pad_id = {attrs.get('pad_id')} (expected {pad})")


def check_corpus(zerotune, report, work, style):
    rows = [{"prompt": CORPUS[i], "chosen": CORPUS[(i + 1) % len(CORPUS)]} for i in range(len(CORPUS))]
    rows.append({"prompt": "", "chosen": "an empty prompt"})
    rows_path = os.path.join(work, f"corpus-{style.name}.jsonl")
    write_rows(rows_path, rows)
    samples, attrs = run_prep(zerotune, style, rows_path, os.path.join(work, f"data-corpus-{style.name}"))
    check_attributes(report, style, attrs)
    if not report.check(len(samples) == len(rows), f"{style.name}: {len(samples)} samples for {len(rows)} corpus rows"):
        return
    bad = []
    for index, (row, (tokens, mask)) in enumerate(zip(rows, samples)):
        prompt_ids, response_ids = style.encode(row["prompt"]), style.continuation(row["chosen"])
        expected = style.frame(prompt_ids + response_ids)
        prompt_part = (1 if style.bos is not None else 0) + len(prompt_ids)
        expected_mask = [0] * prompt_part + [1] * (len(expected) - prompt_part)
        expected_mask[0] = 0
        if tokens != expected or mask != expected_mask:
            bad.append(index)
            print(f"  row {index}: prompt {row['prompt']!r} response {row['chosen']!r}\n    zerotune {tokens}\n"
                  f"    HF       {expected}\n    mask     {mask}\n    HF mask  {expected_mask}")
    report.check(not bad, f"{style.name}: all {len(rows)} corpus samples have HF's ids and the exact prompt/response "
                 f"mask (mismatched rows: {bad})")


def check_rm_static(zerotune, report, work, style):
    """Every sample row, chosen and rejected, against HF on the joined text."""
    rows = read_rows(SAMPLE)
    for column in ("chosen", "rejected"):
        samples, _ = run_prep(zerotune, style, SAMPLE, os.path.join(work, f"data-{column}-{style.name}"),
                              "--response-column", column)
        if not report.check(len(samples) == len(rows), f"{style.name} {column}: {len(samples)} samples"):
            continue
        bad, deepspeed_bad = [], []
        for index, (row, (tokens, mask)) in enumerate(zip(rows, samples)):
            prompt_ids = style.encode(row["prompt"])
            joined = style.encode(row["prompt"] + row[column])
            expected = style.frame(joined)
            prompt_part = (1 if style.bos is not None else 0) + len(prompt_ids)
            if (tokens != expected or joined[:len(prompt_ids)] != prompt_ids
                    or mask != [0] * prompt_part + [1] * (len(expected) - prompt_part)):
                bad.append(index)
            # DeepSpeed-Chat's step 1 (since PR #819): tokenizer(prompt + chosen + eos_token).
            if not style.post_processor_eos:
                if tokens != style.hf(row["prompt"] + row[column] + style.hf.eos_token).input_ids:
                    deepspeed_bad.append(index)
        report.check(not bad, f"{style.name} {column}: all {len(rows)} rm-static samples == [BOS] + HF(prompt + "
                     f"{column}) + [EOS], mask 0 on BOS + prompt (mismatched rows: {bad[:10]})")
        if not style.post_processor_eos:
            report.check(not deepspeed_bad, f"{style.name} {column}: == DeepSpeed-Chat's tokenizer(prompt + {column} + "
                         f"{style.hf.eos_token!r}) (mismatched rows: {deepspeed_bad[:10]})")


def check_eot_and_options(zerotune, report, work, style, eot_text):
    """--eot-token TEXT: tokenizer(prompt + chosen + TEXT) as one text; --loss-on all; truncation."""
    rows = read_rows(SAMPLE)
    samples, _ = run_prep(zerotune, style, SAMPLE, os.path.join(work, f"data-eot-{style.name}"), "--eot-token", eot_text)
    bad = []
    for index, (row, (tokens, mask)) in enumerate(zip(rows, samples)):
        expected = style.hf(row["prompt"] + row["chosen"] + eot_text).input_ids
        prompt_part = (1 if style.bos is not None else 0) + len(style.encode(row["prompt"]))
        if tokens != expected or mask != [0] * prompt_part + [1] * (len(expected) - prompt_part):
            bad.append(index)
    report.check(len(samples) == len(rows) and not bad,
                 f"{style.name}: --eot-token {eot_text!r}: every sample == tokenizer(prompt + chosen + {eot_text!r}), "
                 f"no EOS id added (mismatched rows: {bad[:10]})")
    eot_ids = len(style.encode(eot_text))
    ending = style.hf.decode(samples[0][0][-eot_ids:], skip_special_tokens=False) if samples else ""
    report.check(ending == eot_text, f"{style.name}: {eot_text!r} is {eot_ids} token(s) at the end of each sample "
                 f"({'plain text' if eot_ids > 1 else 'one special token'} for this tokenizer)")

    everything, _ = run_prep(zerotune, style, SAMPLE, os.path.join(work, f"data-all-{style.name}"), "--loss-on", "all")
    report.check(all(mask == [0] + [1] * (len(tokens) - 1) for tokens, mask in everything),
                 f"{style.name}: --loss-on all: mask 1 on everything after the first token (DeepSpeed-Chat's labels)")
    cut_path = os.path.join(work, f"data-cut-{style.name}")
    oc.run_zerotune(zerotune, ["prep", "--input", SAMPLE, "--tokenizer", style.dir, "--out", cut_path, "--max-seq-len", 48,
                               "--loss-on", "all"])  # all: no row loses its targets to the cut
    cut, _ = read_shards(cut_path)
    full = [tokens for tokens, _ in everything]
    report.check(len(cut) == len(full) and all(c[0] == f[:48] for c, f in zip(cut, full)),
                 f"{style.name}: --max-seq-len 48 keeps the first 48 ids (truncation=True)")


def check_inspect(zerotune, report, work, style):
    """inspect --json decodes a sample with non-ASCII text as HF decodes its ids."""
    rows_path = os.path.join(work, f"inspect-{style.name}.jsonl")
    write_rows(rows_path, [{"prompt": "Human: say it in Japanese\nAssistant:", "chosen": " " + CJK_TEXT}])
    data = os.path.join(work, f"data-inspect-{style.name}")
    samples, _ = run_prep(zerotune, style, rows_path, data)
    result = oc.run_zerotune(zerotune, ["inspect", data, "--tokenizer", style.dir, "--json"])
    marked = json.loads(result.stdout)["sample"]["marked"]
    tokens, mask = samples[0]
    first_target = mask.index(1)

    def decode(ids):
        return style.hf.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    expected = decode(tokens[:first_target]) + "[[" + decode(tokens[first_target:]) + "]]"
    report.check(marked == expected and CJK_TEXT in marked,
                 f"{style.name}: inspect decodes the sample as HF does: {marked!r} (HF: {expected!r})")
    text = oc.run_zerotune(zerotune, ["inspect", data, "--tokenizer", style.dir]).stdout
    report.check(CJK_TEXT in text, f"{style.name}: the text report shows the CJK and emoji text")


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report(f"byte-level BPE tokenization vs tokenizers {tokenizers.__version__} / transformers "
                       f"{transformers.__version__}")
    with oc.temporary_directory(args, "zt-bpe-") as work:
        styles = make_styles(work)
        for style in styles:
            label = style.name
            oc.run_guarded(report, label, check_hf_agrees, report, style)
            oc.run_guarded(report, label, check_corpus, args.zerotune, report, work, style)
            oc.run_guarded(report, label, check_rm_static, args.zerotune, report, work, style)
            oc.run_guarded(report, label, check_inspect, args.zerotune, report, work, style)
        by_name = {style.name: style for style in styles}
        oc.run_guarded(report, "opt eot", check_eot_and_options, args.zerotune, report, work, by_name["opt-vocab"],
                       "<|endoftext|>")
        oc.run_guarded(report, "llama3 eot", check_eot_and_options, args.zerotune, report, work, by_name["llama3"],
                       "<|eot_id|>")
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

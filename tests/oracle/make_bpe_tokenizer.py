"""Trains small byte-level BPE tokenizers locally with HF `tokenizers` (no download) and writes
them as HF tokenizer directories, in the layouts of the real models:

  opt      GPT-2/OPT: ByteLevel pre-tokenizer (GPT-2 regex), <s>=0 <pad>=1 </s>=2 <unk>=3, BOS
           "</s>" put before every text by the post-processor (TemplateProcessing, what
           transformers' GPT2Converter makes of OPT's add_bos_token), OPT's tokenizer_config.json
           and special_tokens_map.json (bos/eos/unk "</s>", pad "<pad>", add_bos_token true).
           --files picks tokenizer.json, vocab.json (vocab.json + merges.txt, as OPT's hub
           directories ship it) or both.
  roberta  the opt vocabulary with ByteLevel(add_prefix_space=true) and RobertaProcessing
           (<s> before, </s> after a text): the add_prefix_space case.
  llama3   Llama-3: Sequence[Split(Llama-3's regex, Isolated), ByteLevel(use_regex=false)],
           ignore_merges (with one vocabulary word, "Ġzerotune", no merge path reaches),
           <|begin_of_text|> put before every text, <|end_of_text|> as EOS, special tokens
           after the vocabulary.
  qwen2    Qwen2: NFC normalizer, Qwen2's regex (single digits), <|endoftext|> <|im_start|>
           <|im_end|>, no BOS; plus four test tokens exercising the added-token flags: "<mask>"
           (lstrip), "[R]" (rstrip), "qword" (single_word), "café" (normalized, non-special).

The training text is data/rm-static-sample.jsonl's prompts and responses plus a few lines of
other scripts (accents, CJK, Cyrillic, emoji), so that merges exist beyond ASCII.

As a module (tests/oracle/test_bpe_tokenizer.py, OPT end-to-end tests):
    import make_bpe_tokenizer
    make_bpe_tokenizer.write_tokenizer("opt", out_dir, vocab_size=1000, files="both")
As a command:
    python make_bpe_tokenizer.py --style opt --out DIR [--vocab-size 1000] [--files vocab.json]
"""
import argparse
import json
import os
import sys

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
except ImportError as error:  # a missing package is a failure, never a skip
    print(f"make_bpe_tokenizer: missing Python package: {error} (run scripts/setup.sh: it makes .venv "
          f"with tests/oracle/requirements.txt)", file=sys.stderr)
    sys.exit(1)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "data", "rm-static-sample.jsonl")

# The pre-tokenizer regexes Llama-3 and Qwen2 ship in their tokenizer.json (Split, Isolated).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Text beyond the sample's English, repeated so that its pairs get merged.
EXTRA_TEXT = [
    "Café déjà vu, naïve façade, Ångström, crème brûlée, São Paulo, Zürich.",
    "日本語のテキストです。中文字符测试，你好世界。한국어 문장입니다.",
    "Привет, как дела? Ёжик в тумане. Москва — столица России.",
    "Καλημέρα κόσμε. مرحبا بالعالم. नमस्ते दुनिया. สวัสดีครับ",
    "I love 🍕 and 🚀! Family 👨‍👩‍👧‍👦, coder 👩🏽‍💻, flags 🇫🇷🇯🇵, thumbs 👍🏿.",
    "Numbers 1234567890, 3.14159, 1,000,000 and 2024-05-01.",
]
OPT_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0, 1, 2, 3 as in OPT
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def training_texts():
    texts = []
    with open(SAMPLE, encoding="utf-8") as stream:
        for line in stream:
            if line.strip():
                row = json.loads(line)
                texts += [row["prompt"] + row["chosen"], row["rejected"]]
    return texts + EXTRA_TEXT * 20


def train(pre_tokenizer, vocab_size, special_tokens, normalizer=None):
    """A BPE model trained on training_texts() with the byte-level alphabet complete."""
    tokenizer = Tokenizer(models.BPE())
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_texts(), trainer)
    return tokenizer


def edit_json(tokenizer, change):
    """The tokenizer after `change(document)` on its tokenizer.json document."""
    document = json.loads(tokenizer.to_str())
    change(document)
    return Tokenizer.from_str(json.dumps(document))


def token_entry(content, normalized=False):
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": normalized,
            "rstrip": False, "single_word": False}


def write_json(path, document):
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(document, stream, indent=2, ensure_ascii=False)


def train_opt(vocab_size):
    tokenizer = train(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size, OPT_SPECIALS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="</s> $A", pair="</s> $A $B", special_tokens=[("</s>", tokenizer.token_to_id("</s>"))])
    return tokenizer


def write_opt(out_dir, vocab_size, files):
    tokenizer = train_opt(vocab_size)
    if files in ("tokenizer.json", "both"):
        tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    if files in ("vocab.json", "both"):
        tokenizer.model.save(out_dir)  # vocab.json + merges.txt (with the "#version" header)
    # OPT's hub files (facebook/opt-125m): bos = eos = unk = "</s>", pad "<pad>", add_bos_token.
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "add_bos_token": True, "add_prefix_space": False, "bos_token": token_entry("</s>", True),
        "eos_token": token_entry("</s>", True), "unk_token": token_entry("</s>", True), "pad_token": token_entry("<pad>", True),
        "errors": "replace", "model_max_length": 2048, "tokenizer_class": "GPT2Tokenizer"})
    special = {key: {k: v for k, v in token_entry(value, True).items() if k != "__type"}
               for key, value in (("bos_token", "</s>"), ("eos_token", "</s>"), ("unk_token", "</s>"), ("pad_token", "<pad>"))}
    write_json(os.path.join(out_dir, "special_tokens_map.json"), special)
    return tokenizer


def write_roberta(out_dir, vocab_size):
    tokenizer = train_opt(vocab_size)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.post_processor = processors.RobertaProcessing(sep=("</s>", 2), cls=("<s>", 0))
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "model_max_length": 2048, "tokenizer_class": "PreTrainedTokenizerFast"})
    return tokenizer


def write_llama3(out_dir, vocab_size):
    split = pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False)
    tokenizer = train(pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                      vocab_size, [])

    def ignore_merges(document):  # ignore_merges, and a word only ignore_merges can reach
        model = document["model"]
        model["ignore_merges"] = True
        if "Ġzerotune" not in model["vocab"]:
            model["vocab"]["Ġzerotune"] = len(model["vocab"])
    tokenizer = edit_json(tokenizer, ignore_merges)
    tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False) for content in LLAMA3_SPECIALS])
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast"})
    return tokenizer


def write_qwen2(out_dir, vocab_size):
    split = pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False)
    tokenizer = train(pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                      vocab_size, [], normalizer=normalizers.NFC())
    tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False) for content in QWEN2_SPECIALS])
    tokenizer.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    tokenizer.add_tokens([AddedToken("[R]", rstrip=True, normalized=False),
                          AddedToken("qword", single_word=True, normalized=False),
                          AddedToken("café", normalized=True)])
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "model_max_length": 32768, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer"})
    return tokenizer


def write_tokenizer(style, out_dir, vocab_size=1000, files="both"):
    """Writes the tokenizer of `style` (opt, roberta, llama3, qwen2) into out_dir (created) and
    returns the `tokenizers.Tokenizer`. files: for opt, tokenizer.json, vocab.json or both."""
    os.makedirs(out_dir, exist_ok=True)
    if style == "opt":
        return write_opt(out_dir, vocab_size, files)
    if style == "roberta":
        return write_roberta(out_dir, vocab_size)
    if style == "llama3":
        return write_llama3(out_dir, vocab_size)
    if style == "qwen2":
        return write_qwen2(out_dir, vocab_size)
    raise ValueError(f"unknown tokenizer style '{style}' (opt, roberta, llama3, qwen2)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--style", required=True, choices=["opt", "roberta", "llama3", "qwen2"])
    parser.add_argument("--out", required=True, help="directory to write the tokenizer files into")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--files", default="both", choices=["tokenizer.json", "vocab.json", "both"],
                        help="opt only: which files hold the vocabulary")
    args = parser.parse_args()
    tokenizer = write_tokenizer(args.style, args.out, args.vocab_size, args.files)
    print(f"make_bpe_tokenizer: {args.style} tokenizer with {tokenizer.get_vocab_size()} tokens in {args.out}")


if __name__ == "__main__":
    main()

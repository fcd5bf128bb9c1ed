"""Oracle: `zerotune prep --format chat` against transformers 4.40's apply_chat_template.

Tiny tokenizers in the layouts of the real models get the chat templates those models publish in
their tokenizer_config.json (tests/oracle/chat_templates/*.json; the source of each is in the file):
  llama2        SentencePiece (spm_train here, LLaMA's layout), meta-llama/Llama-2-7b-chat-hf's template
  mistral-v0.1  the same model, mistralai/Mistral-7B-Instruct-v0.1's template ('</s> ' after each answer)
  mistral-v0.2  the same model, Mixtral-8x7B-Instruct-v0.1's (Mistral v0.2 instruct) template
  llama3        byte-level BPE with Llama-3's special tokens (make_bpe_tokenizer.py), Meta-Llama-3-8B-Instruct's
  llama3.2      the same tokenizer, Llama-3.2-3B-Instruct's template (tool-calling branches: tojson(indent=4))
  qwen2         byte-level BPE with Qwen2's special tokens, Qwen2-7B-Instruct's template (ChatML)
  qwen2.5       the same tokenizer, Qwen2.5-7B-Instruct's template (tool-calling branches: tojson)
  whitespace    the qwen2 tokenizer with chat_templates/whitespace.jinja (zerotune's own multi-line
                template: whitespace control, trim_blocks/lstrip_blocks, tests, filters), via --chat-template
HF side: the slow LlamaTokenizer (legacy, as zerotune's SentencePiece tokenization; for llama2
LlamaTokenizerFast converted from it too) and AutoTokenizer (PreTrainedTokenizerFast) for the
BPE directories.

For each template, conversations with and without a system turn, single- and multi-turn (one
ending on a user turn): the shard's token ids must equal apply_chat_template(messages,
tokenize=True), and the loss mask must be 1 exactly on each assistant turn's tokens: from where
apply_chat_template(messages[:k], add_generation_prompt=True) ends to where
apply_chat_template(messages[:k+1]) ends (both prefixes of the whole, checked), and each turn's
targets must hold its end-of-turn token (EOS / <|eot_id|> / <|im_end|>, the trl#4879 failure) and
decode to its content. Then the refusals: a model without chat_template, a row without messages,
an empty conversation, a role the template rejects (Mistral's has no system turn: its alternation
check raises first), also counted
with --skip-bad-rows, and a tool call that reaches Qwen2.5's tojson (a filter zerotune lacks).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402 (exits with a clear message when a package is missing)
import make_bpe_tokenizer  # noqa: E402
import test_prep_tokenization as sp_oracle  # noqa: E402 (its train_tokenizer: the tiny SentencePiece model)

try:
    import h5py  # noqa: E402
    import jinja2  # noqa: F401,E402 (apply_chat_template needs it)
except ImportError as error:  # a missing package is a failure, never a skip
    print(f"oracle: missing Python package: {error} (apply_chat_template needs jinja2; run scripts/setup.sh)",
          file=sys.stderr)
    sys.exit(1)
import transformers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "chat_templates")

SYSTEM = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris."}],
    [SYSTEM,
     {"role": "user", "content": "Name a prime number."},
     {"role": "assistant", "content": " 7, which is also odd. "}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Count to three.\n"},
     {"role": "assistant", "content": "1, 2, 3"},
     {"role": "user", "content": "Thanks, café ☕"}],
    [SYSTEM,
     {"role": "user", "content": "Translate 'dog' to German."},
     {"role": "assistant", "content": "Hund"},
     {"role": "user", "content": "And 'cat'?"},
     {"role": "assistant", "content": "Katze\n\nDone."}],
]


def read_template(name):
    with open(os.path.join(TEMPLATES, f"{name}.json"), encoding="utf-8") as stream:
        return json.load(stream)["chat_template"]


def set_config(model_dir, **values):
    """Merges `values` into model_dir/tokenizer_config.json (created when missing)."""
    path = os.path.join(model_dir, "tokenizer_config.json")
    config = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as stream:
            config = json.load(stream)
    config.update(values)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(config, stream, indent=1, ensure_ascii=False)


def make_models(work):
    """{name: (model_dir, hf_tokenizer, end_of_turn_id)} for every template checked."""
    models = {}
    sp_dir = sp_oracle.train_tokenizer(work)
    for name in ("llama2", "mistral-v0.1", "mistral-v0.2"):
        model_dir = os.path.join(work, name)
        shutil.copytree(sp_dir, model_dir)
        set_config(model_dir, bos_token="<s>", eos_token="</s>", unk_token="<unk>", tokenizer_class="LlamaTokenizer",
                   chat_template=read_template(name))
        tokenizer = transformers.LlamaTokenizer.from_pretrained(model_dir, legacy=True)
        models[name] = (model_dir, tokenizer, tokenizer.eos_token_id)
    for style, end_of_turn, names in (("llama3", "<|eot_id|>", ("llama3", "llama3.2")), ("qwen2", "<|im_end|>", ("qwen2", "qwen2.5"))):
        style_dir = os.path.join(work, f"{style}-tokenizer")
        make_bpe_tokenizer.write_tokenizer(style, style_dir, vocab_size=600)
        for name in names:
            model_dir = os.path.join(work, name)
            shutil.copytree(style_dir, model_dir)
            set_config(model_dir, chat_template=read_template(name))
            tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
            models[name] = (model_dir, tokenizer, tokenizer.convert_tokens_to_ids(end_of_turn))
    return models


def write_rows(path, conversations):
    with open(path, "w", encoding="utf-8") as out:
        for messages in conversations:
            out.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")


def read_samples(data_dir):
    samples = []
    for path in sorted(glob.glob(os.path.join(data_dir, "train-*.h5"))):
        with h5py.File(path, "r") as shard:
            tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
            for i in range(len(offsets) - 1):
                samples.append(([int(t) for t in tokens[offsets[i]:offsets[i + 1]]],
                                [int(m) for m in mask[offsets[i]:offsets[i + 1]]]))
    return samples


def expected_mask(report, label, tokenizer, messages, ids, end_of_turn_id, template):
    """The mask from apply_chat_template's prefixes; checks each turn's targets on the way."""
    mask = [0] * len(ids)
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = (tokenizer.apply_chat_template(messages[:k], add_generation_prompt=True, tokenize=True,
                                                chat_template=template) if k > 0 else [])
        through = tokenizer.apply_chat_template(messages[:k + 1], tokenize=True, chat_template=template)
        if not report.check(ids[:len(before)] == before and ids[:len(through)] == through,
                            f"{label}, turn {k}: HF's renderings before and through the turn are prefixes of the whole"):
            continue
        targets = ids[len(before):len(through)]
        text = tokenizer.decode([t for t in targets if t != end_of_turn_id])
        report.check(end_of_turn_id in targets and message["content"].strip() in text,
                     f"{label}, turn {k}: the targets {targets} hold the end-of-turn id {end_of_turn_id} and spell "
                     f"the content ({text!r})")
        for i in range(len(before), len(through)):
            mask[i] = 1
    mask[0] = 0
    return mask


def check_template(zerotune, report, work, name, model_dir, tokenizer, end_of_turn_id, conversations,
                   template_file=None):
    template = None
    if template_file is not None:
        with open(template_file, encoding="utf-8") as stream:
            template = stream.read()
    rows = os.path.join(work, f"{name}.jsonl")
    write_rows(rows, conversations)
    out = os.path.join(work, f"data-{name}")
    extra = ["--chat-template", template_file] if template_file else []
    oc.run_zerotune(zerotune, ["prep", "--format", "chat", "--input", rows, "--tokenizer", model_dir, "--out", out,
                               "--max-seq-len", 4096] + extra)
    # The fast tokenizer HF users of LLaMA-2 get cuts and prefixes as the slow one does: checked once.
    fast = transformers.LlamaTokenizerFast.from_pretrained(model_dir, legacy=True, from_slow=True) if name == "llama2" else None
    samples = read_samples(out)
    if not report.check(len(samples) == len(conversations), f"{name}: {len(samples)} samples for {len(conversations)} rows"):
        return
    for index, (messages, (tokens, mask)) in enumerate(zip(conversations, samples)):
        label = f"{name} conversation {index + 1}"
        ids = tokenizer.apply_chat_template(messages, tokenize=True, chat_template=template)
        report.check(tokens == ids, f"{label}: ids == apply_chat_template ({len(ids)} tokens)"
                     + ("" if tokens == ids else f"\n  zerotune {tokens}\n  HF       {ids}\n  text "
                        f"{tokenizer.apply_chat_template(messages, tokenize=False, chat_template=template)!r}"))
        if fast is not None:
            report.check(fast.apply_chat_template(messages, tokenize=True) == tokens,
                         f"{label}: LlamaTokenizerFast (converted from the model, legacy) gives the same ids")
        want = expected_mask(report, label, tokenizer, messages, ids, end_of_turn_id, template)
        report.check(mask == want, f"{label}: loss mask on the assistant turns ({sum(want)} targets)"
                     + ("" if mask == want else f"\n  zerotune {mask}\n  expected {want}"))


def check_options(zerotune, report, work, models):
    """--loss-on all (every token after the first a target) and --max-seq-len (the beginning kept;
    a row whose assistant turns all lie beyond the cut skipped and counted) on the llama3 model."""
    model_dir, tokenizer, _ = models["llama3"]
    rows = os.path.join(work, "options.jsonl")
    write_rows(rows, CONVERSATIONS)
    full = [tokenizer.apply_chat_template(messages, tokenize=True) for messages in CONVERSATIONS]
    out = os.path.join(work, "data-all")
    oc.run_zerotune(zerotune, ["prep", "--format", "chat", "--input", rows, "--tokenizer", model_dir, "--out", out,
                               "--loss-on", "all"])
    report.check(read_samples(out) == [(ids, [0] + [1] * (len(ids) - 1)) for ids in full],
                 "--loss-on all: the same ids, every token after the first a target")
    # Where each row's first answer starts; the cut keeps some rows' answers and none of others'.
    starts = [len(tokenizer.apply_chat_template(m[:next(k for k, x in enumerate(m) if x["role"] == "assistant")],
                                                add_generation_prompt=True)) for m in CONVERSATIONS]
    cut = sorted(starts)[len(starts) // 2]
    out = os.path.join(work, "data-cut")
    result = oc.run_zerotune(zerotune, ["prep", "--format", "chat", "--input", rows, "--tokenizer", model_dir, "--out", out,
                                        "--max-seq-len", cut])
    kept = [ids[:cut] for ids, start in zip(full, starts) if start < cut]
    skipped = len(full) - len(kept)
    report.check(0 < len(kept) < len(full) and [tokens for tokens, _ in read_samples(out)] == kept
                 and f"    {skipped}  no assistant token within --max-seq-len {cut}" in result.stdout,
                 f"--max-seq-len {cut}: the first {cut} ids of the {len(kept)} rows with an answer starting before it, "
                 f"the other {skipped} skipped and counted")


def check_refusals(zerotune, report, work, models):
    llama2_dir = models["llama2"][0]
    good = os.path.join(work, "good.jsonl")
    write_rows(good, CONVERSATIONS[:1])
    bare = os.path.join(work, "no-template")
    shutil.copytree(llama2_dir, bare)
    os.remove(os.path.join(bare, "tokenizer_config.json"))
    out = os.path.join(work, "refused")
    prep = ["prep", "--format", "chat", "--out", out, "--tokenizer"]
    oc.check_refused(zerotune, report, "a model without chat_template", prep + [bare, "--input", good],
                     "no chat_template")
    for label, row, needle in (("a row without messages", {"prompt": "p", "chosen": "c"}, "missing column 'messages'"),
                               ("an empty conversation", {"messages": []}, "empty conversation"),
                               ("a conversation without an assistant turn",
                                {"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn")):
        path = os.path.join(work, "bad.jsonl")
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(json.dumps(row) + "\n")
        oc.check_refused(zerotune, report, label, prep + [llama2_dir, "--input", path], needle)
    system_rows = os.path.join(work, "system.jsonl")
    write_rows(system_rows, CONVERSATIONS[:2])
    mistral = models["mistral-v0.2"][0]
    oc.check_refused(zerotune, report, "Mistral's template on a system turn", prep + [mistral, "--input", system_rows],
                     "system.jsonl:2: the chat template refused the conversation: Conversation roles must alternate")
    result = oc.run_zerotune(zerotune, prep + [mistral, "--input", system_rows, "--skip-bad-rows"])
    report.check("samples written   1\n" in result.stdout and "Conversation roles must alternate" in result.stdout,
                 "--skip-bad-rows: the row Mistral's template refuses is counted as skipped, the other written")
    # Qwen2.5's tool-calling branch needs tojson, which zerotune lacks: an error where a row reaches it.
    tool_rows = os.path.join(work, "tool.jsonl")
    write_rows(tool_rows, [CONVERSATIONS[0], [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]}]])
    oc.check_refused(zerotune, report, "Qwen2.5's template on a tool call", prep + [models["qwen2.5"][0], "--input", tool_rows, "--force"],
                     "tool.jsonl:2: chat template, line 36, column 39: the filter 'tojson' is not supported")
    oc.check_refused(zerotune, report, "--format chat with --prompt-column",
                     prep + [llama2_dir, "--input", good, "--prompt-column", "x"], "--prompt-column/--response-column")


def main():
    args = oc.parse_args(__doc__)
    report = oc.Report(f"chat data vs transformers {transformers.__version__} apply_chat_template")
    with oc.temporary_directory(args, "zt-chat-") as work:
        models = make_models(work)
        no_system = [c for c in CONVERSATIONS if c[0]["role"] != "system"]
        for name, (model_dir, tokenizer, end_of_turn_id) in models.items():
            conversations = no_system if name.startswith("mistral") else CONVERSATIONS  # Mistral: no system turn
            oc.run_guarded(report, name, check_template, args.zerotune, report, work, name, model_dir, tokenizer,
                           end_of_turn_id, conversations)
        qwen2_dir, qwen2_tokenizer, im_end = models["qwen2"]
        oc.run_guarded(report, "whitespace", check_template, args.zerotune, report, work, "whitespace", qwen2_dir,
                       qwen2_tokenizer, im_end, CONVERSATIONS, os.path.join(TEMPLATES, "whitespace.jinja"))
        oc.run_guarded(report, "options", check_options, args.zerotune, report, work, models)
        oc.run_guarded(report, "refusals", check_refusals, args.zerotune, report, work, models)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

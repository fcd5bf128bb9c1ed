# Shared helpers of the oracle tests (tests/oracle/test_*.py): command-line parsing, running
# `zerotune train` as a subprocess, tiny random HF LLaMA models and the other families' (OPT,
# Mistral, Qwen2, tied LLaMA), PEFT adapters, token shards (written through
# tests/oracle/make_token_shard.py), padded micro-batches exactly as zerotune's batcher builds
# them, the HF reference loss/logits/gradients, DeepSpeed's clipping and WarmupDecayLR formulas,
# the trajectory loop, the export and bf16 comparisons, and a Report that prints every comparison
# and turns any failure into a non-zero exit.
#
# The oracle never skips: a missing package, a failing zerotune run or a mismatch all fail.
import argparse
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import traceback

# Nothing is downloaded at run time: transformers/peft must not look anything up on the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import numpy
    import torch
    import torch.nn.functional as F
    import transformers
    import peft
    import safetensors.torch
    import h5py  # noqa: F401 (make_token_shard.py needs it; fail here with a clear message)
except ImportError as error:  # a missing package is a failure, never a skip
    print(f"oracle: missing Python package: {error}. Run scripts/setup.sh (it makes .venv with "
          f"the pinned oracle packages of tests/oracle/requirements.txt).", file=sys.stderr)
    sys.exit(1)

ORACLE_DIR = os.path.dirname(os.path.abspath(__file__))
BOS_ID, EOS_ID, PAD_ID = 1, 2, 0
IGNORE = -100  # HF label of a position that is not a target

# The tiny model every oracle test uses: GQA on (4 query heads share 2 key/value heads).
TINY_LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                  rope_theta=10000.0, max_position_embeddings=128, hidden_act="silu",
                  tie_word_embeddings=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                  pad_token_id=PAD_ID)


# ---------------------------------------------------------------------------------------------
# command line, temporary directories, zerotune runs


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--zerotune", required=True, help="path of the zerotune executable")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (its path is printed) for debugging")
    args = parser.parse_args()
    if not os.access(args.zerotune, os.X_OK):
        print(f"oracle: --zerotune {args.zerotune}: not an executable file", file=sys.stderr)
        sys.exit(1)
    return args


def temporary_directory(args, prefix):
    """A TemporaryDirectory (removed at exit) or, with --keep, a directory that stays."""
    if args.keep:
        path = tempfile.mkdtemp(prefix=prefix)
        print(f"oracle: keeping {path}")

        class Kept:
            def __enter__(self):
                return path

            def __exit__(self, *exc):
                return False
        return Kept()
    return tempfile.TemporaryDirectory(prefix=prefix)


class OracleError(Exception):
    """A failure that is not a numeric mismatch (zerotune exited non-zero, a file is missing)."""


def run_zerotune(zerotune, arguments, timeout_s=400):
    """Runs `zerotune ARGUMENTS...`; on a non-zero exit prints its stdout/stderr and raises."""
    command = [zerotune] + [str(a) for a in arguments]
    print("oracle: running " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=timeout_s)
    if result.returncode != 0:
        print(f"---- zerotune stdout ----\n{result.stdout}\n---- zerotune stderr ----\n"
              f"{result.stderr}\n-------------------------", file=sys.stderr)
        raise OracleError(f"zerotune exited with status {result.returncode}: {' '.join(command)}")
    return result


def run_guarded(report, label, function, *arguments, **keywords):
    """Runs one test case; an exception (zerotune failed, a file is missing) is reported as a
    failure of that case and the next cases still run, so one report shows everything."""
    try:
        function(*arguments, **keywords)
    except Exception as error:  # noqa: BLE001 - reported, and the test exits non-zero
        traceback.print_exc()
        report.fail(f"[{label}] {type(error).__name__}: {error}")


def main_guard(main):
    """Runs main(); any exception (zerotune failure, missing file, bug) prints and exits 1."""
    try:
        code = main()
    except Exception:  # noqa: BLE001 - every failure must become a non-zero exit
        traceback.print_exc()
        print("oracle: FAILED (exception above)", file=sys.stderr)
        sys.exit(1)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# comparisons


class Report:
    """Collects comparisons; each prints one line; finish() returns the exit status."""

    def __init__(self, title):
        self.title = title
        self.failures = []
        self.not_run = []
        self.count = 0
        print(f"==== {title}")

    def fail(self, what):
        self.failures.append(what)
        print(f"FAIL  {what}", flush=True)

    def skip(self, what, why):
        """A check this machine cannot make (e.g. it needs 2 GPUs): said at once and in the summary,
        never passed silently."""
        self.not_run.append(f"{what} ({why})")
        print(f"NOT RUN  {what}: {why}", flush=True)

    def check(self, condition, what):
        self.count += 1
        if condition:
            print(f"ok    {what}", flush=True)
        else:
            self.fail(what)
        return condition

    def close(self, what, got, ref, atol=0.0, rel_of_max=0.0):
        """Passes iff max|got - ref| <= atol + rel_of_max * max|ref|. Prints the max abs error,
        the max abs error relative to max|ref|, and the max element-wise relative error."""
        self.count += 1
        got = torch.as_tensor(got).detach().to(torch.float64)
        ref = torch.as_tensor(ref).detach().to(torch.float64)
        if tuple(got.shape) != tuple(ref.shape):
            self.fail(f"{what}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}")
            return False
        if not bool(torch.isfinite(got).all()):
            self.fail(f"{what}: zerotune's values are not all finite")
            return False
        ref_max = float(ref.abs().max()) if ref.numel() else 0.0
        diff = (got - ref).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        scale = max(ref_max, 1e-30)
        elementwise = diff / ref.abs().clamp_min(1e-3 * scale)  # rel. error, tiny refs floored
        max_rel = float(elementwise.max()) if diff.numel() else 0.0
        tolerance = atol + rel_of_max * ref_max
        ok = max_abs <= tolerance
        line = (f"{what}: shape {tuple(ref.shape)} max|ref| {ref_max:.3e} max abs err "
                f"{max_abs:.3e} (= {max_abs / scale:.2e} of max|ref|, max elem rel "
                f"{max_rel:.2e}) tol {tolerance:.2e}")
        if ok:
            print(f"ok    {line}", flush=True)
        else:
            where = numpy.unravel_index(int(diff.argmax()), tuple(diff.shape))
            self.fail(f"{line}; worst at index {tuple(int(i) for i in where)}: zerotune "
                      f"{float(got[where]):.9g} reference {float(ref[where]):.9g}")
        return ok

    def scalar(self, what, got, ref, rel):
        """|got - ref| <= rel * |ref| (or <= rel when ref is 0)."""
        self.count += 1
        got, ref = float(got), float(ref)
        err = abs(got - ref)
        bound = rel * abs(ref) if ref != 0.0 else rel
        ok = math.isfinite(got) and err <= bound
        line = (f"{what}: zerotune {got:.12g} reference {ref:.12g} abs err {err:.3e} rel err "
                f"{err / abs(ref) if ref != 0.0 else err:.3e} (tol rel {rel:.0e})")
        if ok:
            print(f"ok    {line}", flush=True)
        else:
            self.fail(line)
        return ok

    def finish(self):
        for what in self.not_run:
            print(f"==== NOT RUN on this machine: {what}")
        if self.failures:
            print(f"==== {self.title}: {len(self.failures)} of {self.count} checks FAILED:")
            for failure in self.failures:
                print(f"  - {failure}")
            return 1
        not_run = f"; {len(self.not_run)} NOT RUN (listed above)" if self.not_run else ""
        print(f"==== {self.title}: all {self.count} checks passed{not_run}")
        return 0


# ---------------------------------------------------------------------------------------------
# models


def save_fp32(model, model_dir):
    """save_pretrained in fp32 safetensors, checked to have written config.json and the weights."""
    model.to(torch.float32).save_pretrained(model_dir, safe_serialization=True)
    for required in ("config.json", "model.safetensors"):
        if not os.path.exists(os.path.join(model_dir, required)):
            raise OracleError(f"save_pretrained did not write {required} in {model_dir}")


def make_llama(model_dir, seed, initializer_range=0.1, **overrides):
    """Writes a tiny random LlamaForCausalLM (TINY_LLAMA + overrides) in fp32 to model_dir with
    save_pretrained(safe_serialization=True) and returns its config.

    initializer_range 0.1 (not HF's 0.02) makes attention scores O(1), so attention is far from
    uniform and a RoPE or masking bug moves the logits by much more than the tolerance; the norm
    weights are randomised around 1 so that a norm that ignores its weight is caught too."""
    torch.manual_seed(seed)
    settings = dict(TINY_LLAMA)
    settings.update(overrides)
    config = transformers.LlamaConfig(initializer_range=initializer_range, **settings)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1.0 + 0.2 * torch.randn_like(parameter))
    save_fp32(model, model_dir)
    return config


def load_reference_llama(model_dir, **config_overrides):
    """The HF model of model_dir in float64 (the exact reference for zerotune's fp32), eager
    attention (a plain masked softmax, no fused kernel). transformers 4.40 computes RMSNorm's
    normalisation and the RoPE angles in fp32 even in a float64 model; that is ~1e-7 relative,
    far below the tolerances of the tests. config_overrides replace config.json values."""
    model = transformers.LlamaForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float64, attn_implementation="eager", **config_overrides)
    model.train()  # dropout-free model: train() changes nothing numerically, as in zerotune
    return model


# ---------------------------------------------------------------------------------------------
# the other architecture rows (test_family_*.py): tiny random models of each family and variant

TINY_OPT = dict(vocab_size=128, hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                layerdrop=0.0, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                init_std=0.1)
TINY_SHAPE = dict((k, TINY_LLAMA[k]) for k in (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings", "bos_token_id",
    "eos_token_id", "pad_token_id"))

FAMILY_CASES = [
    # (label, config class, model class, settings)
    ("opt", "OPTConfig", "OPTForCausalLM", dict(TINY_OPT)),
    ("opt_350m_shape", "OPTConfig", "OPTForCausalLM",
     dict(TINY_OPT, word_embed_proj_dim=32, do_layer_norm_before=False)),
    ("opt_no_affine_no_bias", "OPTConfig", "OPTForCausalLM",
     dict(TINY_OPT, layer_norm_elementwise_affine=False, enable_bias=False)),
    ("opt_untied", "OPTConfig", "OPTForCausalLM", dict(TINY_OPT, tie_word_embeddings=False)),
    ("mistral", "MistralConfig", "MistralForCausalLM", dict(TINY_SHAPE, sliding_window=64, initializer_range=0.1)),
    ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(TINY_SHAPE, tie_word_embeddings=True, initializer_range=0.1)),
    ("llama_tied", "LlamaConfig", "LlamaForCausalLM", dict(TINY_SHAPE, tie_word_embeddings=True, initializer_range=0.1)),
    ("llama3_rope", "LlamaConfig", "LlamaForCausalLM", dict(TINY_SHAPE, initializer_range=0.1)),
]


def family_case(label, **overrides):
    """(config class, model class, settings + overrides) of the FAMILY_CASES row `label`."""
    for case_label, config_class, model_class, settings in FAMILY_CASES:
        if case_label == label:
            return config_class, model_class, dict(settings, **overrides)
    raise OracleError(f"no family case {label!r}")


def make_family_model(model_dir, seed, config_class, model_class, settings):
    """A tiny random model saved by transformers in fp32; norm weights around 1 and biases
    (projections' and norms') random, so that a zerotune ignoring any of them is caught."""
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**settings)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith(".weight"):
                parameter.copy_(1.0 + 0.2 * torch.randn_like(parameter))
            elif name.endswith(".bias"):
                parameter.copy_(0.1 * torch.randn_like(parameter))
    save_fp32(model, model_dir)
    return config


def load_reference_family(model_dir, model_class, dtype=None):
    """The HF model in float64 (or dtype) with eager attention. The default dtype is float64
    from here on: transformers 4.40 builds the causal masks of OPT, Mistral and Qwen2 with
    torch.full in the default dtype, which cannot hold float64's minimum when it is float32."""
    torch.set_default_dtype(torch.float64)
    model = getattr(transformers, model_class).from_pretrained(
        model_dir, torch_dtype=dtype or torch.float64, attn_implementation="eager")
    model.train()  # dropout 0 everywhere: train() changes nothing numerically
    return model


# ---------------------------------------------------------------------------------------------
# PEFT adapters


def make_adapter(model_dir, adapter_dir, seed, target_modules, use_rslora, dropout,
                 model_class="LlamaForCausalLM"):
    """A PEFT LoRA adapter (r 4, alpha 8) on the fp32 model of model_dir (a transformers
    model_class) with lora_B ~ N(0, 0.1) (PEFT initialises B to zero, which would make every
    lora_A gradient zero), saved with save_pretrained (adapter_config.json +
    adapter_model.safetensors). target_modules None: PEFT's default for the model type."""
    torch.set_default_dtype(torch.float32)  # PEFT makes the LoRA layers in the default dtype
    base = getattr(transformers, model_class).from_pretrained(model_dir, torch_dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=target_modules,
                             lora_dropout=dropout, use_rslora=use_rslora, bias="none",
                             task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.1)
    save_peft_model(model, adapter_dir)


def save_peft_model(model, adapter_dir):
    """PeftModel.save_pretrained without a Hub look-up or a Jinja2 model card."""
    # PEFT 0.10 renders a new model card from a Jinja2 template, and Jinja2 is not among the
    # oracle packages; with a README.md already there it only updates that file.
    os.makedirs(adapter_dir, exist_ok=True)
    with open(os.path.join(adapter_dir, "README.md"), "w") as stream:
        stream.write("---\nlibrary_name: peft\n---\n# oracle test adapter\n")
    model.save_pretrained(adapter_dir, save_embedding_layers=False)  # no Hub look-up
    for required in ("adapter_config.json", "adapter_model.safetensors"):
        if not os.path.exists(os.path.join(adapter_dir, required)):
            raise OracleError(f"PEFT save_pretrained did not write {required} in {adapter_dir}")


def load_reference_peft(model_dir, adapter_dir, model_class="LlamaForCausalLM"):
    """The float64 HF model with the saved adapter loaded by PEFT, LoRA weights trainable."""
    if model_class == "LlamaForCausalLM":
        base = load_reference_llama(model_dir)
    else:
        base = load_reference_family(model_dir, model_class)
    model = peft.PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
    return model.double()


def zerotune_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight ->
    model.layers.0.self_attn.q_proj.lora_A.weight (the name zerotune's dump uses)."""
    prefix = "base_model.model."
    if not peft_name.startswith(prefix):
        raise OracleError(f"unexpected PEFT parameter name {peft_name}")
    return peft_name[len(prefix):].replace(".default.", ".")


def trainable_lora_grads(model):
    """zerotune name -> gradient of every trainable (LoRA) parameter of a PEFT model."""
    return {zerotune_name(name): p.grad.detach().clone()
            for name, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------
# data


def load_make_token_shard():
    """Imports tests/oracle/make_token_shard.py by path (it is not a package)."""
    path = os.path.join(ORACLE_DIR, "make_token_shard.py")
    if not os.path.exists(path):
        raise OracleError(f"{path} is missing (it writes the HDF5 token shards zerotune reads)")
    spec = importlib.util.spec_from_file_location("make_token_shard", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_samples(seed, lengths, vocab_size, prompt_masked=True):
    """One sample per length: BOS, random tokens in [3, vocab), EOS; with prompt_masked the
    first p tokens (a random prompt, BOS included) have loss_mask 0, the rest 1, and at least
    one target remains. loss_mask[0] is always 0 (token 0 is never predicted)."""
    generator = numpy.random.default_rng(seed)
    samples = []
    for length in lengths:
        if length < 3:
            raise OracleError(f"sample length {length} < 3")
        tokens = [BOS_ID] + [int(t) for t in generator.integers(3, vocab_size, length - 2)]
        tokens.append(EOS_ID)
        prompt = int(generator.integers(1, length - 1)) if prompt_masked else 1
        loss_mask = [0] * prompt + [1] * (length - prompt)
        samples.append((tokens, loss_mask))
    return samples


def write_data(data_dir, samples, vocab_size, max_seq_len=128):
    """Writes samples as data_dir/train-00000.h5 through make_token_shard.write_shard."""
    os.makedirs(data_dir, exist_ok=True)
    shard = load_make_token_shard()
    shard.write_shard(os.path.join(data_dir, "train-00000.h5"), samples=samples,
                      vocab_size=vocab_size, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID,
                      max_seq_len=max_seq_len, split="train", source="test",
                      tokenizer_sha256="0" * 64)
    written, _ = shard.read_shard(os.path.join(data_dir, "train-00000.h5"))
    if [(list(t), list(m)) for t, m in written] != [(list(t), list(m)) for t, m in samples]:
        raise OracleError(f"{data_dir}/train-00000.h5 does not read back as the samples written")


def micro_batch(samples):
    """Pads samples on the right with PAD_ID to the longest one, as zerotune does.
    Returns input_ids [B, T] int64, labels [B, T] int64 (HF convention: labels[b, t] is the
    token at t when loss_mask[t] == 1, else IGNORE; the model shifts them), lengths [B]."""
    longest = max(len(tokens) for tokens, _ in samples)
    input_ids = torch.full((len(samples), longest), PAD_ID, dtype=torch.int64)  # [B, T]
    labels = torch.full((len(samples), longest), IGNORE, dtype=torch.int64)     # [B, T]
    for row, (tokens, loss_mask) in enumerate(samples):
        input_ids[row, :len(tokens)] = torch.tensor(tokens)
        for position in range(1, len(tokens)):
            if loss_mask[position]:
                labels[row, position] = tokens[position]
    return input_ids, labels, [len(tokens) for tokens, _ in samples]


def step_micro_batches(samples, step, micro_batch_size, accumulation):
    """The micro-batches of optimizer step `step` (0-based) with --no-shuffle on one process:
    micro-step j uses samples [step*G + j*micro, step*G + (j+1)*micro), G = micro*accum."""
    global_batch = micro_batch_size * accumulation
    first = step * global_batch
    return [micro_batch(samples[first + j * micro_batch_size: first + (j + 1) * micro_batch_size])
            for j in range(accumulation)]


def target_count(labels):
    return int((labels[:, 1:] != IGNORE).sum())


def cross_entropy_sum(logits, labels):
    """Sum of CE over targets: logits[b, t] predicts labels[b, t + 1]. logits [B, T, V]."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1, :].reshape(-1, vocab), labels[:, 1:].reshape(-1),
                           ignore_index=IGNORE, reduction="sum")


def forward_logits(model, input_ids):
    """Logits [B, T, V] in the model's dtype. LlamaForCausalLM.forward (transformers 4.40) ends
    with logits.float(), which would round a float64 reference to fp32; so run its decoder and
    lm_head directly. Works for a PEFT model too (LoRA lives inside those modules)."""
    causal_lm = model.get_base_model() if isinstance(model, peft.PeftModel) else model
    hidden = causal_lm.model(input_ids=input_ids)[0]  # [B, T, hidden]
    return causal_lm.lm_head(hidden)


def reference_step(model, micro_batches):
    """One global batch through the HF model: loss = sum CE / targets of ALL micro-batches,
    gradients accumulated over micro-batches into param.grad (zeroed first).
    Returns (loss, logits of micro-batch 0 [B, T, V])."""
    total_targets = sum(target_count(labels) for _, labels, _ in micro_batches)
    if total_targets == 0:
        raise OracleError("a global batch without targets")
    model.zero_grad(set_to_none=True)
    loss_sum = 0.0
    first_logits = None
    for input_ids, labels, _ in micro_batches:
        logits = forward_logits(model, input_ids)  # [B, T, V]
        ce = cross_entropy_sum(logits, labels)
        (ce / total_targets).backward()
        loss_sum += float(ce.detach())
        if first_logits is None:
            first_logits = logits.detach()
    return loss_sum / total_targets, first_logits


def check_oracle_self_consistency(report, model, samples):
    """Checks the oracle's own assumptions on the HF model:
    1. forward_logits (decoder + lm_head in float64) gives model(...).logits up to the fp32
       rounding transformers applies there;
    2. the manual loss equals model(labels=...).loss when nothing is padded and every token
       after the first is a target (transformers computes it on fp32 logits, hence 1e-6);
    3. a sample's logits at its real positions do not depend on right padding (the model is
       causal, so an all-ones attention mask is enough)."""
    with torch.no_grad():
        tokens = torch.tensor([samples[0][0]], dtype=torch.int64)  # [1, L]
        logits = forward_logits(model, tokens)  # [1, L, V]
        report.close("oracle self-check: forward_logits vs HF model(...).logits",
                     model(input_ids=tokens).logits, logits, rel_of_max=1e-6)
        hf_loss = float(model(input_ids=tokens, labels=tokens).loss)
        labels = tokens.clone()
        labels[:, 0] = IGNORE
        manual = float(cross_entropy_sum(logits, labels)) / (tokens.shape[1] - 1)
        report.scalar("oracle self-check: manual CE mean vs HF model(labels=...).loss", manual,
                      hf_loss, rel=1e-6)
        input_ids, _, lengths = micro_batch(samples)
        padded = forward_logits(model, input_ids)  # [B, T, V]
        worst = 0.0
        for row, (sample_tokens, _) in enumerate(samples):
            alone = forward_logits(model, torch.tensor([sample_tokens]))[0]  # [L, V]
            worst = max(worst, float((padded[row, :lengths[row]] - alone).abs().max()))
        # Not 0: HF's fp32 RMSNorm/RoPE inside the float64 model may round differently for
        # another batch shape (~1e-7); a padding leak would move logits by far more than 1e-6.
        report.check(worst <= 1e-6, f"oracle self-check: real-token logits do not depend on "
                     f"right padding (max diff {worst:.2e} <= 1e-6)")


# ---------------------------------------------------------------------------------------------
# zerotune outputs


def load_dump(path):
    if not os.path.exists(path):
        raise OracleError(f"zerotune did not write the --dump-step0 file {path}")
    return safetensors.torch.load_file(path)


def read_metrics(out_dir):
    """The training records (those with "loss" and "step") of OUT/metrics.jsonl, in order."""
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise OracleError(f"zerotune did not write {path}")
    records = []
    with open(path) as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise OracleError(f"{path}:{number}: not JSON: {error}") from error
            if "step" in record and "loss" in record:
                records.append(record)
    return records


def check_metrics_keys(report, records, path_hint):
    required = ["step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "skipped", "samples",
                "tokens", "samples_per_sec", "tokens_per_sec", "tflops_per_rank", "mfu",
                "mem_device_peak", "mem_host_rss"]
    missing = sorted({key for record in records for key in required if key not in record})
    report.check(not missing, f"{path_hint}: every record has the keys DESIGN.md lists"
                 + (f" (missing: {missing})" if missing else ""))


def compare_dump_logits(report, dump, reference_logits, lengths, what, atol):
    """zerotune's dump "logits" [B, T, V] (micro-batch 0) against the reference, compared only
    at real (unpadded) positions: what a padded position holds is not specified."""
    if "logits" not in dump:
        report.fail(f"{what}: the dump has no 'logits'")
        return
    got = dump["logits"]
    if tuple(got.shape) != tuple(reference_logits.shape):
        report.fail(f"{what}: dump logits shape {tuple(got.shape)} != reference "
                    f"{tuple(reference_logits.shape)} (micro-batch 0 padded to its longest)")
        return
    got_real = torch.cat([got[row, :length] for row, length in enumerate(lengths)])
    ref_real = torch.cat([reference_logits[row, :length] for row, length in enumerate(lengths)])
    report.close(f"{what} logits (real positions)", got_real, ref_real, atol=atol)


def compare_dump_loss(report, dump, reference_loss, what, rel):
    if "loss" not in dump:
        report.fail(f"{what}: the dump has no 'loss'")
        return
    report.check(dump["loss"].numel() == 1, f"{what}: dump 'loss' has one element")
    report.scalar(f"{what} loss", dump["loss"].reshape(-1)[0], reference_loss, rel=rel)


def compare_dump_grads(report, dump, reference_grads, what, rel_of_max):
    """Every trainable parameter's "grad.<name>" against the reference (a dict name -> grad),
    and no other grad.* entry (frozen weights have no gradients)."""
    dumped = {key[len("grad."):] for key in dump if key.startswith("grad.")}
    expected = set(reference_grads)
    report.check(dumped == expected,
                 f"{what}: the dump has a grad for exactly the {len(expected)} trainable "
                 f"parameters (missing: {sorted(expected - dumped)[:6]}, unexpected: "
                 f"{sorted(dumped - expected)[:6]})")
    for name in sorted(expected & dumped):
        report.close(f"{what} grad.{name}", dump["grad." + name], reference_grads[name],
                     rel_of_max=rel_of_max)


def compare_dumps_identical(report, first, second, what, atol):
    """Two dumps of zerotune (e.g. with and without activation checkpointing) must agree."""
    report.check(set(first) == set(second), f"{what}: same tensors in both dumps")
    worst, worst_name = 0.0, ""
    for name in sorted(set(first) & set(second)):
        if first[name].shape != second[name].shape:
            report.fail(f"{what}: {name} shape {tuple(first[name].shape)} vs "
                        f"{tuple(second[name].shape)}")
            continue
        diff = float((first[name].double() - second[name].double()).abs().max())
        if diff > worst:
            worst, worst_name = diff, name
    report.check(worst <= atol, f"{what}: max abs difference {worst:.3e} (in {worst_name or '-'})"
                 f" <= {atol:.0e}")


# ---------------------------------------------------------------------------------------------
# step-0 parity (test_llama_parity.py, test_lora_parity.py): one `--dump-step0` run against the
# float64 reference on the same global batch

# Six samples of different lengths in two micro-batches of 3: micro-batch 0 pads to 24 and
# micro-batch 1 to 20, so both carry right padding, and the prompt masks leave a different
# number of targets in each.
PARITY_LENGTHS = [8, 24, 13, 17, 11, 20]
PARITY_MICRO_BATCH, PARITY_ACCUMULATION = 3, 2

# Tolerances, zerotune in fp32 against the float64 reference. fp32 rounding over these short sums
# (K <= 96 in a GEMM, <= 24 positions, 6 samples) gives errors around 1e-6 of the values' scale
# (observed), so the bounds leave a margin of ~50x, while a real bug (wrong RoPE pair, eps, mask,
# a missing term in a backward, LoRA scaling) is off by 1e-3 or more.
LOGITS_ATOL = 1e-4       # logits are O(1)
LOSS_REL = 1e-5
GRAD_REL_OF_MAX = 1e-4   # max abs error <= 1e-4 * max|reference grad| of that tensor
SAME_RUN_ATOL = 1e-6     # a rerun (activation checkpointing, same seed) changes nothing


def run_step0_dump(zerotune, model_dir, data_dir, run_dir, extra=(), steps=1):
    """`steps` optimizer steps of `zerotune train` on the parity layout with --dump-step0;
    returns (dump, out_dir). extra: more flags (--adapter DIR, --activation-checkpointing)."""
    out_dir = os.path.join(run_dir, "out")
    dump_path = os.path.join(run_dir, "dump.safetensors")
    run_zerotune(zerotune, ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
                            "--no-shuffle", "--max-steps", steps,
                            "--micro-batch-size", PARITY_MICRO_BATCH,
                            "--grad-accum", PARITY_ACCUMULATION,
                            "--dump-step0", dump_path] + list(extra))
    return load_dump(dump_path), out_dir


def parity_micro_batches(samples):
    return step_micro_batches(samples, 0, PARITY_MICRO_BATCH, PARITY_ACCUMULATION)


def compare_step0(report, label, dump, micro_batches, loss, logits, grads):
    """The whole dump against the reference: fp32 tensors, logits of micro-batch 0 at real
    positions, the global-batch loss, and a gradient for exactly the trainable parameters."""
    what = f"[{label}]"
    report.check(all(t.dtype == torch.float32 for t in dump.values()),
                 f"{what} every dumped tensor is fp32")
    compare_dump_logits(report, dump, logits, micro_batches[0][2], what, atol=LOGITS_ATOL)
    compare_dump_loss(report, dump, loss, what, rel=LOSS_REL)
    compare_dump_grads(report, dump, grads, what, rel_of_max=GRAD_REL_OF_MAX)


# ---------------------------------------------------------------------------------------------
# DeepSpeed semantics (formulas from deepspeed/runtime/utils.py and lr_schedules.py)


def deepspeed_clip_coefficient(total_norm, clip):
    """deepspeed.runtime.utils.clip_grad_norm_: clip_coef = min(1, clip / (norm + 1e-6)); the
    ZeRO optimizers do the same as (norm + 1e-6) / clip > 1 -> grads /= that."""
    if clip <= 0.0:
        return 1.0
    return min(1.0, clip / (total_norm + 1e-6))


def deepspeed_warmup_decay_lrs(updates, total_num_steps, warmup_min_lr, warmup_max_lr,
                               warmup_num_steps, warmup_type):
    """The lr each of the first `updates` optimizer updates uses under DeepSpeed's
    WarmupDecayLR, replaying what DeepSpeed does:
    - the constructor sets last_batch_iteration = -1 and (since DeepSpeed 0.15.3, PR #6597) writes
      get_lr() into the optimizer, and get_lr() at iteration < 0 is warmup_min_lr;
    - the engine calls scheduler.step() after every applied update (iteration += 1).
    So update 1 uses warmup_min_lr and update k >= 2 uses lr(iteration k - 2), where
    lr(i) = min + (max - min) * gamma(i) and gamma(i) = i / W (linear) or log(i + 1) / log(W)
    (log) for i < W, else max(0, (total - i) / max(1, total - W)); W = max(2, warmup_num_steps)."""
    warmup = max(2, warmup_num_steps)

    def lr_at(iteration):
        if iteration < 0:
            return warmup_min_lr
        if iteration < warmup:
            if warmup_type == "linear":
                gamma = iteration / warmup
            else:
                gamma = math.log(iteration + 1) / math.log(warmup)
        else:
            gamma = max(0.0, float(total_num_steps - iteration) /
                        float(max(1.0, total_num_steps - warmup)))
        return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma

    return [lr_at(update - 2) for update in range(1, updates + 1)]


def decay_parameter_groups(model, weight_decay):
    """torch AdamW parameter groups as zerotune/DeepSpeed-Chat build them: weight decay on the
    weights of Linear and Embedding modules (LoRA A/B included), none on norm weights/biases.
    Only trainable parameters."""
    decayed = set()
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            decayed.add(id(module.weight))
    decay, no_decay = [], []
    for _, parameter in model.named_parameters():
        if parameter.requires_grad:
            (decay if id(parameter) in decayed else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def global_grad_norm(parameters):
    """L2 norm over all gradients of the trainable parameters (DeepSpeed's total_norm)."""
    squares = [p.grad.detach().double().pow(2).sum() for p in parameters if p.grad is not None]
    return float(torch.stack(squares).sum().sqrt())


# ---------------------------------------------------------------------------------------------
# trajectories (test_training_trajectory.py, test_family_trajectory.py): a few optimizer steps of
# `zerotune train` against torch AdamW on the same micro-batches, step by step

# fp32 zerotune against a float64 loop. After k AdamW updates the parameters differ by the
# fp32 noise of the gradients pushed through Adam, which moves the loss by <= 3e-8 and the grad
# norm by <= 1e-7 relative (observed), hence bounds 30-100x above that. They are tighter than
# 1e-5 / 1e-4 on purpose: with these small lrs, no weight decay at all (full run: grad norm
# -3.7e-5 at update 5) or beta2 0.999 instead of 0.95 (loss 1.2e-5, grad norm 1.5e-4) would
# otherwise pass; a wrong lr at one update or missing clipping moves things by 1e-4 or more.
TRAJECTORY_LOSS_REL = 1e-6
TRAJECTORY_GRAD_NORM_REL = 1e-5
TRAJECTORY_LR_REL = 1e-9


def reference_trajectory(model, samples, steps, lrs, betas, eps, weight_decay, clip,
                         micro_batch_size, accumulation, make_optimizer=None):
    """torch AdamW (or make_optimizer(parameter groups, lr)) on the micro-batches zerotune uses;
    returns per update (loss, grad_norm, clipped). Gradients are clipped the DeepSpeed way
    before the update."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = decay_parameter_groups(model, weight_decay)
    if make_optimizer is None:
        optimizer = torch.optim.AdamW(groups, lr=lrs[0], betas=betas, eps=eps)
    else:
        optimizer = make_optimizer(groups, lrs[0])
    history = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lrs[step]
        loss, _ = reference_step(model, step_micro_batches(samples, step, micro_batch_size,
                                                           accumulation))
        norm = global_grad_norm(trainable)
        coefficient = deepspeed_clip_coefficient(norm, clip)
        with torch.no_grad():
            for parameter in trainable:
                parameter.grad.mul_(coefficient)
        optimizer.step()
        history.append((loss, norm, coefficient < 1.0))
    return history


def check_some_clipped(report, label, history):
    """The oracle's data must exercise both branches of clipping."""
    clipped = [update + 1 for update, (_, _, c) in enumerate(history) if c]
    report.check(0 < len(clipped) < len(history), f"[{label}] oracle: clipping triggers at some "
                 f"updates but not all (clipped updates {clipped}, norms "
                 f"{[round(n, 4) for _, n, _ in history]})")


def compare_trajectory(report, label, records, history, lrs):
    if not report.check(len(records) == len(history),
                        f"[{label}] metrics.jsonl has {len(history)} training records "
                        f"(has {len(records)})"):
        return
    check_metrics_keys(report, records, f"[{label}] metrics.jsonl")
    for index, (record, (loss, norm, clipped)) in enumerate(zip(records, history)):
        update = index + 1
        report.check(record["step"] == update, f"[{label}] record {update} has step "
                     f"{record['step']} == {update}")
        report.scalar(f"[{label}] update {update} loss", record["loss"], loss, rel=TRAJECTORY_LOSS_REL)
        report.scalar(f"[{label}] update {update} grad_norm (before clipping; the reference "
                      f"{'clips' if clipped else 'does not clip'})", record["grad_norm"], norm,
                      rel=TRAJECTORY_GRAD_NORM_REL)
        report.scalar(f"[{label}] update {update} lr", record["lr"], lrs[index], rel=TRAJECTORY_LR_REL)
        report.check(not record["skipped"], f"[{label}] update {update} not skipped")


# ---------------------------------------------------------------------------------------------
# export (test_export.py, test_family_export.py)

EXPORT_TRAIN_STEPS = 3


def train_for_export(zerotune, model_dir, data_dir, out_dir, extra=()):
    """EXPORT_TRAIN_STEPS steps at lr 1e-2 on the parity layout with a checkpoint at the end;
    returns (the checkpoint directory, {name: trained tensor} from --dump-final)."""
    run_zerotune(zerotune, ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
                            "--no-shuffle", "--max-steps", EXPORT_TRAIN_STEPS,
                            "--micro-batch-size", PARITY_MICRO_BATCH, "--grad-accum", PARITY_ACCUMULATION,
                            "--lr", "1e-2", "--dump-final", os.path.join(out_dir, "final.safetensors")]
                 + list(extra))
    return (os.path.join(out_dir, "checkpoints", f"global_step{EXPORT_TRAIN_STEPS}"),
            load_dump(os.path.join(out_dir, "final.safetensors")))


def run_export(zerotune, checkpoint, model_dir, out_dir, *flags):
    run_zerotune(zerotune, ["export", "--checkpoint", checkpoint, "--model", model_dir, "--out", out_dir]
                 + list(flags))


def check_refused(zerotune, report, label, arguments, needle):
    """`zerotune ARGUMENTS` exits non-zero with `needle` in its stderr."""
    command = [zerotune] + [str(a) for a in arguments]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report.check(result.returncode != 0 and needle in result.stderr,
                 f"{label}: refused, naming {needle!r} (status {result.returncode}: "
                 f"{result.stderr.strip()[-200:]})")


def check_zerotune_logits(zerotune, report, label, model_dir, data_dir, run_dir, samples, reference_model,
                          extra=()):
    """zerotune's step-0 logits on the exported weights against the reference model's."""
    dump, _ = run_step0_dump(zerotune, model_dir, data_dir, run_dir, list(extra))
    micro_batches = parity_micro_batches(samples)
    _, logits = reference_step(reference_model, micro_batches)
    compare_dump_logits(report, dump, logits, micro_batches[0][2], f"[{label}] zerotune vs HF/PEFT",
                        atol=LOGITS_ATOL)


# ---------------------------------------------------------------------------------------------
# bf16 (test_bf16_model.py, test_family_bf16.py): zerotune's bf16 model has the error size of HF
# transformers' bf16 model, both against the float64 model

BF16_DEEPSPEED = {"bf16": {"enabled": True}}

# Error-size bands: ratio = (zerotune-bf16 error) / (HF-bf16 error), both against the float64
# model, as max-abs and as rms over the compared values; (low, high) per kind. Measured over 6
# seeds (500 and 600..640; LoRA 520 and 605..645):
#   logits (real positions)  rms ratio 0.85..0.97   max-abs ratio 0.66..1.33
#     (rms errors ~1.0e-2..1.3e-2 for logits of rms ~0.8; zerotune-fp32's rms error ~4e-7)
#   gradients (7 tensors)    rms ratio 0.80..1.28   max-abs ratio 0.64..1.76
# test_family_bf16.py, 10 seeds (700..790) each of OPT and Qwen2 with tied heads:
#   logits                   rms ratio 0.78..0.96   max-abs ratio 0.59..1.08
#   gradients (7 tensors)    rms ratio 0.70..1.19   max-abs ratio 0.45..1.61
#   bf16 vs fp32 logits      1.6..2.0 ulps (OPT), 2.3..3.0 (Qwen2); loss <= 0.19 x the rms logit error
# The rms over ~10^4 (logits) or >= 64 (gradients) values is stable, the max of them is noisier,
# hence the wider max-abs bands. They fail an fp32 model (ratio ~4e-5), a model that computes in
# fp32 and rounds only its logits to bf16 (rms ratio ~0.1, checked below), and a model that rounds
# more often or in worse places, or loses precision in the gradient accumulation (ratio > 2).
LOGITS_BANDS = {"rms": (0.7, 1.4), "max-abs": (0.5, 2.0)}
GRAD_BANDS = {"rms": (0.6, 1.6), "max-abs": (0.35, 3.0)}
# zerotune bf16 vs zerotune fp32 logits: rms difference of at least this many bf16 ulps of the
# rms logit (bf16 ulp at x: 2^(floor(log2 x) - 7)). Measured 2.5..3.4 ulps; rounding only the
# final logits of an fp32 model moves them by ~0.3 ulp rms (ulp / sqrt(12)).
MIN_BF16_ULPS_MOVED = 1.0
# Loss: |zerotune-bf16 - float64| <= LOSS_OF_LOGIT_RMS x HF-bf16's rms logit error. A token's CE
# error is of the size of its logits' error, and the mean over ~200 targets cancels most of it:
# measured zerotune-bf16 5e-5..1.6e-3 (HF-bf16 3e-5..1.3e-3), i.e. <= 0.14 x the rms logit error
# (~1.1e-2); a loss rounded to bf16 (ulp 0.03 at 6) would be off by ~8e-3 on average.
LOSS_OF_LOGIT_RMS = 0.5


def bf16_roundtrip(tensor):
    return tensor.to(torch.bfloat16).to(tensor.dtype)


def real_positions(logits, lengths):
    """[sum(lengths), V]: the rows of logits [B, T, V] at unpadded positions."""
    return torch.cat([logits[row, :length] for row, length in enumerate(lengths)])


def error_sizes(got, exact):
    """(max abs error, rms error) of got against exact, in float64."""
    diff = got.detach().double() - exact.detach().double()
    return float(diff.abs().max()), float(diff.pow(2).mean().sqrt())


def error_ratios(got, hf_bf16, exact):
    """{"max-abs": ..., "rms": ...}: (got's error, HF-bf16's error, their ratio) against exact."""
    result = {}
    for kind, got_error, hf_error in zip(("max-abs", "rms"), error_sizes(got, exact),
                                         error_sizes(hf_bf16, exact)):
        ratio = got_error / hf_error if hf_error > 0 else float("inf")
        result[kind] = (got_error, hf_error, ratio)
    return result


def check_error_ratio(report, what, zerotune, hf_bf16, exact, bands):
    """zerotune-bf16's max-abs and rms error against exact, each within its band (low, high)
    times HF-bf16's; prints both errors so the report shows the measured sizes."""
    for kind, (zt_error, hf_error, ratio) in error_ratios(zerotune, hf_bf16, exact).items():
        low, high = bands[kind]
        report.check(low <= ratio <= high,
                     f"{what}: {kind} error vs float64: zerotune-bf16 {zt_error:.3e}, HF-bf16 "
                     f"{hf_error:.3e}, ratio {ratio:.2f} in [{low}, {high}]")


def torch_bf16_matmul_accumulates_in_fp32():
    """Whether this CPU's torch multiplies bf16 matrices as the GPUs (and the bands above) do:
    products summed in fp32, the result rounded once. torch 1.13 on a CPU with AVX512_BF16 does
    (oneDNN); on one without it (an AMD EPYC with AVX2 only, 2026-11-28) its bf16 GEMM was 11-22x
    less accurate than that (rms error of a [64, 512] x [512, 64] product), which made HF-bf16's
    gradients less accurate than zerotune's bf16 ones (ratios 0.14..0.59, under the bands)."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(64, 512, generator=generator).bfloat16()
    b = torch.randn(512, 64, generator=generator).bfloat16()
    exact = a.double() @ b.double()
    torch_error = float(((a @ b).double() - exact).pow(2).mean().sqrt())
    fp32_error = float(((a.float() @ b.float()).bfloat16().double() - exact).pow(2).mean().sqrt())
    return torch_error <= 2.0 * fp32_error


@contextlib.contextmanager
def bf16_matmuls_accumulating_in_fp32():
    """Within it, torch's bf16 F.linear, matmul and bmm (what HF's models and PEFT's adapters
    call) take fp32 copies of their bf16 operands and round the fp32 result to bf16, as a GPU's
    bf16 GEMM and torch on an AVX512_BF16 CPU do; the backward of those casts rounds the operand
    gradients to bf16 as theirs do. Without effect where torch already multiplies that way."""
    if torch_bf16_matmul_accumulates_in_fp32():
        yield
        return
    print("oracle: this CPU's torch sums bf16 products in bf16: HF-bf16 runs its matmuls in fp32, rounded to bf16, "
          "as a GPU does", flush=True)

    def fp32_accumulating(op):
        def call(*args, **kwargs):
            if not any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args):
                return op(*args, **kwargs)
            wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args]
            return op(*wide, **kwargs).bfloat16()
        return call

    functional = torch.nn.functional
    saved = (functional.linear, torch.matmul, torch.bmm)
    functional.linear, torch.matmul, torch.bmm = (fp32_accumulating(op) for op in saved)
    try:
        yield
    finally:
        functional.linear, torch.matmul, torch.bmm = saved


def hf_bf16_step(model, micro_batches):
    """HF in bf16 on one global batch, as DeepSpeed's bf16 mode runs it: each micro-batch's loss
    is CE on logits.float() over the targets divided by the global target count, its bf16
    param.grad is widened and accumulated in fp32 (DeepSpeed accumulates bf16 gradients in fp32).
    Returns (loss, bf16 logits of micro-batch 0 [B, T, V], {name: fp32 gradient})."""
    total_targets = sum(target_count(labels) for _, labels, _ in micro_batches)
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = {name: torch.zeros(p.shape, dtype=torch.float32) for name, p in trainable}
    loss_sum, first_logits = 0.0, None
    for input_ids, labels, _ in micro_batches:
        model.zero_grad(set_to_none=True)
        with bf16_matmuls_accumulating_in_fp32():  # (the bands assume GPU-like bf16 GEMMs)
            logits = forward_logits(model, input_ids)  # [B, T, V] bf16
            ce = cross_entropy_sum(logits.float(), labels)
            (ce / total_targets).backward()
        loss_sum += float(ce.detach())
        for name, parameter in trainable:
            grads[name] += parameter.grad.float()
        if first_logits is None:
            first_logits = logits.detach()
    return loss_sum / total_targets, first_logits, grads


def write_bf16_deepspeed(run_dir):
    path = os.path.join(run_dir, "ds_bf16.json")
    os.makedirs(run_dir, exist_ok=True)
    with open(path, "w") as stream:
        json.dump(BF16_DEEPSPEED, stream)
    return path


def run_dtype_dump(zerotune, run_dir, model_dir, data_dir, bf16, extra=()):
    """zerotune's step-0 dump (one step of the parity layout), in bf16 or fp32."""
    flags = list(extra)
    if bf16:
        flags += ["--deepspeed", write_bf16_deepspeed(run_dir)]
    dump, _ = run_step0_dump(zerotune, model_dir, data_dir, run_dir, flags)
    return dump


def check_bf16_logits(report, label, dump_bf16, dump_fp32, hf_bf16_logits, exact_logits, lengths):
    """Step-0 logits: bf16-exact values, moved from fp32, error of HF-bf16's size."""
    what = f"[{label}] logits"
    got = dump_bf16["logits"]  # [B, T, V] fp32 in the file, bf16 values
    if not report.check(tuple(got.shape) == tuple(exact_logits.shape),
                        f"{what}: dump shape {tuple(got.shape)} == {tuple(exact_logits.shape)}"):
        return
    not_bf16 = int((bf16_roundtrip(got) != got).sum())
    report.check(not_bf16 == 0, f"{what}: every dumped bf16-run logit is a bf16 value "
                 f"({not_bf16} of {got.numel()} are not)")
    fp32_not_bf16 = int((bf16_roundtrip(dump_fp32["logits"]) != dump_fp32["logits"]).sum())
    report.check(fp32_not_bf16 > got.numel() // 2,
                 f"{what}: oracle: the fp32-run logits are not bf16 values ({fp32_not_bf16} of "
                 f"{got.numel()} are not), so the check above can fail")

    zt_bf16 = real_positions(got, lengths).double()
    zt_fp32 = real_positions(dump_fp32["logits"], lengths).double()
    exact = real_positions(exact_logits, lengths).double()
    hf_bf16 = real_positions(hf_bf16_logits, lengths).double()
    rms_logit = float(exact.pow(2).mean().sqrt())
    ulp = 2.0 ** (torch.floor(torch.log2(torch.tensor(rms_logit))).item() - 7)
    moved = float((zt_bf16 - zt_fp32).pow(2).mean().sqrt())
    report.check(moved >= MIN_BF16_ULPS_MOVED * ulp,
                 f"{what}: bf16 run differs from the fp32 run: rms diff {moved:.3e} = "
                 f"{moved / ulp:.1f} bf16 ulps of the rms logit {rms_logit:.3f} "
                 f">= {MIN_BF16_ULPS_MOVED}")
    fp32_max, fp32_rms = error_sizes(zt_fp32, exact)
    between_max, between_rms = error_sizes(zt_bf16, hf_bf16)
    print(f"      {what}: zerotune-fp32 error vs float64: max {fp32_max:.3e} rms {fp32_rms:.3e};"
          f" zerotune-bf16 vs HF-bf16: max {between_max:.3e} rms {between_rms:.3e}")
    # The band can fail: an fp32 model that only rounds its logits to bf16 falls below it.
    _, _, rounded_only = error_ratios(bf16_roundtrip(exact.float()), hf_bf16, exact)["rms"]
    report.check(rounded_only < LOGITS_BANDS["rms"][0],
                 f"{what}: oracle: float64 logits rounded to bf16 have rms error ratio "
                 f"{rounded_only:.2f} < {LOGITS_BANDS['rms'][0]} (below the band)")
    check_error_ratio(report, what + " (real positions)", zt_bf16, hf_bf16, exact, LOGITS_BANDS)

def check_bf16_loss(report, label, dump_bf16, exact_loss, hf_loss, exact_logits, hf_logits, lengths):
    """The bf16 run's step-0 loss is within LOSS_OF_LOGIT_RMS x HF-bf16's rms logit error of the
    float64 loss."""
    zt_loss = float(dump_bf16["loss"].reshape(-1)[0])
    hf_error, zt_error = abs(hf_loss - exact_loss), abs(zt_loss - exact_loss)
    hf_rms_logit_error = error_sizes(real_positions(hf_logits, lengths), real_positions(exact_logits, lengths))[1]
    bound = LOSS_OF_LOGIT_RMS * hf_rms_logit_error
    report.check(zt_error <= bound,
                 f"[{label}] loss: float64 {exact_loss:.6f}, HF-bf16 {hf_loss:.6f} (error "
                 f"{hf_error:.2e}), zerotune-bf16 {zt_loss:.6f} (error {zt_error:.2e} <= "
                 f"{bound:.2e}); zerotune-bf16 vs HF-bf16 {abs(zt_loss - hf_loss):.2e}")


def check_bf16_grads(report, label, dump_bf16, hf_grads, exact_grads, names):
    """The gradients of `names` have HF-bf16's error size (GRAD_BANDS) against float64."""
    for name in names:
        key = "grad." + name
        if not report.check(key in dump_bf16, f"[{label}] the dump has {key}"):
            continue
        check_error_ratio(report, f"[{label}] {key}", dump_bf16[key], hf_grads[name], exact_grads[name],
                          GRAD_BANDS)

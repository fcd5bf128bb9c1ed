# Oracle: every architecture row beside LLaMA's against HF transformers, step 0 in fp32.
# A tiny random model of each family (and variant) is saved by transformers in fp32; `zerotune
# train --dump-step0` trains it one step on two padded micro-batches, and its logits (micro-batch
# 0, real positions), the global-batch loss and the gradient of every parameter must match the HF
# model run in float64 on the same batches (tolerances: oracle_common.py, "step-0 parity").
# Cases: OPT pre-LN with tied head and biases; OPT-350m's shape (post-LN, word_embed_proj_dim
# with project_in/out, no final LayerNorm); OPT without LayerNorm affine parameters or biases;
# OPT with an untied head; Mistral (GQA, a sliding window longer than the data); Qwen2 (q/k/v
# biases, tied head); LLaMA with a tied head; LLaMA 3.1's rope_scaling "llama3" (transformers
# 4.40 has no such type: the reference model gets the llama3 frequencies written into its
# rotary embeddings by the formula of transformers' _compute_llama3_parameters). Biases, norm
# weights and norm biases are randomised so that ignoring any of them is caught, and each
# variant is checked to move the logits far beyond the tolerance (so the case can fail).
import json
import math
import os
import shutil

import oracle_common as oc

torch = oc.torch
transformers = oc.transformers

TINY_OPT = dict(vocab_size=128, hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                layerdrop=0.0, bos_token_id=oc.BOS_ID, eos_token_id=oc.EOS_ID, pad_token_id=oc.PAD_ID,
                init_std=0.1)
TINY_SHAPE = dict((k, oc.TINY_LLAMA[k]) for k in (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings", "bos_token_id",
    "eos_token_id", "pad_token_id"))
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}

CASES = [
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


def llama3_inv_freq(head_dim, theta, scaling):
    """transformers' _compute_llama3_parameters (4.43+), in fp32 tensors with Python-float
    scalars as there: the reference for a rope_scaling transformers 4.40 cannot parse."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def set_rope_frequencies(model, inv_freq):
    """Writes inv_freq into every rotary embedding of a transformers 4.40 LLaMA model."""
    count = 0
    for module in model.modules():
        if hasattr(module, "inv_freq") and module.inv_freq.shape == inv_freq.shape:
            module.inv_freq.copy_(inv_freq.to(module.inv_freq.dtype))
            count += 1
    if count == 0:
        raise oc.OracleError("no rotary embedding found to set the llama3 frequencies in")


def make_model(model_dir, seed, config_class, model_class, settings):
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
    model = model.to(torch.float32)
    model.save_pretrained(model_dir, safe_serialization=True)
    return config


def load_reference(model_dir, model_class, rope_scaling=None):
    """The HF model in float64 with eager attention. The default dtype is float64 from here on:
    transformers 4.40 builds the causal masks of OPT, Mistral and Qwen2 with torch.full in the
    default dtype, which cannot hold float64's minimum when it is float32."""
    torch.set_default_dtype(torch.float64)
    model = getattr(transformers, model_class).from_pretrained(
        model_dir, torch_dtype=torch.float64, attn_implementation="eager")
    if rope_scaling is not None:
        config = model.config
        head_dim = config.hidden_size // config.num_attention_heads
        set_rope_frequencies(model, llama3_inv_freq(head_dim, config.rope_theta, rope_scaling))
    model.train()  # dropout 0 everywhere: train() changes nothing numerically
    return model


def check_sensitive(report, label, variant_logits, logits):
    moved = float((variant_logits - logits).abs().max())
    report.check(moved > 10 * oc.LOGITS_ATOL, f"[{label}] the variant matters: the base model's logits differ "
                 f"by {moved:.2e} > 10 x the logits tolerance")


def run_case(args, report, tmp, label, config_class, model_class, settings, seed):
    run_dir = os.path.join(tmp, label)
    model_dir = os.path.join(run_dir, "model")
    data_dir = os.path.join(run_dir, "data")
    config = make_model(model_dir, seed, config_class, model_class, settings)
    rope_scaling, zerotune_model_dir = None, model_dir
    if label == "llama3_rope":  # zerotune reads the llama3 rope_scaling from (a copy of) config.json
        rope_scaling, zerotune_model_dir = LLAMA3_SCALING, os.path.join(run_dir, "model-llama3")
        shutil.copytree(model_dir, zerotune_model_dir)
        path = os.path.join(zerotune_model_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        saved["rope_scaling"] = rope_scaling
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)
    samples = oc.make_samples(seed + 1, oc.PARITY_LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    dump, _ = oc.run_step0_dump(args.zerotune, zerotune_model_dir, data_dir, run_dir)

    model = load_reference(model_dir, model_class, rope_scaling)
    micro_batches = oc.parity_micro_batches(samples)
    loss, logits = oc.reference_step(model, micro_batches)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    # Without RoPE (OPT) a key projection's bias shifts every score of a query row by the same
    # amount, which softmax ignores: its true gradient is exactly 0, and zerotune's is fp32
    # rounding of a sum that cancels. A relative bound means nothing there; it must be tiny next
    # to the query bias's. (With RoPE, Qwen2's, the bias is rotated per position: a real gradient.)
    for name in [n for n in grads if n.endswith("k_proj.bias") and config.model_type == "opt"]:
        scale = float(grads[name.replace("k_proj", "q_proj")].abs().max())
        report.check(float(dump["grad." + name].abs().max()) <= 1e-5 * scale,
                     f"[{label}] grad.{name} is ~0 (max {float(dump['grad.' + name].abs().max()):.2e} <= 1e-5 x "
                     f"max|grad q_proj.bias| {scale:.2e})")
        grads[name] = dump["grad." + name].double()  # compared above; keeps the name set check exact
    oc.compare_step0(report, label, dump, micro_batches, loss, logits, grads)
    if rope_scaling is not None:  # the plain-RoPE model of the same weights is far away
        with torch.no_grad():
            plain = oc.forward_logits(load_reference(model_dir, model_class), micro_batches[0][0])
        check_sensitive(report, label, plain, logits)
    tied = getattr(config, "tie_word_embeddings", False)
    dumped_head = any(key == "grad.lm_head.weight" for key in dump)
    report.check(dumped_head != tied, f"[{label}] lm_head.weight is {'the embedding (no gradient of its own)' if tied else 'its own parameter'}")


def main():
    args = oc.parse_args("zerotune vs HF transformers for OPT, Mistral, Qwen2, tied heads, llama3 rope")
    report = oc.Report("family parity (OPT, Mistral, Qwen2, tied heads, llama3 rope) vs HF, step 0, fp32")
    with oc.temporary_directory(args, "zt_oracle_family_") as tmp:
        for index, (label, config_class, model_class, settings) in enumerate(CASES):
            oc.run_guarded(report, label, run_case, args, report, tmp, label, config_class, model_class, settings,
                           seed=100 + 7 * index)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

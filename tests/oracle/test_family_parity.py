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

# The cases (label, config class, model class, settings) and their models: oracle_common.py
# ("the other architecture rows"); the LoRA, trajectory, export and bf16 family tests use them too.
CASES = oc.FAMILY_CASES
make_model = oc.make_family_model
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}

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


def load_reference(model_dir, model_class, rope_scaling=None):
    """The HF model in float64 with eager attention (oc.load_reference_family), with the llama3
    frequencies written into its rotary embeddings when rope_scaling is given."""
    model = oc.load_reference_family(model_dir, model_class)
    if rope_scaling is not None:
        config = model.config
        head_dim = config.hidden_size // config.num_attention_heads
        set_rope_frequencies(model, llama3_inv_freq(head_dim, config.rope_theta, rope_scaling))
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

# Oracle: a few optimizer steps of `zerotune train` on the other architecture rows against a torch
# training loop on the same batches, step by step (loss, grad_norm, lr from OUT/metrics.jsonl),
# as test_training_trajectory.py does for LLaMA; the reference loop and tolerances are
# oracle_common.py's ("trajectories").
# 1. OPT pre-LN with its tied head, full fine-tuning, 6 updates from a DeepSpeed JSON (AdamW betas
#    0.9/0.95, weight decay 0.1 on Linear/Embedding weights (token and position tables included),
#    none on biases and LayerNorms; clipping at 1.0 triggering at some updates; WarmupDecayLR);
#    reference: HF in float64 + torch AdamW. The tied table gets the gradient of the lookup and of
#    the head: the trained table (--dump-final) must match the reference's, and the oracle checks
#    that a loop that trains the head apart from the table (untied) ends far from both.
# 2. Qwen2 with a tied head (q/k/v biases, GQA, RoPE), the same schedule: the LLaMA-family variant.
# 3. OPT-350m's shape (post-LN, project_in/out) with LoRA all-linear (project_in/out adapted, a
#    PEFT adapter with random B from --adapter), 4 updates with --lr/--weight-decay/--gradient-
#    clipping flags; reference: PEFT + torch AdamW.
import json
import os

import oracle_common as oc

torch = oc.torch

# The same schedule, clipping and global batches as LLaMA's trajectory (see there why they
# exercise both branches of clipping).
from test_training_trajectory import ACCUMULATION, DEEPSPEED_CONFIG, FULL_BATCHES, FULL_STEPS, MICRO_BATCH  # noqa: E402,F401
# HF's default init (0.02) as a real fine-tuning start; positions up to 96 need 128 rows.
FULL_OVERRIDES = {"opt": dict(init_std=0.02, max_position_embeddings=128),
                  "qwen2": dict(initializer_range=0.02)}
# The trained weights (--dump-final) against the float64 loop's after FULL_STEPS updates: max abs
# difference <= this x max|weight| of the tensor. The weights move by ~lr = 1e-3 per update; fp32
# gradient noise through Adam moves them by ~1e-8, more where a gradient element is near 0 and
# Adam normalises the noise (observed: <= 1.6e-6 of max|weight| for q/k weights, 2.5e-6 for a
# Qwen2 key bias, ~1e-7 elsewhere); training the head apart from the tied table moves the table
# by 5e-2 of its max.
FINAL_WEIGHT_REL_OF_MAX = 1e-5

LORA_STEPS = 4
LORA_LR, LORA_WEIGHT_DECAY, LORA_CLIP = 2e-3, 0.1, 0.8  # the clip: between the updates' norms
LORA_BETAS, LORA_EPS = (0.9, 0.999), 1e-8


def write_full_case(tmp, label, seed):
    run_dir = os.path.join(tmp, label)
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    config_class, model_class, settings = oc.family_case(label, **FULL_OVERRIDES[label])
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    samples = []
    for update, (lengths, prompt_masked) in enumerate(FULL_BATCHES):
        samples += oc.make_samples(seed + 1 + update, lengths, config.vocab_size, prompt_masked)
    oc.write_data(data_dir, samples, config.vocab_size)
    return run_dir, model_dir, data_dir, model_class, config, samples


def untied_copy(model_dir, model_class, out_dir):
    """The same weights with tie_word_embeddings false (lm_head a copy of the table): a model
    whose head trains apart from its embedding."""
    model = oc.load_reference_family(model_dir, model_class, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    untied = type(model)(model.config).to(torch.float32)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = model.get_input_embeddings().weight.detach().clone()
    untied.load_state_dict(state)
    untied.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def run_full(args, report, tmp, label, seed):
    run_dir, model_dir, data_dir, model_class, config, samples = write_full_case(tmp, label, seed)
    out_dir = os.path.join(run_dir, "out")
    ds_path = os.path.join(run_dir, "ds_config.json")
    with open(ds_path, "w") as stream:
        json.dump(DEEPSPEED_CONFIG, stream, indent=2)
    final_path = os.path.join(run_dir, "final.safetensors")
    oc.run_zerotune(args.zerotune, ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
                                    "--deepspeed", ds_path, "--no-shuffle", "--max-steps", FULL_STEPS,
                                    "--dump-final", final_path])
    records = oc.read_metrics(out_dir)
    final = oc.load_dump(final_path)

    lrs = oc.deepspeed_warmup_decay_lrs(FULL_STEPS, **DEEPSPEED_CONFIG["scheduler"]["params"])
    optimizer = DEEPSPEED_CONFIG["optimizer"]["params"]
    hyper = (tuple(optimizer["betas"]), optimizer["eps"], optimizer["weight_decay"],
             DEEPSPEED_CONFIG["gradient_clipping"], MICRO_BATCH, ACCUMULATION)
    model = oc.load_reference_family(model_dir, model_class)
    embedding = model.get_input_embeddings().weight
    report.check(model.get_output_embeddings().weight is embedding,
                 f"[{label}] oracle: the HF head is the embedding table (tied)")
    history = oc.reference_trajectory(model, samples, FULL_STEPS, lrs, *hyper)
    oc.check_some_clipped(report, label, history)
    oc.compare_trajectory(report, label, records, history, lrs)

    # The trained weights: every trainable tensor, the tied table once, no lm_head of its own.
    state = {name: p.detach() for name, p in model.named_parameters()}  # tied: lm_head.weight not listed
    report.check(set(final) == set(state), f"[{label}] --dump-final holds exactly HF's {len(state)} parameters "
                 f"(lm_head.weight is the table: {'lm_head.weight' in final})")
    table = [n for n in state if n.endswith("embed_tokens.weight")][0]
    for name in sorted(set(final) & set(state)):
        if name == table or name.endswith("layers.0.self_attn.q_proj.weight") or name.endswith("norm.weight"):
            report.close(f"[{label}] trained {name} after {FULL_STEPS} updates", final[name], state[name],
                         rel_of_max=FINAL_WEIGHT_REL_OF_MAX)
    # OPT's key biases have an exact gradient of 0 (no RoPE: softmax ignores a shift shared by all
    # keys, see test_family_parity.py): Adam turns zerotune's fp32 rounding residue (~1e-10) into
    # updates of ~1e-2 x lr, the float64 reference's into ~0; they are left out.
    compared = sorted(n for n in set(final) & set(state)
                      if not (config.model_type == "opt" and n.endswith("k_proj.bias")))
    worst, worst_name = max((float((final[n].double() - state[n]).abs().max() / state[n].abs().max()), n)
                            for n in compared)
    report.check(worst <= FINAL_WEIGHT_REL_OF_MAX, f"[{label}] every trained tensor ({len(compared)}) within "
                 f"{FINAL_WEIGHT_REL_OF_MAX:.0e} of its max (worst {worst:.2e}, {worst_name})")

    # Sensitivity: the head trained apart from the table (the head's gradient not reaching the
    # table) ends elsewhere: the table far beyond its tolerance (observed 5.7e-2 of its max for
    # OPT, 5.5e-2 for Qwen2), the loss of the last update by 1.1e-5 (OPT) / 1.5e-4 (Qwen2).
    untied_dir = untied_copy(model_dir, model_class, os.path.join(run_dir, "untied"))
    untied = oc.load_reference_family(untied_dir, model_class)
    untied_history = oc.reference_trajectory(untied, samples, FULL_STEPS, lrs, *hyper)
    untied_table = untied.get_input_embeddings().weight.detach()
    moved = float((untied_table - state[table]).abs().max() / state[table].abs().max())
    loss_moved = abs(untied_history[-1][0] - history[-1][0]) / history[-1][0]
    report.check(moved > 100 * FINAL_WEIGHT_REL_OF_MAX and loss_moved > 5 * oc.TRAJECTORY_LOSS_REL,
                 f"[{label}] oracle: without the head's gradient in the table, the table ends {moved:.2e} of its "
                 f"max away (> 100 x its tolerance) and the last loss {loss_moved:.2e} relative away (> 5 x)")


def run_lora(args, report, tmp, label, seed):
    run_dir = os.path.join(tmp, label + "-lora")
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    adapter_dir, out_dir = os.path.join(run_dir, "adapter"), os.path.join(run_dir, "out")
    config_class, model_class, settings = oc.family_case(label)
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", False, 0.0, model_class=model_class)
    generator = oc.numpy.random.default_rng(seed)
    lengths = [int(n) for n in generator.integers(8, 25, LORA_STEPS * MICRO_BATCH * ACCUMULATION)]
    samples = oc.make_samples(seed + 1, lengths, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    oc.run_zerotune(args.zerotune, [
        "train", "--model", model_dir, "--data", data_dir, "--out", out_dir, "--adapter", adapter_dir,
        "--no-shuffle", "--max-steps", LORA_STEPS, "--micro-batch-size", MICRO_BATCH, "--grad-accum", ACCUMULATION,
        "--lr", LORA_LR, "--weight-decay", LORA_WEIGHT_DECAY, "--gradient-clipping", LORA_CLIP])
    records = oc.read_metrics(out_dir)
    model = oc.load_reference_peft(model_dir, adapter_dir, model_class)
    adapted = sorted({n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad})
    report.check("project_in" in adapted and "project_out" in adapted,
                 f"[{label} lora] oracle: all-linear adapts project_in/out ({adapted})")
    lrs = [LORA_LR] * LORA_STEPS
    history = oc.reference_trajectory(model, samples, LORA_STEPS, lrs, LORA_BETAS, LORA_EPS, LORA_WEIGHT_DECAY,
                                      LORA_CLIP, MICRO_BATCH, ACCUMULATION)
    oc.check_some_clipped(report, f"{label} lora", history)
    oc.compare_trajectory(report, f"{label} lora", records, history, lrs)


def main():
    args = oc.parse_args("zerotune training steps on OPT and Qwen2 vs a torch AdamW loop")
    report = oc.Report("family trajectories: zerotune vs HF/PEFT + torch AdamW (float64)")
    with oc.temporary_directory(args, "zt_oracle_family_trajectory_") as tmp:
        oc.run_guarded(report, "opt", run_full, args, report, tmp, "opt", 800)
        oc.run_guarded(report, "qwen2", run_full, args, report, tmp, "qwen2", 810)
        oc.run_guarded(report, "opt_350m_shape lora", run_lora, args, report, tmp, "opt_350m_shape", 820)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

# Oracle: zerotune's LoRA on every architecture row beside LLaMA's against PEFT 0.10, step 0 in fp32
# (test_lora_parity.py does LLaMA). Families: OPT pre-LN with a tied head, OPT-350m's shape
# (post-LN, word_embed_proj_dim with project_in/out), Mistral, Qwen2 (tied, q/k/v biases), LLaMA
# with a tied head; models and cases: oracle_common.py ("the other architecture rows").
# For each family and each target choice (the model type's PEFT default, and all-linear):
#  - init: `zerotune train --lora-r 4 --lora-alpha 8` [--lora-targets all-linear] (no
#    --lora-targets: zerotune takes the model type's PEFT default). The adapters it makes are
#    exactly PEFT's for those targets (names and shapes; all-linear never adapts lm_head, and
#    adapts OPT-350m's project_in/out), initialised as PEFT does (B = 0, A uniform in
#    +-1/sqrt(in_features), kaiming_uniform(a=sqrt(5))); with those weights copied into the PEFT
#    model, logits, loss and every LoRA gradient match PEFT in float64 (lora_A's are exactly 0
#    since B = 0). The initial weights come from --dump-final of a one-step run at --lr 0.
#  - adapter: a PEFT adapter with random lora_B saved by PEFT (so lora_A gradients are not 0) and
#    continued with `--adapter DIR`: logits, loss and every LoRA gradient match PEFT, and no
#    frozen weight has a gradient in the dump.
# The defaults: PEFT 0.10's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING gives q_proj,v_proj
# for llama, mistral and opt and has no entry for qwen2 (get_peft_model asks for target_modules);
# later PEFT releases map qwen2 to q_proj,v_proj, which is what zerotune takes, so the reference
# uses that list for qwen2. Tolerances and batch layout: oracle_common.py, "step-0 parity".
import math
import os

import oracle_common as oc

torch = oc.torch
peft = oc.peft

FAMILIES = ["opt", "opt_350m_shape", "mistral", "qwen2", "llama_tied"]
# PEFT's all-linear on each family (every nn.Linear but the output layer), checked on the reference.
ALL_LINEAR = {
    "opt": ["fc1", "fc2", "k_proj", "out_proj", "q_proj", "v_proj"],
    "opt_350m_shape": ["fc1", "fc2", "k_proj", "out_proj", "project_in", "project_out", "q_proj", "v_proj"],
    "mistral": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
    "qwen2": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
    "llama_tied": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
}
# PEFT 0.10's default targets per model type (None: no entry there) and the list the reference
# uses (a later PEFT's entry where 0.10 has none).
PEFT_010_DEFAULTS = {"llama": ["q_proj", "v_proj"], "mistral": ["q_proj", "v_proj"], "opt": ["q_proj", "v_proj"],
                     "qwen2": None}
LATER_PEFT_DEFAULTS = {"qwen2": ["q_proj", "v_proj"]}
LORA_R, LORA_ALPHA = 4, 8


def module_of(name):
    """model.decoder.layers.0.self_attn.q_proj.lora_A.weight -> q_proj"""
    return name.split(".lora_")[0].rsplit(".", 1)[-1]


def check_default_mapping(report):
    """The oracle's assumption on PEFT's defaults, so that another PEFT makes this test fail
    loudly instead of comparing against something else."""
    mapping = peft.utils.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    got = {model_type: mapping.get(model_type) for model_type in PEFT_010_DEFAULTS}
    got = {k: sorted(v) if v is not None else None for k, v in got.items()}
    want = {k: sorted(v) if v is not None else None for k, v in PEFT_010_DEFAULTS.items()}
    report.check(got == want, f"oracle: PEFT {peft.__version__}'s default LoRA targets {got} are 0.10's {want}")


def reference_targets(model_type, choice):
    """target_modules for PEFT: None (its default) or a later PEFT's default, or all-linear."""
    if choice == "all_linear":
        return "all-linear"
    return None if PEFT_010_DEFAULTS.get(model_type) else LATER_PEFT_DEFAULTS[model_type]


def check_reference_layout(report, tag, model, label, choice, model_type):
    """The reference itself: LoRA exactly on the expected modules of every layer (project_in/out
    once), never on lm_head, only LoRA trainable."""
    trainable = [oc.zerotune_name(n) for n, p in model.named_parameters() if p.requires_grad]
    expected = ALL_LINEAR[label] if choice == "all_linear" else (PEFT_010_DEFAULTS[model_type]
                                                                 or LATER_PEFT_DEFAULTS[model_type])
    modules = sorted({module_of(n) for n in trainable})
    report.check(modules == sorted(expected) and all(".lora_" in n for n in trainable)
                 and not any(n.startswith("lm_head") for n in trainable),
                 f"{tag} oracle: PEFT adapts exactly {sorted(expected)} (got {modules}), not lm_head, "
                 f"{len(trainable)} trainable LoRA tensors")


def fresh_peft_model(model_dir, model_class, targets):
    """The float64 HF model with a fresh PEFT adapter (r 4, alpha 8, no dropout) and its LoRA
    parameters by zerotune name."""
    base = oc.load_reference_family(model_dir, model_class)
    config = peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, target_modules=targets, lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config).double()
    lora = {oc.zerotune_name(n): p for n, p in model.named_parameters() if p.requires_grad}
    return model, lora


def check_init(report, tag, initial):
    """PEFT's initialisation: B = 0; A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform a=sqrt(5)),
    each adapter drawn apart."""
    a_tensors = {n: t for n, t in initial.items() if ".lora_A." in n}
    b_tensors = {n: t for n, t in initial.items() if ".lora_B." in n}
    report.check(all(float(t.abs().max()) == 0.0 for t in b_tensors.values()),
                 f"{tag} every lora_B starts at 0 ({len(b_tensors)})")
    worst = ""
    for name, a in a_tensors.items():
        bound = 1.0 / math.sqrt(a.shape[1])
        peak, std = float(a.abs().max()), float(a.double().std())
        # a uniform's std is bound/sqrt(3); >= 128 draws put the estimate within ~3% of it
        if not (0.8 * bound <= peak <= bound and abs(std / (bound / math.sqrt(3)) - 1) < 0.15):
            worst += f" {name}: max {peak:.4f} std {std:.4f} bound {bound:.4f};"
    report.check(not worst and len(a_tensors) > 0,
                 f"{tag} every lora_A ({len(a_tensors)}) is U(+-1/sqrt(in_features)) by its max and std"
                 + (f" (off:{worst})" if worst else ""))
    firsts = [float(t.reshape(-1)[0]) for t in a_tensors.values()]
    report.check(len(set(firsts)) == len(firsts), f"{tag} the lora_A tensors are drawn apart (no two alike)")


def run_init_case(args, report, tmp, label, choice, seed):
    """zerotune's own adapters (default targets or --lora-targets all-linear) against PEFT."""
    tag = f"[{label} {choice} init]"
    config_class, model_class, settings = oc.family_case(label)
    run_dir = os.path.join(tmp, f"{label}-{choice}-init")
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    samples = oc.make_samples(seed + 1, oc.PARITY_LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    flags = ["--lora-r", LORA_R, "--lora-alpha", LORA_ALPHA, "--lr", 0,
             "--dump-final", os.path.join(run_dir, "initial.safetensors")]
    if choice == "all_linear":
        flags += ["--lora-targets", "all-linear"]
    dump, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir, run_dir, flags)
    initial = oc.load_dump(os.path.join(run_dir, "initial.safetensors"))  # after one update at lr 0

    model, lora = fresh_peft_model(model_dir, model_class, reference_targets(config.model_type, choice))
    check_reference_layout(report, tag, model, label, choice, config.model_type)
    shapes_ok = set(initial) == set(lora) and all(tuple(initial[n].shape) == tuple(p.shape) for n, p in lora.items())
    report.check(shapes_ok, f"{tag} zerotune's adapters are PEFT's: {len(lora)} tensors, same names and shapes "
                 f"(missing {sorted(set(lora) - set(initial))[:4]}, unexpected {sorted(set(initial) - set(lora))[:4]})")
    if not shapes_ok:
        return
    check_init(report, tag, initial)
    with torch.no_grad():
        for name, parameter in lora.items():
            parameter.copy_(initial[name].double())
    micro_batches = oc.parity_micro_batches(samples)
    loss, logits = oc.reference_step(model, micro_batches)
    grads = oc.trainable_lora_grads(model)
    report.check(any(float(g.abs().max()) > 0 for n, g in grads.items() if ".lora_B." in n),
                 f"{tag} oracle: the lora_B gradients are not all 0")
    oc.compare_step0(report, tag[1:-1], dump, micro_batches, loss, logits, grads)


def run_adapter_case(args, report, tmp, label, choice, seed):
    """A PEFT-made adapter with random lora_B continued by --adapter."""
    tag = f"[{label} {choice} adapter]"
    config_class, model_class, settings = oc.family_case(label)
    run_dir = os.path.join(tmp, f"{label}-{choice}-adapter")
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    adapter_dir = os.path.join(run_dir, "adapter")
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    oc.make_adapter(model_dir, adapter_dir, seed + 2, reference_targets(config.model_type, choice), False, 0.0,
                    model_class=model_class)
    samples = oc.make_samples(seed + 1, oc.PARITY_LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    dump, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir, run_dir, ["--adapter", adapter_dir])

    model = oc.load_reference_peft(model_dir, adapter_dir, model_class)
    check_reference_layout(report, tag, model, label, choice, config.model_type)
    micro_batches = oc.parity_micro_batches(samples)
    loss, logits = oc.reference_step(model, micro_batches)
    base_grads = sorted(k for k in dump if k.startswith("grad.") and ".lora_" not in k)
    report.check(not base_grads, f"{tag} no gradient of a frozen base weight in the dump"
                 + (f" (found {base_grads[:4]})" if base_grads else ""))
    grads = oc.trainable_lora_grads(model)
    report.check(all(float(g.abs().max()) > 0 for g in grads.values()),
                 f"{tag} oracle: every LoRA gradient is non-zero (B random)")
    oc.compare_step0(report, tag[1:-1], dump, micro_batches, loss, logits, grads)


def main():
    args = oc.parse_args("zerotune LoRA vs PEFT on OPT, Mistral, Qwen2, tied LLaMA")
    report = oc.Report("family LoRA parity: zerotune vs PEFT 0.10 (float64), default targets and all-linear")
    check_default_mapping(report)
    with oc.temporary_directory(args, "zt_oracle_family_lora_") as tmp:
        for index, label in enumerate(FAMILIES):
            for offset, choice in enumerate(("default", "all_linear")):
                seed = 600 + 20 * index + 5 * offset
                oc.run_guarded(report, f"{label} {choice} init", run_init_case, args, report, tmp, label, choice, seed)
                oc.run_guarded(report, f"{label} {choice} adapter", run_adapter_case, args, report, tmp, label, choice,
                               seed + 3)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

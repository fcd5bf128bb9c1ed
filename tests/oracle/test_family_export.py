# Oracle: `zerotune export` of the other architecture rows (test_export.py does LLaMA). Three steps
# of training with a checkpoint at the end (oracle_common.py, "export"), then:
#  - full fine-tuning of OPT (pre-LN, tied head) and Qwen2 (tied head) -> --format hf: the
#    safetensors hold exactly the keys transformers' save_pretrained writes for the model (the tied
#    table once, no lm_head.weight); AutoModelForCausalLM loads the directory as the right class with
#    no missing or unexpected key and its head tied to the table; the weights equal the trained ones
#    (--dump-final) exactly, and training moved them; zerotune run on the export (--dump-step0) and
#    transformers in float64 give the same logits; --dtype bf16 writes bf16 tensors equal to the
#    trained ones rounded; a small --max-shard-size writes shards and an index without lm_head that
#    transformers loads;
#  - LoRA on OPT with the default targets (no --lora-targets: q_proj, v_proj) and on OPT-350m's
#    shape with all-linear (project_in/out adapted) -> --format peft: adapter_model.safetensors holds
#    exactly the keys PEFT's save_pretrained writes for that LoraConfig on that model (PEFT's OPT
#    names: base_model.model.model.decoder.layers.0.self_attn.q_proj.lora_A.weight), the config has
#    the targets, r and alpha; PEFT loads it with the trained adapters; zerotune with --adapter
#    EXPORT and PEFT give the same logits; --format hf --merge gives a model transformers loads (no
#    lm_head key) whose logits are the PEFT model's.
import json
import os

import oracle_common as oc

torch = oc.torch
transformers = oc.transformers
safe_open = oc.safetensors.safe_open
transformers.utils.logging.disable_progress_bar()  # "Loading checkpoint shards" bars in the log

LORA_FLAGS = ["--lora-r", 4, "--lora-alpha", 8]
# (label, extra train flags, the target modules the adapter must have)
LORA_CASES = [
    ("opt", [], ["q_proj", "v_proj"]),
    ("opt_350m_shape", ["--lora-targets", "all-linear"],
     ["fc1", "fc2", "k_proj", "out_proj", "project_in", "project_out", "q_proj", "v_proj"]),
]
# Training must move the weights (else "the export holds the trained weights" could pass on the
# base weights): 3 steps at lr 1e-2 move them by ~3e-2.
MIN_TRAINED_MOVE = 1e-3


def safetensors_keys(path):
    with safe_open(path, "pt") as stream:
        return sorted(stream.keys())


def safetensors_dtypes(path):
    with safe_open(path, "pt") as stream:
        return {stream.get_tensor(key).dtype for key in stream.keys()}


def setup(tmp, label, kind, seed):
    run_dir = os.path.join(tmp, f"{label}-{kind}")
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    config_class, model_class, settings = oc.family_case(label)
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    samples = oc.make_samples(seed + 1, oc.PARITY_LENGTHS * oc.EXPORT_TRAIN_STEPS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    return run_dir, model_dir, data_dir, model_class, samples


def check_hf_directory(report, tag, hf_dir, model_dir, model_class, dtype):
    """The files and what transformers makes of them; returns the loaded model's state dict."""
    single = os.path.join(hf_dir, "model.safetensors")
    index_path = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as stream:
            keys = sorted(json.load(stream)["weight_map"])
    else:
        keys = safetensors_keys(single)
    hf_keys = safetensors_keys(os.path.join(model_dir, "model.safetensors"))  # what save_pretrained wrote
    report.check(keys == hf_keys and "lm_head.weight" not in keys,
                 f"{tag} the export's keys are save_pretrained's ({len(hf_keys)}; no lm_head.weight: "
                 f"{'lm_head.weight' not in keys}; missing {sorted(set(hf_keys) - set(keys))[:3]}, "
                 f"unexpected {sorted(set(keys) - set(hf_keys))[:3]})")
    model, info = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=dtype,
                                                                    output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    report.check(type(model).__name__ == model_class and not problems,
                 f"{tag} AutoModelForCausalLM loads a {type(model).__name__} (want {model_class}) with no "
                 f"missing/unexpected/mismatched key ({problems})")
    report.check(model.config.tie_word_embeddings and
                 model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr(),
                 f"{tag} the loaded head is the embedding table (tied)")
    return model.state_dict()


def check_weights(report, tag, state, trained, convert=lambda t: t):
    missing = sorted(set(trained) - set(state))
    if not report.check(not missing, f"{tag} every trained tensor ({len(trained)}) is in the export"
                        + (f" (missing {missing[:4]})" if missing else "")):
        return
    worst = max(float((state[name].float() - convert(tensor).float()).abs().max()) for name, tensor in trained.items())
    report.check(worst == 0.0, f"{tag} the exported weights are the trained ones (max diff {worst:.2e})")


def full_case(args, report, tmp, label, seed):
    run_dir, model_dir, data_dir, model_class, samples = setup(tmp, label, "full", seed)
    checkpoint, trained = oc.train_for_export(args.zerotune, model_dir, data_dir, os.path.join(run_dir, "train"))
    base = oc.load_dump(os.path.join(model_dir, "model.safetensors"))
    moved = min(float((trained[n] - base[n]).abs().max()) for n in trained if n.endswith("weight") and "norm" not in n)
    report.check("lm_head.weight" not in trained and moved > MIN_TRAINED_MOVE,
                 f"[{label} hf] oracle: training moved every weight matrix (least max move {moved:.2e}); "
                 f"--dump-final has no lm_head.weight of its own")

    tag = f"[{label} hf]"
    hf_dir = os.path.join(run_dir, "hf")
    oc.run_export(args.zerotune, checkpoint, model_dir, hf_dir, "--format", "hf")
    state = check_hf_directory(report, tag, hf_dir, model_dir, model_class, torch.float32)
    check_weights(report, tag, state, trained)
    oc.check_zerotune_logits(args.zerotune, report, f"{label} hf", hf_dir, data_dir, os.path.join(run_dir, "hf-run"),
                             samples, oc.load_reference_family(hf_dir, model_class))

    tag = f"[{label} hf bf16]"
    bf16_dir = os.path.join(run_dir, "hf-bf16")
    oc.run_export(args.zerotune, checkpoint, model_dir, bf16_dir, "--format", "hf", "--dtype", "bf16")
    dtypes = safetensors_dtypes(os.path.join(bf16_dir, "model.safetensors"))
    report.check(dtypes == {torch.bfloat16}, f"{tag} every stored tensor is bf16 ({dtypes})")
    state = check_hf_directory(report, tag, bf16_dir, model_dir, model_class, torch.bfloat16)
    check_weights(report, tag, state, trained, lambda t: t.to(torch.bfloat16))

    tag = f"[{label} hf sharded]"
    sharded_dir = os.path.join(run_dir, "hf-sharded")
    oc.run_export(args.zerotune, checkpoint, model_dir, sharded_dir, "--format", "hf", "--max-shard-size", "100KB")
    shards = [n for n in os.listdir(sharded_dir) if n.startswith("model-") and n.endswith(".safetensors")]
    report.check(len(shards) > 1 and os.path.exists(os.path.join(sharded_dir, "model.safetensors.index.json")),
                 f"{tag} {len(shards)} shards and the index")
    state = check_hf_directory(report, tag, sharded_dir, model_dir, model_class, torch.float32)
    check_weights(report, tag, state, trained)


def lora_case(args, report, tmp, label, extra, modules, seed):
    run_dir, model_dir, data_dir, model_class, samples = setup(tmp, label, "lora", seed)
    checkpoint, trained = oc.train_for_export(args.zerotune, model_dir, data_dir, os.path.join(run_dir, "train"),
                                              LORA_FLAGS + extra)
    tag = f"[{label} peft]"
    peft_dir = os.path.join(run_dir, "peft")
    oc.run_export(args.zerotune, checkpoint, model_dir, peft_dir, "--format", "peft")
    with open(os.path.join(peft_dir, "adapter_config.json")) as stream:
        adapter_config = json.load(stream)
    report.check(sorted(adapter_config.get("target_modules") or []) == modules and adapter_config.get("r") == 4
                 and adapter_config.get("lora_alpha") == 8 and adapter_config.get("peft_type") == "LORA",
                 f"{tag} adapter_config.json: target_modules {adapter_config.get('target_modules')} (want {modules}), "
                 f"r {adapter_config.get('r')}, lora_alpha {adapter_config.get('lora_alpha')}")

    # What PEFT itself writes for this LoraConfig on this model.
    reference_dir = os.path.join(run_dir, "peft-reference")
    oc.make_adapter(model_dir, reference_dir, seed + 2, modules, False, 0.0, model_class=model_class)
    keys = safetensors_keys(os.path.join(peft_dir, "adapter_model.safetensors"))
    peft_keys = safetensors_keys(os.path.join(reference_dir, "adapter_model.safetensors"))
    example = "base_model.model.model.decoder.layers.0.self_attn.q_proj.lora_A.weight"
    report.check(keys == peft_keys and example in keys,
                 f"{tag} adapter_model.safetensors has PEFT's {len(peft_keys)} keys ({example} among them; missing "
                 f"{sorted(set(peft_keys) - set(keys))[:3]}, unexpected {sorted(set(keys) - set(peft_keys))[:3]})")

    peft_model = oc.load_reference_peft(model_dir, peft_dir, model_class)
    adapters = {oc.zerotune_name(n): p.detach() for n, p in peft_model.named_parameters() if "lora_" in n}
    report.check(set(adapters) == set(trained), f"{tag} PEFT loads exactly the {len(trained)} trained adapters")
    check_weights(report, tag, {n: t.float() for n, t in adapters.items()}, trained)
    smallest_b = min(float(t.abs().max()) for n, t in trained.items() if ".lora_B." in n)
    report.check(smallest_b > MIN_TRAINED_MOVE, f"{tag} oracle: every lora_B moved from 0 (least max {smallest_b:.2e})")
    oc.check_zerotune_logits(args.zerotune, report, f"{label} peft", model_dir, data_dir,
                             os.path.join(run_dir, "peft-run"), samples, peft_model, ["--adapter", peft_dir])

    tag = f"[{label} hf --merge]"
    merged_dir = os.path.join(run_dir, "merged")
    oc.run_export(args.zerotune, checkpoint, model_dir, merged_dir, "--format", "hf", "--merge")
    check_hf_directory(report, tag, merged_dir, model_dir, model_class, torch.float32)
    merged = oc.load_reference_family(merged_dir, model_class)
    base = oc.load_reference_family(model_dir, model_class)
    input_ids = oc.parity_micro_batches(samples)[0][0]
    with torch.no_grad():
        merged_logits = oc.forward_logits(merged, input_ids)
        peft_logits = oc.forward_logits(peft_model, input_ids)
        base_logits = oc.forward_logits(base, input_ids)
    report.close(f"{tag} merged model logits vs PEFT base + adapter", merged_logits, peft_logits, atol=oc.LOGITS_ATOL)
    moved = float((peft_logits - base_logits).abs().max())
    report.check(moved > 10 * oc.LOGITS_ATOL, f"{tag} oracle: the adapter moves the logits by {moved:.2e} "
                 f"> 10 x the tolerance")


def main():
    args = oc.parse_args("zerotune export of OPT, OPT-350m's shape and Qwen2: HF and PEFT directories")
    report = oc.Report("family export: HF safetensors (tied heads) and PEFT adapters load with the trained weights")
    with oc.temporary_directory(args, "zt_oracle_family_export_") as tmp:
        for index, label in enumerate(("opt", "qwen2")):
            oc.run_guarded(report, f"{label} full", full_case, args, report, tmp, label, 900 + 10 * index)
        for index, (label, extra, modules) in enumerate(LORA_CASES):
            oc.run_guarded(report, f"{label} lora", lora_case, args, report, tmp, label, extra, modules,
                           950 + 10 * index)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

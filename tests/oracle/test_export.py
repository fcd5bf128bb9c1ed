# Oracle: `zerotune export` (issue 5). A few steps of training with a checkpoint at the end,
# then:
#  - full fine-tuning -> --format hf: transformers loads the directory; its weights equal the
#    trained ones (--dump-final) exactly in fp32, and bf16-rounded in bf16; zerotune run on the
#    export (--dump-step0) and transformers give the same logits; a small --max-shard-size
#    writes shards + model.safetensors.index.json that transformers loads;
#  - LoRA -> --format peft: PEFT loads base + adapter; the adapter tensors equal the trained
#    ones; zerotune with --adapter EXPORT and PEFT give the same logits; --format hf --merge
#    gives an HF model whose logits equal the PEFT model's;
#  - refusals: hf without --merge for LoRA, peft for a full checkpoint, another base model.
# The training, export and refusal helpers: oracle_common.py ("export"); test_family_export.py
# does the same for OPT, OPT-350m's shape and Qwen2 (tied heads).
import glob
import os

import oracle_common as oc

torch = oc.torch
transformers = oc.transformers


def full_case(args, report, tmp, model_dir, data_dir, samples):
    checkpoint, trained = oc.train_for_export(args.zerotune, model_dir, data_dir, os.path.join(tmp, "full"))
    hf_dir = os.path.join(tmp, "full-hf")
    oc.run_export(args.zerotune, checkpoint, model_dir, hf_dir, "--format", "hf")
    model = transformers.LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    state = model.state_dict()
    report.check(set(trained) <= set(state), f"[hf] every trained tensor is in the export ({len(trained)})")
    worst = max(float((state[name] - tensor).abs().max()) for name, tensor in trained.items())
    report.check(worst == 0.0, f"[hf] exported fp32 weights equal the trained ones (max diff {worst:.2e})")
    oc.check_zerotune_logits(args.zerotune, report, "hf", hf_dir, data_dir, os.path.join(tmp, "full-hf-run"),
                             samples, oc.load_reference_llama(hf_dir))

    bf16_dir = os.path.join(tmp, "full-hf-bf16")
    oc.run_export(args.zerotune, checkpoint, model_dir, bf16_dir, "--format", "hf", "--dtype", "bf16")
    bf16 = transformers.LlamaForCausalLM.from_pretrained(bf16_dir, torch_dtype=torch.bfloat16).state_dict()
    worst = max(float((bf16[name].float() - tensor.to(torch.bfloat16).float()).abs().max())
                for name, tensor in trained.items())
    report.check(worst == 0.0, f"[hf bf16] weights are the trained ones rounded to bf16 (max diff {worst:.2e})")

    sharded_dir = os.path.join(tmp, "full-hf-sharded")
    oc.run_export(args.zerotune, checkpoint, model_dir, sharded_dir, "--format", "hf", "--max-shard-size", "100KB")
    shards = glob.glob(os.path.join(sharded_dir, "model-*-of-*.safetensors"))
    report.check(len(shards) > 1 and os.path.exists(os.path.join(sharded_dir, "model.safetensors.index.json")),
                 f"[hf sharded] {len(shards)} shards and the index")
    sharded = transformers.LlamaForCausalLM.from_pretrained(sharded_dir, torch_dtype=torch.float32).state_dict()
    worst = max(float((sharded[name] - tensor).abs().max()) for name, tensor in trained.items())
    report.check(worst == 0.0, f"[hf sharded] transformers loads the shards: weights equal (max diff {worst:.2e})")
    oc.check_refused(args.zerotune, report, "peft export of a full checkpoint",
                     ["export", "--checkpoint", checkpoint, "--model", model_dir, "--out", os.path.join(tmp, "x"),
                      "--format", "peft"], "full fine-tuning checkpoint")
    return checkpoint


def lora_case(args, report, tmp, model_dir, data_dir, samples):
    checkpoint, trained = oc.train_for_export(args.zerotune, model_dir, data_dir, os.path.join(tmp, "lora"),
                                              ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear"])
    peft_dir = os.path.join(tmp, "lora-peft")
    oc.run_export(args.zerotune, checkpoint, model_dir, peft_dir, "--format", "peft")
    peft_model = oc.load_reference_peft(model_dir, peft_dir)
    adapters = {oc.zerotune_name(name): p.detach().float() for name, p in peft_model.named_parameters()
                if "lora_" in name}
    report.check(set(adapters) == set(trained), f"[peft] PEFT loads exactly the {len(trained)} trained adapters")
    worst = max(float((adapters[name] - tensor).abs().max()) for name, tensor in trained.items() if name in adapters)
    report.check(worst == 0.0, f"[peft] adapter weights equal the trained ones (max diff {worst:.2e})")
    oc.check_zerotune_logits(args.zerotune, report, "peft", model_dir, data_dir, os.path.join(tmp, "lora-peft-run"),
                             samples, peft_model, ["--adapter", peft_dir])

    merged_dir = os.path.join(tmp, "lora-merged")
    oc.run_export(args.zerotune, checkpoint, model_dir, merged_dir, "--format", "hf", "--merge")
    merged = oc.load_reference_llama(merged_dir)
    micro_batches = oc.parity_micro_batches(samples)
    with torch.no_grad():
        merged_logits = oc.forward_logits(merged, micro_batches[0][0])
        peft_logits = oc.forward_logits(peft_model, micro_batches[0][0])
    report.close("[hf --merge] merged model logits vs PEFT base + adapter", merged_logits, peft_logits,
                 atol=oc.LOGITS_ATOL)
    oc.check_refused(args.zerotune, report, "hf export of a LoRA checkpoint without --merge",
                     ["export", "--checkpoint", checkpoint, "--model", model_dir, "--out", os.path.join(tmp, "y"),
                      "--format", "hf"], "needs --merge")
    oc.check_refused(args.zerotune, report, "dschat export of a checkpoint that is no reward model",
                     ["export", "--checkpoint", checkpoint, "--model", model_dir, "--out", os.path.join(tmp, "z"),
                      "--format", "dschat", "--merge"], "is not a reward model (train --objective reward)")


def main():
    args = oc.parse_args("zerotune export: HF and PEFT directories that transformers/PEFT load")
    report = oc.Report("export: HF safetensors and PEFT adapters load with the trained weights")
    with oc.temporary_directory(args, "zt_oracle_export_") as tmp:
        model_dir = os.path.join(tmp, "model")
        config = oc.make_llama(model_dir, seed=410)
        samples = oc.make_samples(411, oc.PARITY_LENGTHS * 3, config.vocab_size)
        data_dir = os.path.join(tmp, "data")
        oc.write_data(data_dir, samples, config.vocab_size)
        checkpoint = None
        try:
            checkpoint = full_case(args, report, tmp, model_dir, data_dir, samples)
        except Exception as error:  # noqa: BLE001 - reported; the LoRA case still runs
            oc.traceback.print_exc()
            report.fail(f"[full] {type(error).__name__}: {error}")
        oc.run_guarded(report, "lora", lora_case, args, report, tmp, model_dir, data_dir, samples)
        other = os.path.join(tmp, "other-model")
        oc.make_llama(other, seed=999, num_hidden_layers=3)
        if checkpoint:
            oc.check_refused(args.zerotune, report, "export onto another base model",
                             ["export", "--checkpoint", checkpoint, "--model", other, "--out", os.path.join(tmp, "z")],
                             "is not the model the checkpoint")
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

# Oracle: zerotune's bf16 mixed-precision model against HF transformers run in bf16 on the CPU.
# With "bf16": {"enabled": true} zerotune stores parameters and activations in bf16 (fp32
# arithmetic inside each op, every op output rounded once to bf16), logits in bf16 widened by
# the loss, weight gradients accumulated in fp32. Exact agreement with HF bf16 is not expected
# (the ops round at different places: HF rounds inside RMSNorm, RoPE, LoRA, attention), so the
# test asks that zerotune-bf16's error against the exact model (HF in float64) has the SIZE of
# HF-bf16's error against it, for the step-0 logits, loss and gradients of a small random LLaMA
# (GQA 4/2 heads, 3 layers, vocab 320, seq up to 64, the parity layout of oracle_common.py: two
# right-padded micro-batches of 3 with prompt masks); that the bf16 logits really are bf16
# values and differ from zerotune's fp32 logits; and the same for the logits of a LoRA
# (all-linear) adapter against PEFT in bf16. float64 rather than fp32 is the exact model: fp32's
# own error (~4e-7 on the logits) is negligible beside bf16's (~1e-2) either way.
# The comparisons and their bands: oracle_common.py ("bf16"); test_family_bf16.py does the same for
# OPT and Qwen2.
import os

import oracle_common as oc

torch = oc.torch

MODEL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2)
# Micro-batches of oc.PARITY_MICRO_BATCH = 3, oc.PARITY_ACCUMULATION = 2 (what
# oc.run_step0_dump runs): micro-batch 0 pads to 48, micro-batch 1 to 64.
LENGTHS = [35, 48, 29, 64, 41, 52]


def make_case(tmp, label, seed):
    run_dir = os.path.join(tmp, label)
    model_dir = os.path.join(run_dir, "model")
    data_dir = os.path.join(run_dir, "data")
    config = oc.make_llama(model_dir, seed=seed, **MODEL)
    samples = oc.make_samples(seed + 1, LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    micro_batches = oc.parity_micro_batches(samples)
    return run_dir, model_dir, data_dir, micro_batches


def run_full_case(args, report, tmp, seed):
    label = "full"
    run_dir, model_dir, data_dir, micro_batches = make_case(tmp, label, seed)
    dump_bf16 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "bf16"), model_dir, data_dir,
                                  bf16=True)
    dump_fp32 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "fp32"), model_dir, data_dir,
                                  bf16=False)
    report.check(all(t.dtype == torch.float32 for t in dump_bf16.values()),
                 f"[{label}] every dumped tensor is fp32 (gradients accumulate in fp32)")

    exact_model = oc.load_reference_llama(model_dir)
    exact_loss, exact_logits = oc.reference_step(exact_model, micro_batches)
    exact_grads = {name: p.grad.detach().clone() for name, p in exact_model.named_parameters()}
    hf_model = oc.transformers.LlamaForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.bfloat16, attn_implementation="eager")
    hf_model.train()
    hf_loss, hf_logits, hf_grads = oc.hf_bf16_step(hf_model, micro_batches)
    report.check(hf_logits.dtype == torch.bfloat16 and
                 all(p.dtype == torch.bfloat16 for p in hf_model.parameters()),
                 f"[{label}] oracle: the HF reference really runs in bf16")

    oc.check_bf16_logits(report, label, dump_bf16, dump_fp32, hf_logits, exact_logits,
                         micro_batches[0][2])

    oc.check_bf16_loss(report, label, dump_bf16, exact_loss, hf_loss, exact_logits, hf_logits,
                       micro_batches[0][2])

    layers = MODEL["num_hidden_layers"]
    representative = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                      "model.layers.1.self_attn.k_proj.weight",
                      f"model.layers.{layers - 1}.mlp.down_proj.weight", "lm_head.weight",
                      "model.layers.1.input_layernorm.weight", "model.norm.weight"]
    oc.check_bf16_grads(report, label, dump_bf16, hf_grads, exact_grads, representative)


def run_lora_case(args, report, tmp, seed):
    """LoRA r 4 all-linear (a PEFT adapter with random lora_B continued by --adapter): logits
    only, against PEFT on the bf16 base model with its adapter in bf16."""
    label = "lora"
    run_dir, model_dir, data_dir, micro_batches = make_case(tmp, label, seed)
    adapter_dir = os.path.join(run_dir, "adapter")
    oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", use_rslora=False,
                    dropout=0.0)
    extra = ["--adapter", adapter_dir]
    dump_bf16 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "bf16"), model_dir, data_dir,
                                  True, extra)
    dump_fp32 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "fp32"), model_dir, data_dir,
                                  False, extra)

    input_ids = micro_batches[0][0]
    with torch.no_grad():
        exact_logits = oc.forward_logits(oc.load_reference_peft(model_dir, adapter_dir),
                                         input_ids)
        base = oc.transformers.LlamaForCausalLM.from_pretrained(
            model_dir, torch_dtype=torch.bfloat16, attn_implementation="eager")
        peft_model = oc.peft.PeftModel.from_pretrained(base, adapter_dir).to(torch.bfloat16)
        report.check(all(p.dtype == torch.bfloat16 for p in peft_model.parameters()),
                     f"[{label}] oracle: the PEFT reference really runs in bf16")
        hf_logits = oc.forward_logits(peft_model, input_ids)
    oc.check_bf16_logits(report, label, dump_bf16, dump_fp32, hf_logits, exact_logits,
                         micro_batches[0][2])


def main():
    args = oc.parse_args("zerotune bf16 vs HF transformers bf16: logits, loss, gradients")
    report = oc.Report("bf16 model: zerotune-bf16 vs HF-bf16, errors against float64")
    with oc.temporary_directory(args, "zt_oracle_bf16_") as tmp:
        oc.run_guarded(report, "full", run_full_case, args, report, tmp, 500)
        oc.run_guarded(report, "lora", run_lora_case, args, report, tmp, 520)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

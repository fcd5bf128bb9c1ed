# Oracle: zerotune's bf16 mixed-precision model on OPT (pre-LN, tied head, biases, learned
# positions) and Qwen2 (tied head, q/k/v biases, GQA) against HF transformers run in bf16, as
# test_bf16_model.py does for LLaMA: zerotune-bf16's step-0 error against the exact model (HF in
# float64) must have the SIZE of HF-bf16's error against it, for the logits (real positions), the
# loss and the gradients of representative tensors (the tied table, which gets the lookup's and the
# head's gradient, included); the bf16 logits are bf16 values and differ from zerotune's fp32 ones.
# Helpers and bands: oracle_common.py ("bf16"); the models: oracle_common.py ("the other
# architecture rows"), 3 layers and a 320-token vocabulary as in test_bf16_model.py.
# HF's OPT attention runs its softmax in bf16 (transformers 4.40 widens only fp16 scores); its
# error still sets the size zerotune's must have (measured ratios: oracle_common.py's bands).
import os

import oracle_common as oc

torch = oc.torch

# Micro-batches of 3 (oc.run_step0_dump's layout): micro-batch 0 pads to 48, micro-batch 1 to 64.
LENGTHS = [35, 48, 29, 64, 41, 52]
SHAPE = {"opt": dict(vocab_size=320, ffn_dim=128, num_hidden_layers=3, max_position_embeddings=128),
         "qwen2": dict(vocab_size=320, intermediate_size=128, num_hidden_layers=3)}
SEEDS = {"opt": 700, "qwen2": 710}
# Gradients compared, per family: the tied table, a query and a key projection, the last MLP
# output, a norm weight; OPT's position table and an MLP bias, Qwen2's final norm and a value
# bias. Over 10 seeds (700..790) their rms ratios were 0.72..1.19 (OPT) and 0.70..1.19 (Qwen2),
# max-abs 0.52..1.61 and 0.45..1.59. Left out: OPT's key biases (zero gradient, see
# test_family_parity.py) and OPT's final LayerNorm, where zerotune-bf16's error is markedly smaller
# than HF-bf16's (rms ratio 0.41..0.88, below the band; a smaller error is no defect, its cause in
# HF's bf16 OPT was not investigated).
REPRESENTATIVE = {
    "opt": ["model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
            "model.decoder.layers.0.self_attn.q_proj.weight", "model.decoder.layers.1.self_attn.k_proj.weight",
            "model.decoder.layers.2.fc2.weight", "model.decoder.layers.1.final_layer_norm.weight",
            "model.decoder.layers.1.fc1.bias"],
    "qwen2": ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
              "model.layers.1.self_attn.k_proj.weight", "model.layers.2.mlp.down_proj.weight",
              "model.layers.1.input_layernorm.weight", "model.norm.weight", "model.layers.1.self_attn.v_proj.bias"],
}


def run_case(args, report, tmp, label, seed):
    run_dir = os.path.join(tmp, label)
    model_dir, data_dir = os.path.join(run_dir, "model"), os.path.join(run_dir, "data")
    config_class, model_class, settings = oc.family_case(label, **SHAPE[label])
    config = oc.make_family_model(model_dir, seed, config_class, model_class, settings)
    samples = oc.make_samples(seed + 1, LENGTHS, config.vocab_size)
    oc.write_data(data_dir, samples, config.vocab_size)
    micro_batches = oc.parity_micro_batches(samples)

    dump_bf16 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "bf16"), model_dir, data_dir, bf16=True)
    dump_fp32 = oc.run_dtype_dump(args.zerotune, os.path.join(run_dir, "fp32"), model_dir, data_dir, bf16=False)
    report.check(all(t.dtype == torch.float32 for t in dump_bf16.values()),
                 f"[{label}] every dumped tensor is fp32 (gradients accumulate in fp32)")
    report.check("grad.lm_head.weight" not in dump_bf16 and config.tie_word_embeddings,
                 f"[{label}] tied head: no gradient of lm_head.weight apart from the table's")

    exact_model = oc.load_reference_family(model_dir, model_class)
    exact_loss, exact_logits = oc.reference_step(exact_model, micro_batches)
    exact_grads = {name: p.grad.detach().clone() for name, p in exact_model.named_parameters()}
    hf_model = oc.load_reference_family(model_dir, model_class, dtype=torch.bfloat16)
    hf_loss, hf_logits, hf_grads = oc.hf_bf16_step(hf_model, micro_batches)
    report.check(hf_logits.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in hf_model.parameters()),
                 f"[{label}] oracle: the HF reference really runs in bf16")

    lengths = micro_batches[0][2]
    oc.check_bf16_logits(report, label, dump_bf16, dump_fp32, hf_logits, exact_logits, lengths)
    oc.check_bf16_loss(report, label, dump_bf16, exact_loss, hf_loss, exact_logits, hf_logits, lengths)
    oc.check_bf16_grads(report, label, dump_bf16, hf_grads, exact_grads, REPRESENTATIVE[label])


def main():
    args = oc.parse_args("zerotune bf16 vs HF transformers bf16 on OPT and Qwen2: logits, loss, gradients")
    report = oc.Report("family bf16 model: zerotune-bf16 vs HF-bf16 on OPT and Qwen2, errors against float64")
    with oc.temporary_directory(args, "zt_oracle_family_bf16_") as tmp:
        for label, seed in SEEDS.items():
            oc.run_guarded(report, label, run_case, args, report, tmp, label, seed)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

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
import json
import os

import oracle_common as oc

torch = oc.torch

MODEL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2)
# Micro-batches of oc.PARITY_MICRO_BATCH = 3, oc.PARITY_ACCUMULATION = 2 (what
# oc.run_step0_dump runs): micro-batch 0 pads to 48, micro-batch 1 to 64.
LENGTHS = [35, 48, 29, 64, 41, 52]
BF16_DEEPSPEED = {"bf16": {"enabled": True}}

# Error-size bands: ratio = (zerotune-bf16 error) / (HF-bf16 error), both against the float64
# model, as max-abs and as rms over the compared values; (low, high) per kind. Measured over 6
# seeds (500 and 600..640; LoRA 520 and 605..645):
#   logits (real positions)  rms ratio 0.85..0.97   max-abs ratio 0.66..1.33
#     (rms errors ~1.0e-2..1.3e-2 for logits of rms ~0.8; zerotune-fp32's rms error ~4e-7)
#   gradients (7 tensors)    rms ratio 0.80..1.28   max-abs ratio 0.64..1.76
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


def hf_bf16_step(model, micro_batches):
    """HF in bf16 on one global batch, as DeepSpeed's bf16 mode runs it: each micro-batch's loss
    is CE on logits.float() over the targets divided by the global target count, its bf16
    param.grad is widened and accumulated in fp32 (DeepSpeed accumulates bf16 gradients in fp32).
    Returns (loss, bf16 logits of micro-batch 0 [B, T, V], {name: fp32 gradient})."""
    total_targets = sum(oc.target_count(labels) for _, labels, _ in micro_batches)
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = {name: torch.zeros(p.shape, dtype=torch.float32) for name, p in trainable}
    loss_sum, first_logits = 0.0, None
    for input_ids, labels, _ in micro_batches:
        model.zero_grad(set_to_none=True)
        logits = oc.forward_logits(model, input_ids)  # [B, T, V] bf16
        ce = oc.cross_entropy_sum(logits.float(), labels)
        (ce / total_targets).backward()
        loss_sum += float(ce.detach())
        for name, parameter in trainable:
            grads[name] += parameter.grad.float()
        if first_logits is None:
            first_logits = logits.detach()
    return loss_sum / total_targets, first_logits, grads


def write_deepspeed(run_dir):
    path = os.path.join(run_dir, "ds_bf16.json")
    os.makedirs(run_dir, exist_ok=True)
    with open(path, "w") as stream:
        json.dump(BF16_DEEPSPEED, stream)
    return path


def run_dump(args, run_dir, model_dir, data_dir, bf16, extra=()):
    """zerotune's step-0 dump (one step of the parity layout), in bf16 or fp32."""
    flags = list(extra)
    if bf16:
        flags += ["--deepspeed", write_deepspeed(run_dir)]
    dump, _ = oc.run_step0_dump(args.zerotune, model_dir, data_dir, run_dir, flags)
    return dump


def check_logits(report, label, dump_bf16, dump_fp32, hf_bf16_logits, exact_logits, lengths):
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
    dump_bf16 = run_dump(args, os.path.join(run_dir, "bf16"), model_dir, data_dir, bf16=True)
    dump_fp32 = run_dump(args, os.path.join(run_dir, "fp32"), model_dir, data_dir, bf16=False)
    report.check(all(t.dtype == torch.float32 for t in dump_bf16.values()),
                 f"[{label}] every dumped tensor is fp32 (gradients accumulate in fp32)")

    exact_model = oc.load_reference_llama(model_dir)
    exact_loss, exact_logits = oc.reference_step(exact_model, micro_batches)
    exact_grads = {name: p.grad.detach().clone() for name, p in exact_model.named_parameters()}
    hf_model = oc.transformers.LlamaForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.bfloat16, attn_implementation="eager")
    hf_model.train()
    hf_loss, hf_logits, hf_grads = hf_bf16_step(hf_model, micro_batches)
    report.check(hf_logits.dtype == torch.bfloat16 and
                 all(p.dtype == torch.bfloat16 for p in hf_model.parameters()),
                 f"[{label}] oracle: the HF reference really runs in bf16")

    check_logits(report, label, dump_bf16, dump_fp32, hf_logits, exact_logits,
                 micro_batches[0][2])

    zt_loss = float(dump_bf16["loss"].reshape(-1)[0])
    hf_error, zt_error = abs(hf_loss - exact_loss), abs(zt_loss - exact_loss)
    lengths = micro_batches[0][2]
    hf_rms_logit_error = error_sizes(real_positions(hf_logits, lengths),
                                     real_positions(exact_logits, lengths))[1]
    bound = LOSS_OF_LOGIT_RMS * hf_rms_logit_error
    report.check(zt_error <= bound,
                 f"[{label}] loss: float64 {exact_loss:.6f}, HF-bf16 {hf_loss:.6f} (error "
                 f"{hf_error:.2e}), zerotune-bf16 {zt_loss:.6f} (error {zt_error:.2e} <= "
                 f"{bound:.2e}); zerotune-bf16 vs HF-bf16 {abs(zt_loss - hf_loss):.2e}")

    layers = MODEL["num_hidden_layers"]
    representative = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                      "model.layers.1.self_attn.k_proj.weight",
                      f"model.layers.{layers - 1}.mlp.down_proj.weight", "lm_head.weight",
                      "model.layers.1.input_layernorm.weight", "model.norm.weight"]
    for name in representative:
        key = "grad." + name
        if not report.check(key in dump_bf16, f"[{label}] the dump has {key}"):
            continue
        check_error_ratio(report, f"[{label}] {key}", dump_bf16[key], hf_grads[name],
                          exact_grads[name], GRAD_BANDS)


def run_lora_case(args, report, tmp, seed):
    """LoRA r 4 all-linear (a PEFT adapter with random lora_B continued by --adapter): logits
    only, against PEFT on the bf16 base model with its adapter in bf16."""
    label = "lora"
    run_dir, model_dir, data_dir, micro_batches = make_case(tmp, label, seed)
    adapter_dir = os.path.join(run_dir, "adapter")
    oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", use_rslora=False,
                    dropout=0.0)
    extra = ["--adapter", adapter_dir]
    dump_bf16 = run_dump(args, os.path.join(run_dir, "bf16"), model_dir, data_dir, True, extra)
    dump_fp32 = run_dump(args, os.path.join(run_dir, "fp32"), model_dir, data_dir, False, extra)

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
    check_logits(report, label, dump_bf16, dump_fp32, hf_logits, exact_logits,
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

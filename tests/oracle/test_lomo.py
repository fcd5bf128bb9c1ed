# Oracle: LOMO (issue 16), the optimizer fused into backward, against LOMO's update applied after
# a normal backward in a float64 torch loop on the same batches: per step the loss, the global
# gradient norm and the lr (OUT/metrics.jsonl), and the final weights (--dump-final).
# LOMO's update per parameter (OpenLMLab/LOMO lomo_optim.Lomo's hook):
#   g = clamp(g, -clip_grad_value, clip_grad_value);  g = g x clip_coef;
#   p = p (1 - lr wd) - lr g        (wd on Linear/Embedding weights, zerotune's grouping)
# with clip_coef = min(1, clip / (||g|| + 1e-6)) from the global norm measured by a first backward.
# 1. Full fine-tuning from a DeepSpeed JSON ("type": "LOMO", clip_grad_norm in its params, weight
#    decay, clip_grad_value binding for some elements), micro-batch 4, WarmupDecayLR: the two-pass
#    schedule (norm pass, update pass); clipping triggers at some steps and not at others.
# 2. LoRA adapters, no clipping: the single update pass (grad_norm measured during it).
# Also: one step of 4 is the step where LOMO and SGD agree: with no clipping or decay LOMO's
# update equals torch.optim.SGD(lr)'s after a normal backward (checked within the same loop).
import json
import os

import oracle_common as oc

torch = oc.torch

MICRO_BATCH = 4
STEPS = 4
BATCHES = [([9, 12, 8, 11], True), ([88, 96, 80, 92], False), ([10, 14, 9, 12], True), ([90, 84, 96, 86], False)]


def fused_reference(model, samples, lrs, params, clip, update):
    """A LOMO-style optimizer on the micro-batches zerotune uses: per step a normal float64 backward,
    the global norm's clip coefficient, then for each trainable parameter (name, p) LOMO's value
    clipping and update(step, name, p, g, lr, decayed) with the clipped gradient g. Returns per
    step (loss, grad_norm, clipped) and how many gradient elements the value clipping changed."""
    decayed = {id(p) for group in oc.decay_parameter_groups(model, 1.0) if group["weight_decay"] for p in group["params"]}
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    clip_value = params.get("clip_grad_value", 0.0)
    history, clamped = [], 0
    for step in range(STEPS):
        loss, _ = oc.reference_step(model, oc.step_micro_batches(samples, step, MICRO_BATCH, 1))
        norm = oc.global_grad_norm([p for _, p in trainable])
        coefficient = oc.deepspeed_clip_coefficient(norm, clip) if clip > 0 else 1.0
        with torch.no_grad():
            for name, p in trainable:
                g = p.grad.clamp(-clip_value, clip_value) if clip_value > 0 else p.grad
                clamped += int((g != p.grad).sum())
                update(step, name, p, g * coefficient, lrs[step], id(p) in decayed)
        history.append((loss, norm, coefficient < 1.0))
    return history, clamped


def lomo_reference(model, samples, lrs, params, clip):
    """LOMO: p = p (1 - lr wd) - lr g."""
    weight_decay = params.get("weight_decay", 0.0)

    def update(step, name, p, g, lr, decayed):
        if decayed and weight_decay > 0:
            p.mul_(1 - lr * weight_decay)
        p.sub_(lr * g)

    return fused_reference(model, samples, lrs, params, clip, update)


def compare_final(report, label, dump_path, model, lora):
    dump = oc.load_dump(dump_path)
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            name = oc.zerotune_name(name) if lora else name
            report.close(f"[{label}] final {name}", dump[name].double(), parameter.detach().double(),
                         atol=2e-6, rel_of_max=1e-4)


def run_case(args, report, tmp, seed, label, optimizer, clip, scheduler=None, lora=False, reference=lomo_reference,
             extra=()):
    """Trains with zerotune (`extra` flags added) and compares with reference(model, samples, lrs,
    params, clip); returns zerotune's output and the reference model."""
    model_dir, data_dir = os.path.join(tmp, label, "model"), os.path.join(tmp, label, "data")
    out_dir, dump_path = os.path.join(tmp, label, "out"), os.path.join(tmp, label, "final.safetensors")
    config = oc.make_llama(model_dir, seed=seed, initializer_range=0.02)
    samples = []
    for step, (lengths, prompt_masked) in enumerate(BATCHES):
        samples += oc.make_samples(seed + 1 + step, lengths, config.vocab_size, prompt_masked)
    oc.write_data(data_dir, samples, config.vocab_size)
    ds = {"train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": 1, "optimizer": optimizer}
    if scheduler:
        ds["scheduler"] = scheduler
    ds_path = os.path.join(tmp, label, "ds_config.json")
    with open(ds_path, "w") as stream:
        json.dump(ds, stream, indent=2)
    arguments = ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir, "--deepspeed", ds_path,
                 "--no-shuffle", "--max-steps", STEPS, "--dump-final", dump_path, *extra]
    adapter_dir = None
    if lora:
        adapter_dir = os.path.join(tmp, label, "adapter")
        oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", use_rslora=False, dropout=0.0)
        arguments += ["--adapter", adapter_dir]
    output = oc.run_zerotune(args.zerotune, arguments)
    records = oc.read_metrics(out_dir)
    params = optimizer["params"]
    lrs = oc.deepspeed_warmup_decay_lrs(STEPS, **scheduler["params"]) if scheduler else [params["lr"]] * STEPS
    model = oc.load_reference_peft(model_dir, adapter_dir) if lora else oc.load_reference_llama(model_dir)
    history, clamped = reference(model, samples, lrs, params, clip)
    if params.get("clip_grad_value", 0.0) > 0:
        report.check(clamped > 0, f"[{label}] oracle: clip_grad_value binds for some gradient elements ({clamped})")
    if clip > 0:
        oc.check_some_clipped(report, label, history)
    oc.compare_trajectory(report, label, records, history, lrs)
    compare_final(report, label, dump_path, model, lora)
    return output, model


def check_sgd_equivalence(report):
    """LOMO without clipping or decay is SGD: the reference update equals torch.optim.SGD's."""
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(6, 5, dtype=torch.float64, generator=generator)
    grad = torch.randn(6, 5, dtype=torch.float64, generator=generator)
    sgd_param = torch.nn.Parameter(weight.clone())
    sgd_param.grad = grad.clone()
    torch.optim.SGD([sgd_param], lr=0.3).step()
    lomo = weight - 0.3 * grad
    report.close("LOMO's update without clipping or decay is torch.optim.SGD's", lomo, sgd_param.detach(), atol=1e-15)


def main():
    args = oc.parse_args("zerotune LOMO training steps vs LOMO's update after a normal backward (float64)")
    report = oc.Report("LOMO: zerotune (fused into backward) vs LOMO's update in a float64 torch loop")
    check_sgd_equivalence(report)
    with oc.temporary_directory(args, "zt_oracle_lomo_") as tmp:
        full = {"type": "LOMO", "params": {"lr": 0.05, "weight_decay": 0.05, "clip_grad_norm": 1.0,
                                            "clip_grad_value": 0.02}}
        oc.run_guarded(report, "full_two_pass", run_case, args, report, tmp, 500, "full_two_pass", full, 1.0,
                       scheduler={"type": "WarmupDecayLR",
                                  "params": {"warmup_min_lr": 0.01, "warmup_max_lr": 0.05, "warmup_num_steps": 2,
                                             "warmup_type": "linear", "total_num_steps": STEPS}})
        lora = {"type": "lomo", "params": {"lr": 0.2}}
        oc.run_guarded(report, "lora_one_pass", run_case, args, report, tmp, 510, "lora_one_pass", lora, 0.0,
                       lora=True)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

# Oracle: the optimizers beyond AdamW (issue 16), a few updates of `zerotune train` against a
# float64 torch loop on the same batches (loss, grad_norm, lr from OUT/metrics.jsonl, step by
# step; the final weights from --dump-final).
# 1. SGD (torch.optim.SGD) from a DeepSpeed JSON: momentum 0.9 with dampening 0.1 and weight
#    decay 0.01 on Linear/Embedding weights; WarmupDecayLR; clipping 1.0 triggering at some
#    updates. Reference: torch.optim.SGD itself.
# 2. SGD with Nesterov momentum and weight decay on LoRA (all-linear) adapters, constant lr,
#    clipping 0.5.
# 3. Lamb (DeepSpeed FusedLamb): weight decay 0.1, min/max_coeff set so that the clamp binds for
#    some tensors, bias correction on; reference: FusedLambReference below, written from
#    FusedLamb's documented kernel (raw moments, u = m/(sqrt(v)+eps) + wd p, per-tensor trust
#    ratio ||p||/||u|| clamped, 1 when a norm is 0, step size lr sqrt(1-b2^t)/(1-b1^t)).
# 4. Lamb with eps inside the sqrt and no bias correction, on LoRA adapters.
import json
import os

import oracle_common as oc

torch = oc.torch

MICRO_BATCH, ACCUMULATION = 2, 2
STEPS = 5
BATCHES = [([9, 12, 8, 11], True), ([88, 96, 80, 92], False), ([10, 14, 9, 12], True),
           ([90, 84, 96, 86], False), ([20, 64, 16, 40], True)]
WARMUP_DECAY = {"warmup_min_lr": 0, "warmup_max_lr": 0.05, "warmup_num_steps": 2,
                "warmup_type": "linear", "total_num_steps": STEPS}


class FusedLambReference(torch.optim.Optimizer):
    """DeepSpeed FusedLamb's update in float64, one trust ratio per parameter tensor."""

    def __init__(self, params, lr, betas, eps, weight_decay, bias_correction, eps_inside_sqrt,
                 max_coeff, min_coeff):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.bias_correction, self.eps_inside_sqrt = bias_correction, eps_inside_sqrt
        self.max_coeff, self.min_coeff = max_coeff, min_coeff
        self.coefficients = []  # the trust ratios of the last step

    @torch.no_grad()
    def step(self):
        self.coefficients = []
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v, g = state["m"], state["v"], p.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v + group["eps"]).sqrt() if self.eps_inside_sqrt else v.sqrt() + group["eps"]
                update = m / denom + group["weight_decay"] * p
                step_size = group["lr"]
                if self.bias_correction:
                    step_size *= (1 - beta2 ** t) ** 0.5 / (1 - beta1 ** t)
                w_norm, u_norm = float(p.norm()), float(update.norm())
                coefficient = 1.0
                if w_norm != 0 and u_norm != 0:
                    coefficient = min(max(w_norm / u_norm, self.min_coeff), self.max_coeff)
                self.coefficients.append(coefficient)
                p.sub_(step_size * coefficient * update)


def write_config(path, optimizer, scheduler=None, clip=1.0):
    config = {"train_micro_batch_size_per_gpu": MICRO_BATCH,
              "gradient_accumulation_steps": ACCUMULATION,
              "gradient_clipping": clip, "optimizer": optimizer}
    if scheduler:
        config["scheduler"] = scheduler
    with open(path, "w") as stream:
        json.dump(config, stream, indent=2)


def compare_final(report, label, dump_path, model, lora):
    dump = oc.load_dump(dump_path)
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        name = oc.zerotune_name(name) if lora else name
        report.close(f"[{label}] final {name}", dump[name].double(), parameter.detach().double(),
                     atol=2e-6, rel_of_max=1e-4)


def run_case(args, report, tmp, seed, label, optimizer, make_reference, scheduler=None, lora=False,
             extra=(), check_clamp=None):
    clip = 0.5 if lora else 1.0  # LoRA's gradients are smaller: clip where some updates exceed it
    model_dir = os.path.join(tmp, label, "model")
    data_dir = os.path.join(tmp, label, "data")
    out_dir = os.path.join(tmp, label, "out")
    dump_path = os.path.join(tmp, label, "final.safetensors")
    config = oc.make_llama(model_dir, seed=seed, initializer_range=0.02)
    samples = []
    for update, (lengths, prompt_masked) in enumerate(BATCHES):
        samples += oc.make_samples(seed + 1 + update, lengths, config.vocab_size, prompt_masked)
    oc.write_data(data_dir, samples, config.vocab_size)
    ds_path = os.path.join(tmp, label, "ds_config.json")
    write_config(ds_path, optimizer, scheduler, clip)
    arguments = ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
                 "--deepspeed", ds_path, "--no-shuffle", "--max-steps", STEPS,
                 "--dump-final", dump_path] + list(extra)
    adapter_dir = None
    if lora:
        adapter_dir = os.path.join(tmp, label, "adapter")
        oc.make_adapter(model_dir, adapter_dir, seed + 2, "all-linear", use_rslora=False, dropout=0.0)
        arguments += ["--adapter", adapter_dir]
    oc.run_zerotune(args.zerotune, arguments)
    records = oc.read_metrics(out_dir)

    lr = optimizer["params"]["lr"]
    lrs = oc.deepspeed_warmup_decay_lrs(STEPS, **scheduler["params"]) if scheduler else [lr] * STEPS
    weight_decay = optimizer["params"].get("weight_decay", 0.0)
    model = (oc.load_reference_peft(model_dir, adapter_dir) if lora
             else oc.load_reference_llama(model_dir))
    made = []

    def factory(groups, first_lr):
        made.append(make_reference(groups, first_lr))
        return made[-1]

    history = oc.reference_trajectory(model, samples, STEPS, lrs, None, None, weight_decay, clip,
                                      MICRO_BATCH, ACCUMULATION, make_optimizer=factory)
    oc.check_some_clipped(report, label, history)
    oc.compare_trajectory(report, label, records, history, lrs)
    compare_final(report, label, dump_path, model, lora)
    if check_clamp:
        check_clamp(report, label, made[0])


def lamb_reference(params):
    def make(groups, lr):
        return FusedLambReference(groups, lr=lr, betas=tuple(params.get("betas", (0.9, 0.999))),
                                  eps=params.get("eps", 1e-8),
                                  weight_decay=params.get("weight_decay", 0.0),
                                  bias_correction=params.get("bias_correction", True),
                                  eps_inside_sqrt=params.get("eps_inside_sqrt", False),
                                  max_coeff=params.get("max_coeff", 10.0),
                                  min_coeff=params.get("min_coeff", 0.01))
    return make


def clamp_binds(low, high):
    def check(report, label, optimizer):
        coefficients = optimizer.coefficients
        report.check(any(c == high for c in coefficients) and any(low < c < high for c in coefficients),
                     f"[{label}] oracle: the trust ratio clamp binds for some tensors and not others "
                     f"(last step: {sorted(round(c, 3) for c in coefficients)})")
    return check


def main():
    args = oc.parse_args("zerotune SGD and Lamb training steps vs torch float64 references")
    report = oc.Report("Optimizer trajectories: zerotune SGD / Lamb vs torch.optim.SGD / FusedLamb (float64)")
    with oc.temporary_directory(args, "zt_oracle_optimizers_") as tmp:
        sgd = {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "dampening": 0.1,
                                          "weight_decay": 0.01}}
        oc.run_guarded(report, "sgd_momentum", run_case, args, report, tmp, 400, "sgd_momentum", sgd,
                       lambda groups, lr: torch.optim.SGD(groups, lr=lr, momentum=0.9, dampening=0.1),
                       scheduler={"type": "WarmupDecayLR", "params": WARMUP_DECAY})
        nesterov = {"type": "SGD", "params": {"lr": 0.2, "momentum": 0.8, "nesterov": True,
                                               "weight_decay": 0.05}}
        oc.run_guarded(report, "sgd_nesterov_lora", run_case, args, report, tmp, 410,
                       "sgd_nesterov_lora", nesterov,
                       lambda groups, lr: torch.optim.SGD(groups, lr=lr, momentum=0.8, nesterov=True),
                       lora=True)
        lamb = {"type": "Lamb", "params": {"lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.1,
                                            "max_coeff": 2.0, "min_coeff": 0.05}}
        oc.run_guarded(report, "lamb", run_case, args, report, tmp, 420, "lamb", lamb,
                       lamb_reference(lamb["params"]),
                       scheduler={"type": "WarmupDecayLR", "params": dict(WARMUP_DECAY, warmup_max_lr=0.01)},
                       check_clamp=clamp_binds(0.05, 2.0))
        lamb_plain = {"type": "lamb", "params": {"lr": 0.005, "eps": 1e-6, "eps_inside_sqrt": True,
                                                  "bias_correction": False}}
        oc.run_guarded(report, "lamb_eps_inside_lora", run_case, args, report, tmp, 430,
                       "lamb_eps_inside_lora", lamb_plain, lamb_reference(lamb_plain["params"]), lora=True)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

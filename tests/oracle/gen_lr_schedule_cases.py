"""Prints the C++ initialisers of the library-recorded lr sequences in tests/unit/test_lr_schedule.cpp.

Runs DeepSpeed's own deepspeed/runtime/lr_schedules.py (the file alone, not an installed DeepSpeed;
its only DeepSpeed import, deepspeed.utils.logger, is stubbed) and transformers.optimization:
    pip download deepspeed --no-deps -d /tmp/ds_new && tar xzf /tmp/ds_new/deepspeed-*.tar.gz -C /tmp/ds_new
    /tmp/ztvenv/bin/python tests/oracle/gen_lr_schedule_cases.py \
        /tmp/ds_new/deepspeed-0.19.8/deepspeed/runtime/lr_schedules.py
Each sequence: a torch.optim.AdamW over one parameter with the optimizer lr given, the scheduler
built as DeepSpeedEngine builds it (the class called with the JSON params as keyword arguments),
then per update: record param_groups[0]['lr'], optimizer.step(), scheduler.step() (what
DeepSpeedEngine._take_model_step does). Values are printed with repr(), i.e. exactly.
"""
import importlib.util
import logging
import sys
import types

import torch
from transformers import optimization as hf  # before the deepspeed stub: transformers probes for deepspeed


def load_deepspeed_schedules(path):
    deepspeed = types.ModuleType("deepspeed")
    utils = types.ModuleType("deepspeed.utils")
    utils.logger = logging.getLogger("deepspeed")
    utils.logger.setLevel(logging.ERROR)  # the constructors' "before it has started" warning is expected
    deepspeed.utils = utils
    sys.modules["deepspeed"] = deepspeed
    sys.modules["deepspeed.utils"] = utils
    spec = importlib.util.spec_from_file_location("lr_schedules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(make_scheduler, optimizer_lr, updates):
    parameter = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.AdamW([parameter], lr=optimizer_lr)
    scheduler = make_scheduler(optimizer)
    lrs = []
    for _ in range(updates):
        lrs.append(optimizer.param_groups[0]["lr"])
        parameter.grad = torch.ones(1)
        optimizer.step()
        scheduler.step()
    return lrs


def print_case(name, comment, lrs):
    print(f"// {comment}")
    print(f"const std::vector<double> {name} = {{{', '.join(repr(float(lr)) for lr in lrs)}}};")


def main():
    ds = load_deepspeed_schedules(sys.argv[1])
    cases = [
        ("kWarmupLogOracle", "WarmupLR(warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=10), log; optimizer lr 3e-4",
         lambda o: ds.WarmupLR(o, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=10), 3e-4, 14),
        ("kWarmupLinearOracle", "WarmupLR(0, 2e-3, 4, \"linear\"); optimizer lr 5e-4",
         lambda o: ds.WarmupLR(o, warmup_min_lr=0.0, warmup_max_lr=2e-3, warmup_num_steps=4, warmup_type="linear"),
         5e-4, 8),
        ("kWarmupClampOracle", "WarmupLR(1e-4, 1e-3, warmup_num_steps=1 -> DeepSpeed uses 2), log; optimizer lr 1e-3",
         lambda o: ds.WarmupLR(o, warmup_min_lr=1e-4, warmup_max_lr=1e-3, warmup_num_steps=1), 1e-3, 5),
        ("kWarmupDefaultMaxOracle", "WarmupLR(1e-5, warmup_max_lr absent, 3, \"linear\"); optimizer lr 4e-4",
         lambda o: ds.WarmupLR(o, warmup_min_lr=1e-5, warmup_num_steps=3, warmup_type="linear"), 4e-4, 6),
        ("kWarmupDecayLogOracle", "WarmupDecayLR(total_num_steps=20, 1e-5, 1e-3, 5), log; optimizer lr 1e-3",
         lambda o: ds.WarmupDecayLR(o, 20, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=5), 1e-3, 24),
        ("kWarmupDecayLinearOracle", "WarmupDecayLR(total_num_steps=10, 0, 1e-3, 4, \"linear\"); optimizer lr 1e-3",
         lambda o: ds.WarmupDecayLR(o, 10, warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=4,
                                    warmup_type="linear"), 1e-3, 13),
        ("kWarmupCosineLogOracle",
         "WarmupCosineLR(total_num_steps=20, warmup_min_ratio=0.1, warmup_num_steps=5), log, cos_min_ratio 1e-4 "
         "(default); optimizer lr 2e-3",
         lambda o: ds.WarmupCosineLR(o, 20, warmup_min_ratio=0.1, warmup_num_steps=5), 2e-3, 24),
        ("kWarmupCosineLinearOracle",
         "WarmupCosineLR(total_num_steps=12, warmup_min_ratio=0, warmup_num_steps=4, cos_min_ratio=0.05, "
         "\"linear\"); optimizer lr 1e-3",
         lambda o: ds.WarmupCosineLR(o, 12, warmup_min_ratio=0.0, warmup_num_steps=4, cos_min_ratio=0.05,
                                     warmup_type="linear"), 1e-3, 15),
        ("kHfLinearOracle", "transformers get_linear_schedule_with_warmup(optimizer, 3, 10); optimizer lr 1e-3",
         lambda o: hf.get_linear_schedule_with_warmup(o, 3, 10), 1e-3, 12),
        ("kHfCosineOracle", "transformers get_cosine_schedule_with_warmup(optimizer, 3, 10); optimizer lr 1e-3",
         lambda o: hf.get_cosine_schedule_with_warmup(o, 3, 10), 1e-3, 13),
        ("kHfLinearNoWarmupOracle", "transformers get_linear_schedule_with_warmup(optimizer, 0, 5); optimizer lr 2e-5",
         lambda o: hf.get_linear_schedule_with_warmup(o, 0, 5), 2e-5, 6),
    ]
    for name, comment, make_scheduler, optimizer_lr, updates in cases:
        print_case(name, comment, record(make_scheduler, optimizer_lr, updates))
    # What current DeepSpeed refuses: warmup_num_steps 0.
    for make in (lambda o: ds.WarmupLR(o, warmup_num_steps=0), lambda o: ds.WarmupCosineLR(o, 10, warmup_num_steps=0)):
        try:
            record(make, 1e-3, 1)
            print("// warmup_num_steps 0: accepted")
        except ValueError as error:
            print(f"// warmup_num_steps 0: ValueError: {error}")


if __name__ == "__main__":
    main()

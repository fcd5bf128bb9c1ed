# --report-nonfinite (issue 31 item 2): when a step is skipped, each rank names where inf/NaN
# first appeared. Gradients appear in backward order, last unit first, so:
#  1. fp16 at loss scale 2^32 (DeepSpeed-Chat's overflowing warm-up, made certain): every
#     skipped step gets one line per rank naming a trainable tensor of the LAST unit (the head
#     side), which is where a scaled backward first overflows; without the flag, no such lines;
#  2. fp16 at loss scale 1 with an LM head of weights 60000: its logits overflow fp16 in the
#     forward, the loss is NaN, and the report says so (the forward overflowed before any
#     gradient), besides naming the first gradient.
import json
import os
import re

import safetensors.torch

from mpi_common import (Report, main_guard, make_model_and_data, parse_args, read_run, run_ranks,
                        temporary_directory, write_ds_config)

LINE = re.compile(r"non-finite: step (\d+), rank (\d+): inf/NaN first in the gradient of (\S+) \(unit (\d+),")


def trainable_names(model_dir):
    return set(safetensors.torch.load_file(os.path.join(model_dir, "model.safetensors")).keys())


def main():
    args = parse_args(__doc__)
    report = Report("--report-nonfinite: where inf/NaN first appeared in a skipped step")
    with temporary_directory(args, "zt-nonfinite-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=16)
        names = trainable_names(model)
        ds = write_ds_config(os.path.join(workdir, "fp16.json"), 4, 2, {"stage": 2})
        with open(ds) as stream:
            config = json.load(stream)
        config["fp16"] = {"enabled": True, "initial_scale_power": 32, "loss_scale_window": 100}
        with open(ds, "w") as stream:
            json.dump(config, stream)
        base = [args.zerotune, "train", "--model", model, "--data", data, "--deepspeed", ds, "--max-steps", 2,
                "--device", "cpu", "--no-save-at-end"]

        out = os.path.join(workdir, "fp16")
        result, _ = run_ranks(2, base + ["--out", out, "--report-nonfinite"], expect_ok=False)
        last_unit = len(read_run(out)["zero_layout"]["unit_elements"]) - 1
        found = [(int(s), int(r), name, int(u)) for s, r, name, u in LINE.findall(result.stdout)]
        report.check(result.stdout.count("skipped (fp16 gradient overflow") == 2, "fp16 at 2^32: both steps skipped")
        report.check(sorted((s, r) for s, r, _, _ in found) == [(1, 0), (1, 1), (2, 0), (2, 1)],
                     f"one report per rank and skipped step: {[(s, r) for s, r, _, _ in found]}")
        report.check(all(name in names and unit == last_unit for _, _, name, unit in found),
                     f"each names a trainable tensor of the last unit ({last_unit}), where the backward starts: "
                     f"{sorted({(name, unit) for _, _, name, unit in found})}")
        plain, _ = run_ranks(2, base + ["--out", os.path.join(workdir, "plain")], expect_ok=False)
        report.check("skipped (fp16" in plain.stdout and "non-finite:" not in plain.stdout,
                     "without --report-nonfinite: the skip warnings only")

        weights = safetensors.torch.load_file(os.path.join(model, "model.safetensors"))
        weights["lm_head.weight"][:, :] = 60000.0  # logits ~ 60000 x hidden: beyond fp16's 65504
        safetensors.torch.save_file(weights, os.path.join(model, "model.safetensors"), metadata={"format": "pt"})
        config["fp16"]["initial_scale_power"] = 0
        config["train_batch_size"], config["zero_optimization"] = 2, {"stage": 0}
        with open(ds, "w") as stream:
            json.dump(config, stream)
        nan, _ = run_ranks(1, [args.zerotune, "train", "--model", model, "--data", data, "--deepspeed", ds,
                               "--max-steps", 1, "--device", "cpu", "--no-save-at-end", "--out",
                               os.path.join(workdir, "nan"), "--report-nonfinite"], expect_ok=False)
        report.check("non-finite: step 1: the loss is NaN (the forward overflowed before any gradient)" in nan.stdout,
                     "an LM head that overflows fp16: the report says the loss was not finite")
        report.check(len(LINE.findall(nan.stdout)) == 1, "and names the first non-finite gradient once")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

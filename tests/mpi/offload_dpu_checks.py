# ZeRO-Offload's one-step delayed parameter update (DPU, `--delayed-param-update N`,
# docs/zero-offload.md), checked on whole `zerotune train` runs; tests/mpi/test_offload_dpu.py runs
# these checks on the CPU backend, tests/emu/test_offload_dpu.py on the emulated device.
#
# The data is one sample repeated, so every micro-batch is the same and a step's loss is a function
# of the parameters its forward used alone. With p_k the parameters after k updates, DPU from update
# N + 1 = 2 on (--delayed-param-update 1) runs step 2's update in the background while step 3's
# forward uses p_1, and makes p_2 current before step 4. So, against the ordinary run's losses
# L(p_0), L(p_1), L(p_2), ...: the DPU run's are L(p_0), L(p_1), L(p_1), L(p_2), ... bit for bit (p_2
# is the ordinary p_2: update 2 takes step 2's gradient at p_1 either way); from step 5 on the runs
# part (update 3 took a gradient at p_1, not p_2). Checked per case:
#  1. --delayed-param-update STEPS (never delayed): losses and final weights bit-identical to the
#     run without the flag (only the gradient copy to the host moves: after backward, not during);
#  2. DPU from update 2: the losses above bit for bit, and the loss falls;
#  3. exact resume: killed in step 5 (ZT_FAULT) and resumed from the checkpoint of step 3, the run
#     ends bit-identical (losses, final weights) to the uninterrupted one with the same --save-every
#     (a checkpoint completes the update in flight; the saving run continues from there as well);
#  4. --update-per-bucket (the CPU update of each bucket during the last backward; no clipping, which
#     it refuses, and reduce buckets of a few units so that buckets are updated while backward goes
#     on): losses and final weights bit-identical to the ordinary update after backward, and exact
#     resume (killed in step 5, resumed from step 3);
# and once: the refusal without optimizer offload, and (check_skips, fp16 on the CPU backend) a
# skipped step lands the update in flight: with a loss scale that doubles after every good step
# (loss_scale_window 1), overflows skip steps now and then; where step s is skipped while the
# update of step s - 1 is in flight, step s + 1's forward uses that update's parameters, so its loss
# differs from step s's (were the update left in flight, both forwards would use the same p).
import json
import os
import subprocess
import sys

from mpi_common import (MPI_ENV, check_weights, load_weights, make_model_and_data, mpiexec, read_metrics,
                        run_ranks, write_ds_config)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from make_token_shard import write_shard  # noqa: E402

STEPS = 6
VOCAB = 256  # tiny-llama's


def repeated_sample_data(directory, samples=32):
    """A token shard of one random sample repeated: every batch is the same."""
    os.makedirs(directory)
    tokens = [1] + [(7 * i + 3) % (VOCAB - 3) + 3 for i in range(30)] + [2]
    mask = [0] * 8 + [1] * (len(tokens) - 8)
    write_shard(os.path.join(directory, "train-00000.h5"), [(tokens, mask)] * samples, vocab_size=VOCAB)
    return directory


class DpuRuns:
    """`zerotune train` runs of one case: `ranks` ranks, zero_optimization `zero`, `extra` flags
    (the device, the precision)."""

    def __init__(self, zerotune, workdir, model, data, ranks, zero, extra, precision=None, clipping=True):
        self.zerotune, self.workdir, self.model, self.data = zerotune, workdir, model, data
        self.ranks, self.extra = ranks, list(extra)
        self.ds = write_ds_config(os.path.join(workdir, "ds.json"), 4 * ranks, 2, zero)
        with open(self.ds) as stream:
            config = json.load(stream)
        config.pop("scheduler")  # a constant lr: the tour's warm-up starts at lr 0
        if not clipping:
            config.pop("gradient_clipping")
        if precision:  # "bf16"/"fp16", or top-level entries to set (a dict)
            config.update(precision if isinstance(precision, dict) else {precision: {"enabled": True}})
        with open(self.ds, "w") as stream:
            json.dump(config, stream)

    def command(self, out, flags):
        return [self.zerotune, "train", "--model", self.model, "--data", self.data, "--out", out, "--deepspeed",
                self.ds, "--max-steps", STEPS, "--seed", 5, "--dump-final", out + ".safetensors"] + self.extra + flags

    def train(self, name, flags=(), env=None):
        out = os.path.join(self.workdir, name)
        command = self.command(out, list(flags))
        if env is None:
            run_ranks(self.ranks, command)
            return out
        full = mpiexec(self.ranks, command)
        print("mpi: running " + " ".join(map(str, full)) + f"  with {env}", flush=True)
        result = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                                env=dict(os.environ, **MPI_ENV, **env))
        return out, result


def losses(out):
    return [record["loss"] for record in read_metrics(out)]


def same_run(report, label, got, ref):
    report.check(losses(got) == losses(ref), f"{label}: losses bit-identical ({losses(got)})")
    check_weights(report, label, load_weights(got + ".safetensors"), load_weights(ref + ".safetensors"), 0.0,
                  read_metrics(ref))


def check_case(report, label, runs):
    reference = runs.train("ordinary")
    never = runs.train("never", ["--delayed-param-update", STEPS])
    same_run(report, f"{label}, --delayed-param-update {STEPS} (never delayed) vs without", never, reference)

    delayed = losses(runs.train("delayed", ["--delayed-param-update", 1]))
    ordinary = losses(reference)
    report.check(len(delayed) == STEPS, f"{label}: {len(delayed)} steps")
    report.check(delayed[:2] == ordinary[:2], f"{label}: steps 1-2 ordinary ({delayed[:2]})")
    report.check(delayed[2] == delayed[1], f"{label}: step 3's forward used p_1 as step 2's did "
                 f"({delayed[2]!r} vs {delayed[1]!r})")
    report.check(delayed[3] == ordinary[2], f"{label}: step 4's forward used the ordinary p_2 "
                 f"({delayed[3]!r} vs {ordinary[2]!r})")
    report.check(delayed[4] != ordinary[3], f"{label}: from step 5 the runs part (update 3 took step 3's "
                 "gradient at p_1)")
    report.check(delayed[-1] < delayed[0] - 0.1, f"{label}: the loss falls ({delayed[0]:.4f} -> {delayed[-1]:.4f})")

    flags = ["--delayed-param-update", 1, "--save-every", 3]
    uninterrupted = runs.train("saving", flags)
    out, result = runs.train("killed", flags, env={"ZT_FAULT": f"kill:step:{runs.ranks - 1}:5"})
    report.check(result.returncode != 0, f"{label}: the run killed in step 5 failed (status {result.returncode})")
    runs.train("killed", flags + ["--resume", "auto"])
    same_run(report, f"{label}: killed in step 5, resumed from step 3, vs uninterrupted", out, uninterrupted)


def check_per_bucket(report, label, runs):
    ordinary = runs.train("unclipped")
    flags = ["--update-per-bucket", "--save-every", 3]  # (saves change nothing: no update is in flight between steps)
    per_bucket = runs.train("per-bucket", flags)
    same_run(report, f"{label}: --update-per-bucket vs the update after backward (no clipping)", per_bucket, ordinary)
    out, result = runs.train("per-bucket-killed", flags, env={"ZT_FAULT": f"kill:step:{runs.ranks - 1}:5"})
    report.check(result.returncode != 0, f"{label}: the per-bucket run killed in step 5 failed (status {result.returncode})")
    runs.train("per-bucket-killed", flags + ["--resume", "auto"])
    same_run(report, f"{label}: --update-per-bucket killed in step 5, resumed from step 3, vs uninterrupted", out,
             per_bucket)


def check_per_bucket_refusals(report, zerotune, workdir, model, data, extra):
    """--update-per-bucket where a bucket's update is not known before the backward ends."""
    runs = DpuRuns(zerotune, workdir, model, data, 1, {"stage": 2, "offload_optimizer": {"device": "cpu"}}, extra)
    for flags, words in ((["--update-per-bucket"], "gradient_clipping"),
                         (["--update-per-bucket", "--delayed-param-update", 1], "--delayed-param-update")):
        result, _ = run_ranks(1, runs.command(os.path.join(workdir, "refused"), flags), expect_ok=False)
        text = result.stdout + result.stderr
        lines = [line for line in text.splitlines() if "--update-per-bucket" in line][:1]
        report.check(result.returncode != 0 and bool(lines) and words in lines[0],
                     f"--update-per-bucket refused naming {words} (status {result.returncode}): {lines}")


def check_skips(report, zerotune, workdir, model, data):
    runs = DpuRuns(zerotune, workdir, model, data, 1, {"stage": 2, "offload_optimizer": {"device": "cpu"}}, [])
    with open(runs.ds) as stream:
        config = json.load(stream)
    config["fp16"] = {"enabled": True, "initial_scale_power": 14, "loss_scale_window": 1, "hysteresis": 1}
    with open(runs.ds, "w") as stream:
        json.dump(config, stream)
    records = read_metrics(runs.train("fp16-skips", ["--delayed-param-update", 1]))
    skipped = [record["skipped"] - (records[i - 1]["skipped"] if i else 0) for i, record in enumerate(records)]
    # Steps (1-based) s skipped right after a delayed update was started (step s - 1 >= 3 not skipped).
    landed = [i + 1 for i in range(3, len(records) - 1) if skipped[i] and not skipped[i - 1]]
    report.check(bool(landed), f"fp16 with DPU: a step skipped while an update was in flight (skips per step "
                               f"{skipped})")
    for s in landed:
        report.check(records[s]["loss"] != records[s - 1]["loss"],
                     f"fp16 with DPU: step {s} skipped; step {s + 1}'s forward used the update that was in flight "
                     f"(loss {records[s]['loss']!r} vs step {s}'s {records[s - 1]['loss']!r})")


def check_refusal(report, zerotune, workdir, model, data, extra):
    ds = write_ds_config(os.path.join(workdir, "ds-refused.json"), 4, 2, {"stage": 2})
    result, _ = run_ranks(1, [zerotune, "train", "--model", model, "--data", data, "--out",
                              os.path.join(workdir, "refused"), "--deepspeed", ds, "--max-steps", 2,
                              "--delayed-param-update", 1] + list(extra), expect_ok=False)
    text = result.stdout + result.stderr
    report.check(result.returncode != 0 and "--delayed-param-update" in text and "offload_optimizer" in text,
                 f"--delayed-param-update without optimizer offload is refused, naming both "
                 f"(status {result.returncode}): {[line for line in text.splitlines() if 'delayed-param' in line][:1]}")


def run_checks(report, zerotune, workdir, cases, extra, per_bucket_cases=None):
    """cases: (label, ranks, zero_optimization, precision or None); per_bucket_cases: the indices of
    those that check --update-per-bucket too (default: all)."""
    model, _ = make_model_and_data(zerotune, workdir, samples=8)
    data = repeated_sample_data(os.path.join(workdir, "repeated"))
    check_refusal(report, zerotune, workdir, model, data, extra)
    if not extra:  # the CPU backend (the emulated device's runs pass --device cuda)
        os.makedirs(os.path.join(workdir, "per-bucket-refusals"))  # (checked at start, before any device work)
        check_per_bucket_refusals(report, zerotune, os.path.join(workdir, "per-bucket-refusals"), model, data, extra)
        os.makedirs(os.path.join(workdir, "skips"))
        check_skips(report, zerotune, os.path.join(workdir, "skips"), model, data)
    for index, (label, ranks, zero, precision) in enumerate(cases):
        case_dir = os.path.join(workdir, f"case{index}")
        os.makedirs(case_dir)
        check_case(report, label, DpuRuns(zerotune, case_dir, model, data, ranks, zero, extra, precision))
        if per_bucket_cases is not None and index not in per_bucket_cases:
            continue
        os.makedirs(os.path.join(case_dir, "per-bucket"))
        check_per_bucket(report, label, DpuRuns(zerotune, os.path.join(case_dir, "per-bucket"), model, data, ranks,
                                                dict(zero, reduce_bucket_size=20000), extra, precision, clipping=False))

# The memory estimate against measured peaks over a small grid of settings (issue 20), shared by
# tests/mpi/test_memory_grid.py (the CPU backend) and tests/gpu/test_gpu_memory_grid.py (the
# emulated device, or a real GPU). For each setting, `zerotune estimate --json --device D` (the
# memory model, with the same DeepSpeed JSON, sequence length, micro-batch, world size, LoRA and
# activation checkpointing) predicts rank 0's peak; `zerotune train --device D` for 2 steps
# measures it:
#   - cpu: metrics.jsonl's mem_cpu_backend_peak, the CPU backend's own count of its buffers (malloc's
#     usable size of each), against the prediction's host_peak_bytes (on the CPU everything the
#     run allocates is host memory);
#   - cuda: mem_device_peak, the CUDA backend's counters (what the emulator's arena and the
#     virtual-memory chunks hold), against device_peak_bytes.
# Both must agree within 10%. One setting trains on samples of 16 to 64 tokens (`estimate --data`):
# a longer micro-batch after a shorter one grows the activation buffers, old and new held for a
# moment, which the memory model counts (DataLengths::grown_from_seq_len). The model is data/mid-llama (16 blocks of 111k parameters: its units
# span many of the emulator's 64 KiB chunks), the ZeRO knobs scaled to it as in test_gpu_memory.py.
import json
import os
import subprocess
import sys

from mpi_common import REPO, run_ranks, write_ds_config
from oracle_common import OracleError, read_metrics

TOLERANCE = 0.10
ZERO_KNOBS = {"reduce_bucket_size": 100000, "allgather_bucket_size": 100000, "stage3_max_reuse_distance": 0,
              "stage3_prefetch_bucket_size": 120000}
# name: (ranks, stage, offload optimizer (True, or a number: offload_optimizer.ratio's partial
#        offload), offload param, activation checkpointing, micro-batch, tokens (every sample; or
#        (shortest, longest)), LoRA)
GRID = {
    "full-s0-mb1-t64": (1, 0, False, False, False, 1, 64, False),
    "full-s0-mb2-t64-ckpt": (1, 0, False, False, True, 2, 64, False),
    "full-s1-offload-mb2-t32": (1, 1, True, False, False, 2, 32, False),
    "full-s2-w2-mb1-t64-ckpt": (2, 2, False, False, True, 1, 64, False),
    "full-s3-w2-mb2-t64": (2, 3, False, False, False, 2, 64, False),
    "full-s3-w2-offload-all-mb1-t64-ckpt": (2, 3, True, True, True, 1, 64, False),
    "full-s3-offload-ratio-half-mb1-t32": (1, 3, 0.5, False, False, 1, 32, False),
    "lora-s2-mb4-t64": (1, 2, False, False, False, 4, 64, True),
    "lora-s3-w2-mb2-t32-ckpt": (2, 3, False, False, True, 2, 32, True),
    "full-s1-mb2-t16to64": (1, 1, False, False, False, 2, (16, 64), False),
}


def make_model_and_shards(zerotune, workdir):
    """The model and one dataset per sequence length (every sample that long: the peak's length)."""
    model = os.path.join(workdir, "model")
    subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "mid-llama", "config.json"), "--out",
                    model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    data = {}
    for tokens in {setting[6] for setting in GRID.values()}:
        shortest, longest = tokens if isinstance(tokens, tuple) else (tokens, tokens)
        data[tokens] = os.path.join(workdir, f"data-{shortest}-{longest}")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out",
                        data[tokens], "--samples", "32", "--vocab", "256", "--min-len", str(shortest), "--max-len",
                        str(longest), "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
    return model, data


def zero_section(stage, offload_optimizer, offload_param):
    zero = dict(ZERO_KNOBS, stage=stage)
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
        if not isinstance(offload_optimizer, bool):  # the first units' optimizer states stay on the device
            zero["offload_optimizer"]["ratio"] = offload_optimizer
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    return zero


def predicted_peak(zerotune, device, model, data, ds, setting, extra=()):
    """The estimate's peak for rank 0 of `setting` (extra: more estimate flags, e.g. --objective)."""
    ranks, stage, offload_optimizer, offload_param, checkpointing, micro, tokens, lora = setting
    command = [zerotune, "estimate", "--model", model, "--deepspeed", ds, "--gpus-per-node", str(ranks),
               "--micro-batch", str(micro), "--device", device, "--compute-dtype", "fp32", "--json"] + list(extra)
    # Varied lengths: the data says the longest and the growth; else every sample is `tokens` long.
    command += ["--data", data] if isinstance(tokens, tuple) else ["--seq-len", str(tokens)]
    if lora:
        command += ["--lora-r", "8", "--lora-targets", "all-linear"]
    if checkpointing:
        command += ["--activation-checkpointing"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise OracleError(f"zerotune estimate failed: {result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    for row in report["rows"]:
        if (row["stage"], row["offload_optimizer"], row["offload_param"]) == (
                stage, "cpu" if offload_optimizer else "none", "cpu" if offload_param else "none"):
            run = row["zerotune_run"]
            return run["host_peak_bytes"] if device == "cpu" else run["device_peak_bytes"], run
    raise OracleError(f"zerotune estimate printed no row for stage {stage}, offload {offload_optimizer}/{offload_param}")


def check_grid(report, zerotune, workdir, device):
    """Every setting of GRID: measured within TOLERANCE of the estimate. Returns the table rows."""
    model, data = make_model_and_shards(zerotune, workdir)
    rows = []
    for name, setting in GRID.items():
        ranks, stage, offload_optimizer, offload_param, checkpointing, micro, tokens, lora = setting
        ds = write_ds_config(os.path.join(workdir, name + ".json"), micro * ranks, micro,
                             zero_section(stage, offload_optimizer, offload_param))
        out = os.path.join(workdir, f"{device}-{name}")
        command = [zerotune, "train", "--model", model, "--data", data[tokens], "--out", out, "--deepspeed", ds,
                   "--max-steps", 2, "--seed", 3, "--device", device, "--no-save-at-end"]
        if lora:
            command += ["--lora-r", 8, "--lora-alpha", 16, "--lora-targets", "all-linear"]
        if checkpointing:
            command += ["--activation-checkpointing"]
        run_ranks(ranks, command)
        metrics = read_metrics(out)
        key = "mem_cpu_backend_peak" if device == "cpu" else "mem_device_peak"
        report.check(len(metrics) == 2 and all(key in record for record in metrics),
                     f"{name}: two steps recorded, each with {key}")
        measured = max(record[key] for record in metrics)
        predicted, run = predicted_peak(zerotune, device, model, data[tokens], ds, setting)
        report.scalar(f"{device} {name}: measured peak ({key}) vs zerotune estimate", measured, predicted, TOLERANCE)
        report.check(predicted == sum(run["device_peak_terms" if device != "cpu" else "host_peak_terms"].values()),
                     f"{device} {name}: the estimate's terms add up to its peak")
        rows.append((name, measured, predicted))
    print(f"| setting ({device}) | measured peak (B) | estimate (B) | measured / estimate |")
    for name, measured, predicted in rows:
        print(f"| {name} | {measured} | {predicted} | {measured / predicted:.3f} |")
    return rows

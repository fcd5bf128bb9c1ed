# The memory model against the run, allocation by allocation (issue 34): `zerotune train` with
# ZT_ALLOCATION_LOG writes every backend allocation and release of each rank process, first the
# memory model's (the counting backend, before the run allocates anything), then the run's own
# (src/backend/allocation_log.h). Both assemble the run with the same code (train/run_assembly.h)
# and step it with the same StepRunner, so from the mark "assemble" to the end of the first step
# ("stepped") the two must allocate the same buffers, of the same sizes, in the same order, and
# release the same ones: any set-up or step code that allocates in one and not the other (the
# drift issue 34 found: packed positions, LOMO's norm pass) fails here with its place in the
# sequence. Op scratch of the CUDA backend (partial sums, cuDNN's workspace, "scratch" lines) is
# the backend's own, outside what the model assembles, and left out of the comparison. The cases
# run on an untied LLaMA (data/mid-llama) and, for tied heads under a pipeline, a 4-layer tiny OPT.
# Shared by tests/mpi/test_allocation_drift.py (the CPU backend) and
# tests/gpu/test_gpu_allocation_drift.py (the emulated device, or a real GPU).
import bisect
import glob
import os
import subprocess
import sys

from mpi_common import REPO, make_family_model, run_ranks, write_ds_config

ZERO_KNOBS = {"reduce_bucket_size": 20000, "allgather_bucket_size": 20000, "stage3_max_reuse_distance": 0,
              "stage3_prefetch_bucket_size": 30000}
SEQ = 48  # every sample this long: the first step's micro-batches are the prediction's B x T
# The op scratch the memory model leaves out is small (train/memory_model.h: partial sums, status
# words). A larger scratch buffer in a step is one the model counts by rule (the attention's, which
# the counting backend logs as scratch too) or one the prediction misses: on an H200 (2026-11-28) the
# resident part's rounding to the host under offload_optimizer.ratio + offload_param staged 1.7 GB
# that way, 1.67 GiB over the predicted peak.
LARGE_SCRATCH_BYTES = 64 << 10

# name: (ranks, stage, offload optimizer (True, or a number: offload_optimizer.ratio), offload param,
#        optimizer (None: AdamW), extra train flags)
CASES = {
    "s0": (1, 0, False, False, None, []),
    "s0-accum2-ckpt": (1, 0, False, False, None, ["--grad-accum", 2, "--activation-checkpointing"]),
    "s1-offload": (1, 1, True, False, None, []),
    "s2-w2": (2, 2, False, False, None, []),
    "s3-w2": (2, 3, False, False, None, ["--activation-checkpointing"]),
    "s3-w2-offload-all": (2, 3, True, True, None, []),
    # offload_optimizer.ratio 0.5 + offload_param: the resident part's gathers rounded from its master on
    # the device (its update once went to the bf16 host partition through op scratch of the whole part:
    # LARGE_SCRATCH_BYTES below).
    "s3-offload-ratio-half-param-bf16": (1, 3, 0.5, True, None, ["--bf16"]),
    # offload_param alone: the whole master is on the device (until the H200's call9 rounded into the
    # host partition after the update as one op scratch copy of the whole partition: 2.32 GiB over;
    # since, the gathers round it in place).
    "s3-offload-param-only-bf16": (1, 3, False, True, None, ["--bf16"]),
    "s2-lora": (1, 2, False, False, None, ["--lora-r", 4, "--lora-targets", "all-linear"]),
    "s0-qlora-packing": (1, 0, False, False, None, ["--lora-r", 4, "--quantize", "nf4", "--packing"]),
    "s2-sgd": (1, 2, False, False, {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}}, []),
    "s1-lamb-w2": (2, 1, False, False, {"type": "Lamb", "params": {"lr": 0.01}}, []),
    "s0-lomo-clip": (1, 0, False, False, {"type": "LOMO", "params": {"lr": 0.05}}, []),
    "s3-adalomo-w2": (2, 3, False, False, {"type": "AdaLomo", "params": {"lr": 0.05}}, []),
    "s0-onebit-w2": (2, 0, False, False, {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": 1}}, []),
    # Pipeline stages (issue 32): each rank's stage, its engine's stage inputs and received gradients
    # (1f1b: TIED_CASES).
    "s2-pipeline-p2-w4-gpipe": (4, 2, False, False, None, ["--pipeline-stages", 2, "--pipeline-schedule", "gpipe"]),
    "s1-pipeline-p2-interleaved": (2, 1, False, False, None, ["--pipeline-stages", 2, "--pipeline-schedule",
                                                                "interleaved"]),
}
# The same on the 4-layer tiny OPT, whose head is tied to the token table: under a pipeline the last
# stage holds a copy of the table, and the gradient the tie sums between the first and last stage
# where the table trains (full fine-tuning; LoRA freezes it).
TIED_CASES = {
    "s1-pipeline-p2-tied": (2, 1, False, False, None, ["--pipeline-stages", 2]),
    "s0-pipeline-p2-interleaved-tied-lora": (2, 0, False, False, None, ["--pipeline-stages", 2, "--pipeline-schedule",
                                                                          "interleaved", "--lora-r", 4,
                                                                          "--lora-targets", "all-linear"]),
}
# Only where the device is a GPU (pinned host memory for the block inputs).
GPU_CASES = {
    "s2-offload-activations": (1, 2, False, False, None, ["--activation-checkpointing", "--offload-activations"]),
}


def read_log(path):
    """The events of one process's log, split into the memory model's and the run's."""
    streams = {"model": [], "run": []}
    with open(path) as stream:
        for line in stream:
            kind, first, rest = line.rstrip("\n").split(" ", 2)
            if kind == "mark":
                source, event = rest, ("mark", first)
            else:
                source, event = first, (kind,) + tuple(rest.split())
            streams["model" if source.startswith("counting") else "run"].append(event)
    return streams


def comparable(events):
    """From the mark "assemble" to the first "stepped": ("alloc", bytes), ("release", index of the
    allocation released, or "older" for one made before "assemble") and the marks; scratch left out."""
    out, live, scratch, started, allocations = [], {}, set(), False, 0
    for event in events:
        kind = event[0]
        if kind == "scratch":
            scratch.add(event[2])
            continue
        if kind == "release" and event[1] in scratch:
            scratch.discard(event[1])
            continue
        if kind == "mark":
            started = started or event[1] == "assemble"
            if started:
                out.append(event)
                if event[1] == "stepped":
                    return out
            continue
        if not started:
            continue
        if kind == "alloc":
            live[event[2]] = allocations
            allocations += 1
            out.append(("alloc", int(event[1])))
        else:
            out.append(("release", live.pop(event[1], "older")))
    return out


def large_scratch(events):
    """The sizes of the op scratch buffers over LARGE_SCRATCH_BYTES allocated in the first step
    (from the mark "step" to "stepped")."""
    sizes, in_step = [], False
    for event in events:
        if event == ("mark", "step"):
            in_step = True
        elif event == ("mark", "stepped"):
            break
        elif event[0] == "scratch" and in_step and int(event[1]) > LARGE_SCRATCH_BYTES:
            sizes.append(int(event[1]))
    return sizes


def unmatched(run_sizes, model_sizes):
    """The run's sizes no model size covers: largest first, each takes the smallest model size at
    least as large that is left (the attention's scratch is counted by a rule that may exceed what
    a real cuDNN engine asks: on an H200 the backward's plan took less than the allowance)."""
    left = sorted(model_sizes)
    extra = []
    for size in sorted(run_sizes, reverse=True):
        index = bisect.bisect_left(left, size)
        if index < len(left):
            left.pop(index)
        else:
            extra.append(size)
    return extra


def first_difference(model, run):
    for index, (a, b) in enumerate(zip(model, run)):
        if a != b:
            return index, a, b
    if len(model) != len(run):
        index = min(len(model), len(run))
        return index, model[index] if index < len(model) else None, run[index] if index < len(run) else None
    return None


def make_model_and_data(zerotune, workdir, label):
    """The model `label` ("mid-llama": data/mid-llama, untied; "opt4": the tiny OPT of the family
    cases with 4 decoder layers and hidden size 32, tied) in workdir/label and 16 samples of SEQ tokens for its
    vocabulary in workdir/label-data."""
    model = os.path.join(workdir, label)
    if label == "mid-llama":
        subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "mid-llama", "config.json"), "--out",
                        model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        vocab = 256
    else:
        # Half the family case's width: the emulated device's time (the sizes change no allocation).
        vocab = make_family_model("opt", model, num_hidden_layers=4, hidden_size=32, ffn_dim=48,
                                  num_attention_heads=2).vocab_size
    data = model + "-data"
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                    "--samples", "16", "--vocab", str(vocab), "--min-len", str(SEQ), "--max-len", str(SEQ), "--seed",
                    "0"], check=True, stdout=subprocess.DEVNULL)
    return model, data


def check_drift(report, zerotune, workdir, device, cases, tied_cases=TIED_CASES):
    """`cases` on mid-llama and `tied_cases` on the tied 4-layer OPT, on `device`."""
    for label, model_cases in (("mid-llama", cases), ("opt4", tied_cases)):
        model, data = make_model_and_data(zerotune, workdir, label)
        for name, case in model_cases.items():
            check_case(report, zerotune, workdir, device, name, case, model, data)


def check_case(report, zerotune, workdir, device, name, case, model, data):
    """One case (ranks, stage, offload optimizer, offload param, optimizer, flags) for 1 step: the
    memory model's allocations and the run's, rank by rank."""
    ranks, stage, offload_optimizer, offload_param, optimizer, flags = case
    zero = dict(ZERO_KNOBS, stage=stage)
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
        if not isinstance(offload_optimizer, bool):  # the first units' optimizer states stay on the device
            zero["offload_optimizer"]["ratio"] = offload_optimizer
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 2 * ranks * (2 if "--grad-accum" in flags else 1),
                         2, zero, optimizer)
    out = os.path.join(workdir, f"{device}-{name}")
    log_prefix = os.path.join(workdir, f"log-{device}-{name}")
    os.environ["ZT_ALLOCATION_LOG"] = log_prefix
    try:
        run_ranks(ranks, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                          "--max-steps", 1, "--device", device, "--no-save-at-end"] + flags)
    finally:
        del os.environ["ZT_ALLOCATION_LOG"]
    logs = sorted(glob.glob(log_prefix + ".*"))
    report.check(len(logs) == ranks, f"{device} {name}: one allocation log per rank ({len(logs)} of {ranks})")
    for path in logs:
        streams = read_log(path)
        model_events, run_events = comparable(streams["model"]), comparable(streams["run"])
        allocations = sum(1 for event in run_events if event[0] == "alloc")
        stepped = ("mark", "stepped") in model_events and ("mark", "stepped") in run_events
        difference = first_difference(model_events, run_events)
        missed = unmatched(large_scratch(streams["run"]), large_scratch(streams["model"]))
        report.check(not missed, f"{device} {name} ({os.path.basename(path)}): every op scratch buffer over "
                     f"{LARGE_SCRATCH_BYTES} B in step 1 is one the memory model counts at least as large (not "
                     f"counted: {missed})")
        report.check(stepped and allocations > 0 and difference is None,
                     f"{device} {name} ({os.path.basename(path)}): memory model and run allocate the same "
                     f"{allocations} buffers through set-up and step 1"
                     + ("" if difference is None else
                        f"; first difference at event {difference[0]}: model {difference[1]}, run {difference[2]}"))

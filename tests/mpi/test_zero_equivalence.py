# ZeRO equivalence (issue 4): for full fine-tuning and LoRA, stages 0-3 x world sizes 1, 2, 4
# (oversubscribed) x offload_optimizer none/cpu (stage 3 also with offload_param cpu: the
# parameter partitions in host memory) give the same losses, gradient norms and final
# weights as one rank with the same global batch (16 samples, micro-batch 4: accumulation
# 4/W), within float reassociation. The runs also vary the ZeRO knobs so every path runs:
# W=2: small buckets (several per step), nothing persistent, stage3_max_reuse_distance 0
# (every unit released after use), synchronous reductions; W=4: persistent units, default
# reuse distance, overlap_comm (one bucket in flight).
# Tied heads (issue 15): the same matrix for a tiny OPT (tied head, learned positions, LayerNorm
# with biases) and a tied LLaMA, where lm_head.weight is the token embedding: the head's unit reads
# (gathers, at stage 3) the embedding's unit 0 and its backward adds into the embedding's gradient
# before unit 0's own backward does. At W=4 their head unit (the final norm) is persistent and the
# embedding it reads is not. 4 steps are the fewest that test an update: DeepSpeed's WarmupLR gives
# updates 1 and 2 a learning rate of 0 (and a run's time is its start-up, not its steps). Full
# fine-tuning checks that the tied embedding trains. OPT-350m's shape (project_in in unit 0, whose
# backward reads parameters; post-LN) runs stage 3 on 2 ranks, with and without offload_param.
# OPT's key-projection biases have no gradient (mpi_common.gradient_free): their final values are
# held only to Adam's largest move.
# Accounting: each rank's counted bytes per step match the engine's plan exactly (W=2 runs),
# the plan matches the ZeRO formulas from the padded layout (stage 0: 2x gradient bytes as
# all-reduce, 1/2: reduce-scatter + all-gather, 3: + 2 gathers per micro-batch), scaled by
# (W-1)/W, and the per-rank master/optimizer state is 1/W of the total for stage >= 1. With a tied
# head, stage 3 gathers unit 0 for the head too (in forward and backward), and unit 0's own backward
# gathers nothing unless it reads parameters (project_in).
import json
import os
import time

from mpi_common import (Report, check_weights, hf_config, load_weights, main_guard, make_model_and_data, parse_args,
                        read_metrics, read_run, run_ranks, temporary_directory, write_ds_config)

STEPS = 4
LOSS_REL = 2e-6      # fp32 sums in another order: measured ~1e-7
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6   # after 4 Adam steps of lr <= 1.2e-3 (measured < 3e-7)

# The models of the matrix: the untied LLaMA of data/tiny-llama, then the tied ones.
MATRIX_MODELS = ("llama", "opt", "llama_tied")

ZERO_KNOBS = {
    1: {},
    2: {"reduce_bucket_size": 12000, "allgather_bucket_size": 12000, "stage3_param_persistence_threshold": 0,
        "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 100000, "overlap_comm": False},
    4: {"reduce_bucket_size": 50000, "allgather_bucket_size": 50000, "stage3_param_persistence_threshold": 30000,
        "overlap_comm": True},
}
# W=4's persistence threshold per model, between the unit sizes: the untied LLaMA's embedding
# and head units (16k elements each) persistent, its blocks not; the tied models' head unit (the
# final norm, 64 or 128 elements) persistent, the embedding unit it reads (8k or 12k) not.
PERSISTENCE_W4 = {"llama": 30000, "opt": 1000, "llama_tied": 1000}

# A shorter run where steps are costly (the emulated GPU's matrix, tests/gpu/test_gpu_zero_equivalence.py):
# WarmupLR from 6e-4 instead of 0, so update 1 already moves the weights. 2 steps then test what
# STEPS' steps 3 and 4 do: step 2's forward reads updated (at stage 3: re-gathered) parameters,
# and the final weights hold two updates of lr 6e-4 (STEPS: 6e-4 and 1.2e-3).
EARLY_UPDATE_STEPS = 2
EARLY_UPDATE_SCHEDULER = {"type": "WarmupLR", "params": {"warmup_min_lr": 6e-4, "warmup_max_lr": 1.2e-3,
                                                         "warmup_num_steps": 5, "warmup_type": "linear"}}


def train(zerotune, workdir, model, data, mode, ranks, stage, offload, device, steps=STEPS, model_name="llama",
          scheduler=None):
    name = f"{mode}-w{ranks}-s{stage}-{offload}-{device}"
    out = os.path.join(workdir, name)
    # offload "param": offload_param alone (the fp32 master on the device, the 16-bit partition on the host)
    zero = dict(ZERO_KNOBS[ranks], stage=stage, offload_optimizer={"device": "none" if offload in ("none", "param") else "cpu"})
    if ranks == 4:
        zero["stage3_param_persistence_threshold"] = PERSISTENCE_W4[model_name]
    if offload in ("cpu+param", "param"):
        zero["offload_param"] = {"device": "cpu"}
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 16, 4, zero)
    if scheduler:
        with open(ds) as stream:
            config = json.load(stream)
        config["scheduler"] = scheduler
        with open(ds, "w") as stream:
            json.dump(config, stream, indent=1)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
               "--max-steps", steps, "--seed", 3, "--dump-final", out + ".safetensors", "--device", device]
    if mode == "lora":
        command += ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear", "--lora-dropout", 0.1]
    _, seconds = run_ranks(ranks, command)
    return {"name": f"{model_name} {name}", "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors"),
            "run": read_run(out), "ranks": ranks, "stage": stage, "offload": offload, "steps": steps,
            "seconds": seconds}


def compare(report, got, ref):
    label = got["name"]
    report.check(len(got["metrics"]) == got["steps"], f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        report.scalar(f"{label} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.scalar(f"{label} step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
    check_weights(report, label, got["weights"], ref["weights"], WEIGHT_ATOL, ref["metrics"])


class UnitReads:
    """Which units read the embedding's unit 0, from the HF config (not from zerotune): a tied
    head's unit L+1 (lm_head.weight is the token embedding), and unit 0 itself in backward only
    when it holds parameters that backward reads (OPT's project_in; tables alone do not)."""

    def __init__(self, model_dir):
        config = hf_config(model_dir)
        self.tied = bool(config.tie_word_embeddings)
        self.unit0_backward = getattr(config, "word_embed_proj_dim", config.hidden_size) != config.hidden_size

    def gathered_per_micro_batch(self, units):
        """Elements stage 3 gathers in one micro-batch, nothing persistent, reuse distance 0: every
        unit for its forward and its backward (unit 0: forward only, unless its backward reads
        parameters), unit 0 again for a tied head's forward and backward."""
        return (2 * sum(units) - (0 if self.unit0_backward else units[0])
                + (2 * units[0] if self.tied else 0))

    def largest_in_use(self, units):
        """The most elements one unit's use holds gathered: the unit and what it reads."""
        return max(units[:-1] + [units[-1] + (units[0] if self.tied else 0)])


def check_accounting(report, got, reads):
    label, ranks, stage, run = got["name"], got["ranks"], got["stage"], got["run"]
    share = (ranks - 1) / ranks
    layout = run["zero_layout"]
    trainable = 4.0 * layout["trainable_elements"]
    accumulation = run["gradient_accumulation_steps"]
    plan = run["zero_comm_plan_bytes_per_step"]
    # The ZeRO formulas, from the padded layout (nothing persistent, reuse distance 0: W=2).
    if ranks == 2:
        expected = {0: {"all_reduce": 2 * share * trainable, "reduce_scatter": 0, "all_gather": 0},
                    1: {"all_reduce": 0, "reduce_scatter": share * trainable, "all_gather": share * trainable},
                    2: {"all_reduce": 0, "reduce_scatter": accumulation * share * trainable,
                        "all_gather": share * trainable},
                    3: {"all_reduce": 0, "reduce_scatter": accumulation * share * trainable,
                        "all_gather": accumulation * share * 4.0 * reads.gathered_per_micro_batch(
                            layout["unit_elements"])}}[stage]
        for kind, value in expected.items():
            report.scalar(f"{label}: planned {kind} bytes/step = ZeRO formula", plan[kind], value, 1e-12)
        for record in got["metrics"]:
            sent = record["comm_bytes_sent"]
            for kind in ("all_reduce", "reduce_scatter", "all_gather"):
                report.scalar(f"{label} step {record['step']}: counted {kind} bytes = plan", sent[kind], plan[kind], 1e-12)
    memory = run["zero_memory_per_rank"]
    divisor = 1 if stage == 0 else ranks
    report.scalar(f"{label}: master bytes per rank = 1/{divisor} of the trainable", memory["master_params"],
                  trainable / divisor, 1e-12)
    report.scalar(f"{label}: optimizer state per rank = 2 x master", memory["optimizer_state"],
                  2 * memory["master_params"], 1e-12)
    if stage == 3 and ranks == 2:  # nothing persistent: the largest unit in use (with what it reads) + one prefetched
        units = layout["unit_elements"]
        frozen = layout["all_elements"] - layout["trainable_elements"]
        offloaded = layout["trainable_elements"] / ranks if got["offload"] == "cpu" else 0
        # offload_param: the partitions (frozen and trainable) live in host memory.
        partitions = 0 if got["offload"] in ("cpu+param", "param") else frozen / ranks + offloaded
        planned = 4.0 * (2 * reads.largest_in_use(units) + partitions)
        report.scalar(f"{label}: stage-3 parameter bytes per rank = 2 largest units in use + partitions",
                      memory["parameters"], planned, 1e-12)
    elements = layout["trainable_elements"]
    bucket = ZERO_KNOBS[ranks].get("reduce_bucket_size", 500000000)
    # One rank updates from the full gradient buffer itself (no partition copy, no bucket).
    grad_elements = elements if ranks == 1 else {0: elements, 1: elements + elements / ranks}.get(
        stage, elements / ranks + min(bucket, elements))
    report.scalar(f"{label}: gradient bytes per rank (stage {stage}: full, full + partition, or partition + bucket)",
                  memory["gradients"], 4.0 * grad_elements, 1e-12)


def check_cases(report, zerotune, workdir, device, model_name, steps, cases, modes=("full", "lora"), scheduler=None):
    """(ranks, stage, offload) `cases` of `model_name` against one rank at stage 0, for each mode;
    returns the seconds each run took. `scheduler`: the DeepSpeed scheduler of every run (default
    the tour's)."""
    if model_name != "llama":
        workdir = os.path.join(workdir, model_name)
        os.makedirs(workdir)
    model, data = make_model_and_data(zerotune, workdir, model=model_name)
    reads = UnitReads(model)
    seconds = []
    for mode in modes:
        reference = train(zerotune, workdir, model, data, mode, 1, 0, "none", device, steps, model_name, scheduler)
        seconds.append(reference["seconds"])
        if mode == "full" and reads.tied:  # the tied embedding trains, through the head as well
            check_tied_embedding(report, reference, model)
        for ranks, stage, offload in cases:
            got = train(zerotune, workdir, model, data, mode, ranks, stage, offload, device, steps, model_name, scheduler)
            seconds.append(got["seconds"])
            compare(report, got, reference)
            check_accounting(report, got, reads)
    return seconds


def check_tied_embedding(report, reference, model):
    """The tied head has no tensor of its own, and the embedding trains through it: the padding
    id's row, whose only inputs are padding positions (no target sees them), moves only by the
    head's gradient (every position's softmax has a logit for it)."""
    label = reference["name"]
    pad = hf_config(model).pad_token_id
    initial = load_weights(os.path.join(model, "model.safetensors"))
    weights = reference["weights"]
    embedding = [name for name in weights if name.endswith("embed_tokens.weight")]
    report.check("lm_head.weight" not in weights and len(embedding) == 1,
                 f"{label}: the tied head is the embedding {embedding} (no lm_head.weight of its own)")
    if len(embedding) == 1:
        moved = float((weights[embedding[0]][pad] - initial[embedding[0]][pad]).abs().max())
        report.check(moved > 1e-4, f"{label}: the tied embedding's row {pad} (padding: only the head's gradient "
                     f"reaches it) trains: moved by {moved:.2e}")


# Where a world size needs no full stage x offload product (the ZeRO paths it adds over the full
# product at W=2 are its own knobs: persistence, overlap_comm, a 4-way partition), every stage
# once and the offloads where they change the most: the optimizer's partition on the CPU (stage 1)
# and the parameters' (stage 3).
SPARSE_STAGES_OFFLOADS = ((0, "none"), (1, "cpu"), (2, "none"), (3, "none"), (3, "cpu+param"))


def matrix_cases(world_sizes, sparse_world_sizes=()):
    """Every stage x offload x world size but one rank at stage 0 (the reference); world sizes in
    `sparse_world_sizes` run SPARSE_STAGES_OFFLOADS only."""
    cases = []
    for ranks in world_sizes:
        if ranks in sparse_world_sizes:
            stages_offloads = SPARSE_STAGES_OFFLOADS
        else:
            stages_offloads = [(stage, offload) for stage in (0, 1, 2, 3)
                               for offload in {0: ("none",), 3: ("none", "cpu", "cpu+param")}.get(stage, ("none", "cpu"))]
        cases += [(ranks, stage, offload) for stage, offload in stages_offloads if (ranks, stage, offload) != (1, 0, "none")]
    return cases


def check_matrix(report, zerotune, workdir, device, world_sizes, model_name="llama", steps=STEPS, sparse_world_sizes=(),
                 scheduler=None):
    """Every stage x offload x world size against one rank at stage 0, full and LoRA, on `device`."""
    return check_cases(report, zerotune, workdir, device, model_name, steps,
                       matrix_cases(world_sizes, sparse_world_sizes), scheduler=scheduler)


def main():
    args = parse_args(__doc__)
    report = Report("ZeRO stages x world sizes x offload: same losses and weights as one rank (untied and tied heads)")
    timings = []
    with temporary_directory(args, "zt-zero-") as workdir:
        for model_name in MATRIX_MODELS:
            start = time.monotonic()
            # The untied LLaMA runs the whole product; the tied heads add their tie to the same
            # paths, so they run the whole product at W=2 and every stage at W=1 and W=4.
            sparse = () if model_name == "llama" else (1, 4)
            seconds = check_matrix(report, args.zerotune, workdir, "cpu", (1, 2, 4), model_name, sparse_world_sizes=sparse)
            timings.append((model_name, len(seconds), sum(seconds), time.monotonic() - start))
        # OPT-350m's shape: unit 0 is gathered for the tied head's backward and again for its own
        # (project_in reads parameters there).
        start = time.monotonic()
        seconds = check_cases(report, args.zerotune, workdir, "cpu", "opt_350m_shape", STEPS,
                              [(2, 3, "none"), (2, 3, "cpu+param")])
        timings.append(("opt_350m_shape", len(seconds), sum(seconds), time.monotonic() - start))
    for model_name, runs, in_runs, total in timings:
        print(f"timing: {model_name}: {runs} runs, {in_runs:.1f} s in mpiexec, {total:.1f} s in all")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

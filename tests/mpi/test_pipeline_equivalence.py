# Pipeline parallelism (issue 32): `train --pipeline-stages P` on the CPU backend (MPI) follows
# the single-rank trajectory: the same losses and gradient norms (within fp32 reassociation) and
# the same final weights after 4 steps (a global batch of 16, micro-batches of 4: 4 micro-batches
# per step at D = 1, 2 at D = 2), for the tiny LLaMA (2 layers), full fine-tuning and LoRA (with
# LoRA dropout, so a stage's recomputed forward must draw the same masks):
#   P = 2, D = 1 (2 ranks): 1f1b full and LoRA, gpipe full and LoRA (LoRA also with
#     --activation-checkpointing and --partition-method uniform);
#   P = 2, D = 2 (4 ranks): 1f1b with ZeRO-1 (full), gpipe with ZeRO-2 (LoRA): the data-parallel
#     reduction runs inside each stage's group;
#   P = 4, D = 1 (4 ranks) on a 4-layer LLaMA: 1f1b, from DeepSpeed's "pipeline" section
#     ({"stages": 4, "partition": "type:decoder"}) instead of the flags.
# Each run checks that rank 0 built only stage 0's units (run.json's zero_layout against the
# partition run.json records) and printed the layout. Then the refusals: ZeRO-3, LOMO, P not
# dividing the ranks, P above the decoder layers, the interleaved schedule, checkpoints.
import json
import os
import subprocess
import time

from mpi_common import (REPO, Report, check_weights, load_weights, main_guard, make_model_and_data, parse_args,
                        read_metrics, read_run, run_ranks, temporary_directory, write_ds_config)

STEPS = 4
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6
LORA = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear", "--lora-dropout", 0.1]


def train(zerotune, workdir, model, data, name, ranks, stage=0, flags=(), pipeline_section=None, expect_ok=True):
    out = os.path.join(workdir, name)
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 16, 4, {"stage": stage})
    if pipeline_section:
        with open(ds) as stream:
            config = json.load(stream)
        config["pipeline"] = pipeline_section
        with open(ds, "w") as stream:
            json.dump(config, stream)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds, "--max-steps",
               STEPS, "--seed", 3, "--dump-final", out + ".safetensors", "--device", "cpu", "--no-save-at-end"]
    result, seconds = run_ranks(ranks, command + list(flags), expect_ok=expect_ok)
    if not expect_ok:
        return result
    return {"name": name, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors"),
            "run": read_run(out), "stdout": result.stdout, "seconds": seconds}


def compare(report, got, ref):
    label = got["name"]
    report.check(len(got["metrics"]) == STEPS, f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        report.scalar(f"{label} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.scalar(f"{label} step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
        report.check(mine["target_tokens"] == theirs["target_tokens"] and mine["tokens"] == theirs["tokens"],
                     f"{label} step {mine['step']}: the step's tokens counted once ({mine['tokens']})")
    check_weights(report, label, got["weights"], ref["weights"], WEIGHT_ATOL, ref["metrics"])


def check_stage_zero(report, got, ref, stages, replicas):
    """Rank 0 holds stage 0's units only: the partition in run.json, its units' sizes among the
    whole model's, and the layout printed at start."""
    label, run = got["name"], got["run"]
    layout = run.get("pipeline_layout", {})
    bounds = layout.get("stage_first_units", [])
    units = ref["run"]["zero_layout"]["unit_elements"]
    report.check(layout.get("stages") == stages and layout.get("replicas") == replicas and len(bounds) == stages + 1
                 and bounds[0] == 0 and bounds[-1] == len(units) and all(a < b for a, b in zip(bounds, bounds[1:])),
                 f"{label}: run.json's pipeline layout {layout}")
    if len(bounds) == stages + 1:
        # Each unit's groups (frozen, decay, no-decay) are padded to 16 x the ranks they are
        # partitioned over: the stage's replicas here, the one rank in the reference.
        mine, theirs = run["zero_layout"]["unit_elements"], units[bounds[0]:bounds[1]]
        padded = len(mine) == len(theirs) and all(0 <= m - t < 3 * 16 * replicas for m, t in zip(mine, theirs))
        report.check(padded, f"{label}: rank 0 holds units {bounds[0]}..{bounds[1] - 1} ({mine}) of {units}")
    report.check(f"pipeline: {stages} stages x {replicas} data-parallel replicas" in got["stdout"],
                 f"{label}: the layout printed at start")


def check_refusals(report, zerotune, workdir, model, data):
    cases = [  # (label, ranks, stage, flags, pipeline section, text the error must hold)
        ("ZeRO-3", 2, 3, ["--pipeline-stages", 2], None, "ZeRO stage 3"),
        ("P not dividing the ranks", 3, 0, ["--pipeline-stages", 2], None, "does not divide the 3 ranks"),
        ("P above the layers", 4, 0, ["--pipeline-stages", 4], None, "only 2 decoder layers"),
        ("interleaved", 2, 0, ["--pipeline-stages", 2, "--pipeline-schedule", "interleaved"], None, "interleaved"),
        ("unknown partition", 2, 0, [], {"stages": 2, "partition": "layers"}, "unknown partition_method 'layers'"),
    ]
    for label, ranks, stage, flags, section, text in cases:
        result = train(zerotune, workdir, model, data, "refused", ranks, stage, flags, section, expect_ok=False)
        report.check(result.returncode != 0 and text in result.stderr + result.stdout,
                     f"refused: {label}: exit {result.returncode}, message holds '{text}'")
    # LOMO: an optimizer fused into backward.
    ds = write_ds_config(os.path.join(workdir, "lomo.json"), 16, 16, {"stage": 0},
                         optimizer={"type": "LOMO", "params": {"lr": 1e-3}})
    out = os.path.join(workdir, "lomo")
    result, _ = run_ranks(2, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                              "--max-steps", 1, "--device", "cpu", "--no-save-at-end", "--pipeline-stages", 2],
                          expect_ok=False)
    report.check(result.returncode != 0 and "updates inside backward" in result.stderr + result.stdout,
                 f"refused: LOMO: exit {result.returncode}")
    # Checkpoints are not written by a pipeline run yet: the default save at the end is refused.
    ds = write_ds_config(os.path.join(workdir, "save.json"), 16, 4, {"stage": 0})
    result, _ = run_ranks(2, [zerotune, "train", "--model", model, "--data", data, "--out", out + "-save",
                              "--deepspeed", ds, "--max-steps", 1, "--device", "cpu", "--pipeline-stages", 2],
                          expect_ok=False)
    report.check(result.returncode != 0 and "--no-save-at-end" in result.stderr + result.stdout,
                 f"refused: a checkpoint of a pipeline run: exit {result.returncode}")


def main():
    args = parse_args(__doc__)
    report = Report("Pipeline stages (1F1B, GPipe; D = 1, 2; P = 2, 4): same losses and weights as one rank")
    start = time.monotonic()
    seconds = 0.0
    with temporary_directory(args, "zt-pipe-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        for mode, extra in (("full", []), ("lora", LORA)):
            ref = train(args.zerotune, workdir, model, data, f"{mode}-ref", 1, 0, extra)
            cases = [(f"{mode}-p2-1f1b", 2, 0, ["--pipeline-stages", 2], 2, 1),
                     (f"{mode}-p2-gpipe", 2, 0, ["--pipeline-stages", 2, "--pipeline-schedule", "gpipe"], 2, 1)]
            if mode == "full":
                cases.append(("full-p2-d2-1f1b-zero1", 4, 1, ["--pipeline-stages", 2], 2, 2))
            else:
                cases += [("lora-p2-uniform-checkpointing", 2, 0, ["--pipeline-stages", 2, "--partition-method",
                                                                  "uniform", "--activation-checkpointing"], 2, 1),
                          ("lora-p2-d2-gpipe-zero2", 4, 2, ["--pipeline-stages", 2, "--pipeline-schedule", "gpipe"],
                           2, 2)]
            for name, ranks, stage, flags, stages, replicas in cases:
                got = train(args.zerotune, workdir, model, data, name, ranks, stage, flags + extra)
                seconds += got["seconds"]
                compare(report, got, ref)
                check_stage_zero(report, got, ref, stages, replicas)
        # P = 4 on a 4-layer LLaMA, from DeepSpeed's pipeline section.
        config = os.path.join(workdir, "llama4.json")
        with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
            llama4 = dict(json.load(stream), num_hidden_layers=4)
        with open(config, "w") as stream:
            json.dump(llama4, stream)
        model4 = os.path.join(workdir, "model4")  # the same vocabulary: the same data
        subprocess.run([args.zerotune, "init", "--config", config, "--out", model4, "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        ref = train(args.zerotune, workdir, model4, data, "p4-ref", 1)
        got = train(args.zerotune, workdir, model4, data, "p4-1f1b", 4,
                    pipeline_section={"stages": 4, "partition": "type:decoder", "seed_layers": False})
        compare(report, got, ref)
        check_stage_zero(report, got, ref, 4, 1)
        report.check("pipeline.stages 4 -> --pipeline-stages 4" in got["stdout"] + json.dumps(got["run"]),
                     "p4-1f1b: the JSON's pipeline.stages was read (noted)")
        check_refusals(report, args.zerotune, workdir, model, data)
    print(f"timing: {seconds:.1f} s in the pipeline runs, {time.monotonic() - start:.1f} s in all")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# Pipeline parallelism (issue 32): `train --pipeline-stages P` on the CPU backend (MPI) follows
# the single-rank trajectory: the same losses and gradient norms (within fp32 reassociation), the
# same token counts and the same final weights after 4 steps (a global batch of 16, micro-batches
# of 4: 4 micro-batches per step at D = 1, 2 at D = 2), full fine-tuning and LoRA (with LoRA
# dropout 0.1, so a stage's recomputed forward must draw the same masks). Every run of a model
# compares with one single-rank run per mode (full, LoRA), so the models have 4 decoder layers
# (P = 4 and P = 2 x V = 2 chunks need one per stage):
#   a 4-layer LLaMA, full: P = 4 x D = 2 (8 ranks) 1f1b ZeRO-2 (the data-parallel reduction inside
#     each stage's group) from DeepSpeed's "pipeline" section ({"stages": 4, "partition":
#     "type:decoder"}) instead of the flags; interleaved 1F1B with P = 2 x V = 2 chunks per rank,
#     D = 2, ZeRO-1 (Megatron's batched exchanges, the reduction after backward). LoRA: P = 4
#     gpipe with --partition-method uniform and --activation-checkpointing; P = 2 x D = 2 gpipe
#     ZeRO-2; interleaved P = 2 x V = 2 (adapters initialised by their model-wide index on both
#     chunks);
#   a 4-layer tiny OPT (head tied to the token table: the last stage holds a copy, gradients summed
#     into the first stage's, the table sent back after each update), full: P = 4 1f1b (the tie
#     joins stages 0 and 3, which exchange nothing else); P = 2 x D = 2 gpipe ZeRO-1; interleaved
#     P = 2 x V = 2 (the tie joins rank 0's chunk 0 and rank 1's chunk 1). LoRA: P = 2 x D = 2 1f1b
#     ZeRO-2 (the table frozen).
# The LLaMA and OPT cases and their references also evaluate the split (--eval-data, before the
# first step and at the epoch's end): each pipeline's eval_loss is the one rank's, its tokens and
# samples counted once (each replica its records, the forward through every virtual stage).
# Each run checks that rank 0 built only stage 0's units (run.json's zero_layout against the
# partition run.json records) and printed the layout; an interleaved run, its P x V virtual stages.
# Checkpoints (saved after steps 2 and 4; a resumed run continues steps 3-4 to the uninterrupted
# run's losses and final weights): the LLaMA interleaved one (the whole model's checkpoint, its
# layout in the manifest, its parameters in the one-rank checkpoint's units and places) resumes on
# one rank and on P = 2 gpipe, and the one-rank one on the interleaved layout
# (check_interleaved_checkpoints); the tied OPT's P = 4 1f1b and interleaved ones are the one-rank
# checkpoint's layout exactly (the table saved once): the first resumes on one rank, the
# interleaved one on P = 2 x D = 2 gpipe ZeRO-1, and the one-rank one on the interleaved layout
# (check_tied_checkpoints). The final interleaved checkpoints (LLaMA, tied OPT) export as the
# one-rank run's. Then the refusals (on the 2-layer tiny LLaMA): P not dividing the ranks,
# ZeRO-3, P above the decoder layers, LOMO, and a trainable tie across stages with ZeRO-2.
import json
import math
import os
import subprocess
import time

from mpi_common import (MPI_ENV, REPO, Report, check_weights, load_weights, main_guard, make_model_and_data, parse_args,
                        read_metrics, read_run, run_ranks, temporary_directory, write_ds_config)

STEPS = 4
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6
LORA = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear", "--lora-dropout", 0.1]


def train(zerotune, workdir, model, data, name, ranks, stage=0, flags=(), pipeline_section=None, expect_ok=True,
          device="cpu", sections=None, steps=STEPS):
    """`sections`: more top-level sections of the DeepSpeed JSON (fp16)."""
    out = os.path.join(workdir, name)
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 16, 4, {"stage": stage})
    sections = dict(sections or {}, **({"pipeline": pipeline_section} if pipeline_section else {}))
    if sections:
        with open(ds) as stream:
            config = json.load(stream)
        config.update(sections)
        with open(ds, "w") as stream:
            json.dump(config, stream)
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds, "--max-steps",
               steps, "--seed", 3, "--dump-final", out + ".safetensors", "--device", device, "--no-save-at-end"]
    result, seconds = run_ranks(ranks, command + list(flags), expect_ok=expect_ok)
    if not expect_ok:
        return result
    return {"name": name, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors"),
            "run": read_run(out), "stdout": result.stdout, "seconds": seconds}


def compare(report, got, ref, weight_atol=WEIGHT_ATOL):
    label = got["name"]
    report.check(len(got["metrics"]) == len(ref["metrics"]), f"{label}: {len(got['metrics'])} steps recorded")
    for mine, theirs in zip(got["metrics"], ref["metrics"]):
        report.scalar(f"{label} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        report.check(mine["skipped"] == theirs["skipped"] and mine["loss_scale"] == theirs["loss_scale"],
                     f"{label} step {mine['step']}: skipped {mine['skipped']}, loss scale {mine['loss_scale']} as one "
                     "rank's")
        if theirs["grad_norm"] is not None and math.isfinite(theirs["grad_norm"]):
            report.scalar(f"{label} step {mine['step']} grad_norm", mine["grad_norm"], theirs["grad_norm"], NORM_REL)
        report.check(mine["target_tokens"] == theirs["target_tokens"] and mine["tokens"] == theirs["tokens"],
                     f"{label} step {mine['step']}: the step's tokens counted once ({mine['tokens']})")
    check_weights(report, label, got["weights"], ref["weights"], weight_atol, ref["metrics"])


def read_evals(out):
    """The evaluation records of OUT/metrics.jsonl (those with eval_loss), in order."""
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    return [record for record in records if "eval_loss" in record]


def check_evals(report, got, ref, workdir):
    """The pipeline run evaluated the split when the one-rank run did (--eval-at-start, each
    epoch's end) to its eval_loss (within fp32 reassociation) and token and sample counts."""
    label = got["name"]
    mine, theirs = read_evals(os.path.join(workdir, label)), read_evals(os.path.join(workdir, ref["name"]))
    report.check(len(theirs) >= 1 and [e["step"] for e in mine] == [e["step"] for e in theirs],
                 f"{label}: evaluations at steps {[e['step'] for e in mine]} (one rank: {[e['step'] for e in theirs]})")
    for m, t in zip(mine, theirs):
        report.scalar(f"{label} eval_loss at step {m['step']}", m["eval_loss"], t["eval_loss"], LOSS_REL)
        report.check(m["eval_tokens"] == t["eval_tokens"] and m["eval_samples"] == t["eval_samples"],
                     f"{label} eval at step {m['step']}: {m['eval_tokens']} tokens in {m['eval_samples']} samples "
                     f"(one rank: {t['eval_tokens']} in {t['eval_samples']})")


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
    def refused(label, ranks, flags, text, stage=0, ds=None, model=model, data=data):
        if ranks == 1:  # a singleton MPI process: no mpiexec (and no 2-second abort path)
            ds = ds or write_ds_config(os.path.join(workdir, "refused.json"), 16, 4, {"stage": stage})
            result = subprocess.run([str(c) for c in [zerotune, "train", "--model", model, "--data", data, "--out",
                                                      os.path.join(workdir, "refused"), "--deepspeed", ds,
                                                      "--max-steps", 1, "--device", "cpu", "--no-save-at-end"] + flags],
                                    capture_output=True, text=True, env=dict(os.environ, **MPI_ENV), timeout=120)
        elif ds:
            result, _ = run_ranks(ranks, [zerotune, "train", "--model", model, "--data", data, "--out",
                                          os.path.join(workdir, "refused"), "--deepspeed", ds, "--max-steps", 1,
                                          "--device", "cpu", "--no-save-at-end"] + flags, expect_ok=False)
        else:
            result = train(zerotune, workdir, model, data, "refused", ranks, stage, flags, expect_ok=False)
        report.check(result.returncode != 0 and text in result.stderr + result.stdout,
                     f"refused: {label}: exit {result.returncode}, message holds '{text}'")

    refused("P not dividing the ranks", 1, ["--pipeline-stages", 2], "does not divide the 1 ranks")
    refused("ZeRO-3", 2, ["--pipeline-stages", 2], "ZeRO stage 3", stage=3)
    refused("P above the layers", 4, ["--pipeline-stages", 4], "only 2 decoder layers")
    refused("P x V above the layers", 2, ["--pipeline-stages", 2, "--pipeline-schedule", "interleaved"],
            "only 2 decoder layers")
    lomo = write_ds_config(os.path.join(workdir, "lomo.json"), 16, 16, {"stage": 0},
                           optimizer={"type": "LOMO", "params": {"lr": 1e-3}})
    refused("LOMO (an optimizer fused into backward)", 2, ["--pipeline-stages", 2], "updates inside backward", ds=lomo)
    return refused


def finished(workdir, name):
    """A finished run's name, metrics and final weights, read back from its output."""
    out = os.path.join(workdir, name)
    return {"name": name, "metrics": read_metrics(out), "weights": load_weights(out + ".safetensors")}


def resume_cases(report, zerotune, workdir, model, data, checkpoint, ref, cases, device="cpu"):
    """`checkpoint` (saved after step 2) continued on each of `cases` (name, ranks, ZeRO stage,
    flags) on `device`: steps 3 to the last and the final weights as the uninterrupted `ref`'s (its
    metrics and weights). Returns the seconds the runs took."""
    seconds, steps = 0.0, len(ref["metrics"])
    for name, ranks, stage, flags in cases:
        got = train(zerotune, workdir, model, data, name, ranks, stage, flags + ["--resume", checkpoint], device=device,
                    steps=steps)
        seconds += got["seconds"]
        report.check([m["step"] for m in got["metrics"]] == list(range(3, steps + 1)),
                     f"{name}: steps {[m['step'] for m in got['metrics']]}")
        for mine, theirs in zip(got["metrics"], ref["metrics"][2:]):
            report.scalar(f"{name} step {mine['step']} loss", mine["loss"], theirs["loss"], LOSS_REL)
        check_weights(report, name, got["weights"], ref["weights"], WEIGHT_ATOL, ref["metrics"])
    return seconds


def read_manifest(out, step):
    with open(os.path.join(out, "checkpoints", f"global_step{step}", "manifest.json")) as stream:
        return json.load(stream)


def parameter_units(manifest):
    """The manifest layout's trainable parameters: name -> (group, unit, offset inside its unit)."""
    layout = manifest["layout"]
    units = {group: entry["units"] for group, entry in layout["groups"].items()}
    return {p["name"]: (p["group"], p["unit"], p["offset"] - units[p["group"]][p["unit"]][0])
            for p in layout["parameters"]}


def export_hf(zerotune, model, out, step):
    """`zerotune export --format hf` of the run's checkpoint after `step`: name -> tensor."""
    hf = f"{out}-hf{step}"
    subprocess.run([zerotune, "export", "--checkpoint", os.path.join(out, "checkpoints", f"global_step{step}"),
                    "--model", model, "--out", hf, "--format", "hf"], check=True, stdout=subprocess.DEVNULL)
    exported = {}
    for name in os.listdir(hf):
        if name.endswith(".safetensors"):
            exported.update(load_weights(os.path.join(hf, name)))
    return exported


def check_export(report, zerotune, model, workdir, got, ref):
    """The final checkpoint of the pipeline run `got` (full fine-tuning: every stored tensor trains)
    exports as the one-rank run's would: the one-rank run's final weights (`ref`, what its own
    export holds), each tensor once (a tied head written once: no lm_head.weight) within
    WEIGHT_ATOL, and bit for bit the pipeline run's own final weights (--dump-final)."""
    label = got["name"] + " export"
    exported = export_hf(zerotune, model, os.path.join(workdir, got["name"]), STEPS)
    check_weights(report, label, exported, ref["weights"], WEIGHT_ATOL, ref["metrics"])
    differing = [name for name, tensor in got["weights"].items()
                 if name not in exported or not (exported[name] == tensor).all()]
    report.check(len(got["weights"]) > 0 and not differing,
                 f"{label}: = the run's final weights bit for bit (differing: {differing[:3]})")


def check_virtual_stages(report, got, flags):
    """An interleaved run (`flags`: its P and V) records P x V virtual stages in run.json."""
    flags = [str(flag) for flag in flags]
    virtual = int(flags[flags.index("--pipeline-stages") + 1]) * int(flags[flags.index("--pipeline-chunks") + 1])
    layout = got["run"].get("pipeline_layout", {})
    report.check(len(layout.get("stage_first_units", [])) == virtual + 1,
                 f"{got['name']}: {virtual} virtual stages in run.json ({layout})")


def run_cases(report, zerotune, workdir, model, data, label, cases, device="cpu", sections=None,
              weight_atol=WEIGHT_ATOL, ref_flags=(), steps=STEPS, evaluate=False):
    """`cases` (name, ranks, ZeRO stage, flags, P or None, D) of the model against one rank (with
    `ref_flags`), per mode (full, lora) that has any, on `device`, `steps` steps; returns the seconds
    the pipeline runs took. The runs are named LABEL-MODE-NAME, the references LABEL-MODE-ref.
    `evaluate`: every run evaluates the training split too (eval_flags), compared by check_evals."""
    seconds = 0.0
    evals = eval_flags(data) if evaluate else []
    for mode, extra in (("full", []), ("lora", LORA)):
        if not cases.get(mode):
            continue
        ref = train(zerotune, workdir, model, data, f"{label}-{mode}-ref", 1, 0, extra + list(ref_flags) + evals,
                    device=device, sections=sections, steps=steps)
        for name, ranks, stage, flags, stages, replicas in cases[mode]:
            got = train(zerotune, workdir, model, data, f"{label}-{mode}-{name}", ranks, stage, flags + extra + evals,
                        device=device, sections=sections, steps=steps)
            seconds += got["seconds"]
            compare(report, got, ref, weight_atol)
            if evaluate:
                check_evals(report, got, ref, workdir)
            if stages is None:  # interleaved (several unit ranges per rank)
                check_virtual_stages(report, got, flags)
            else:
                check_stage_zero(report, got, ref, stages, replicas)
    return seconds


def check_p4_section(report, zerotune, workdir, model4, data):
    """P = 4 x D = 2 (8 ranks, ZeRO-2 inside each stage's pair of replicas) on the 4-layer LLaMA,
    from DeepSpeed's pipeline section instead of the flags."""
    ref = dict(finished(workdir, "llama-full-ref"), run=read_run(os.path.join(workdir, "llama-full-ref")))
    got = train(zerotune, workdir, model4, data, "llama-full-p4-d2-1f1b-zero2-section", 8, 2,
                pipeline_section={"stages": 4, "partition": "type:decoder", "seed_layers": False})
    compare(report, got, ref)
    check_stage_zero(report, got, ref, 4, 2)
    report.check("pipeline.stages 4 -> --pipeline-stages 4" in got["stdout"],
                 "llama-full-p4-d2-1f1b-zero2-section: the JSON's pipeline.stages was read (noted)")
    return got["seconds"]


def check_interleaved_checkpoints(report, zerotune, workdir, model4, data):
    """The LLaMA interleaved P = 2 x D = 2 run's checkpoints (the whole model's, whatever the layout;
    a rank's chunks hold units far apart) in the format of a run without stages: the manifest
    records the layout, the one-rank checkpoint's parameters in the same units at the same places.
    After step 2 it resumes on one rank and on P = 2 gpipe (D = 1: the state of 2 replicas joined); the
    one-rank checkpoint resumes interleaved; the final one exports as the one-rank run's."""
    got, ref = finished(workdir, "llama-full-p2-v2-d2-interleaved-zero1"), finished(workdir, "llama-full-ref")
    out, ref_out = os.path.join(workdir, got["name"]), os.path.join(workdir, ref["name"])
    manifest, ref_manifest = read_manifest(out, 2), read_manifest(ref_out, 2)
    report.check(manifest.get("pipeline", {}).get("stages") == 2 and manifest.get("pipeline", {}).get("chunks") == 2
                 and manifest.get("world_size") == 4 and manifest.get("partitions") == 2
                 and len(manifest.get("files", [])) == 2
                 and len(manifest.get("layout", {}).get("parameters", [])) == len(ref_manifest["layout"]["parameters"]),
                 f"interleaved checkpoint: manifest records {manifest.get('pipeline')}, world size "
                 f"{manifest.get('world_size')}, {manifest.get('partitions')} partition files, the one-rank "
                 "checkpoint's parameters")
    report.check(parameter_units(manifest) == parameter_units(ref_manifest),
                 "interleaved checkpoint: every parameter in the one-rank checkpoint's unit, group and place")
    seconds = resume_cases(report, zerotune, workdir, model4, data, os.path.join(out, "checkpoints", "global_step2"),
                           ref, (("interleaved-resumed-w1", 1, 0, []),
                                 ("interleaved-resumed-p2-gpipe", 2, 0, P2 + GPIPE)))
    seconds += resume_cases(report, zerotune, workdir, model4, data,
                            os.path.join(ref_out, "checkpoints", "global_step2"), ref,
                            (("w1-resumed-interleaved", 2, 0, INTERLEAVED),))
    check_export(report, zerotune, model4, workdir, got, ref)
    return seconds


def eval_flags(data):
    """Evaluation of the training split before the first step and at the epoch's end (step 4 of a
    4-step run)."""
    return ["--eval-data", data, "--eval-at-start"]


P2 = ["--pipeline-stages", 2]
P4 = ["--pipeline-stages", 4]
GPIPE = ["--pipeline-schedule", "gpipe"]
INTERLEAVED = P2 + ["--pipeline-schedule", "interleaved", "--pipeline-chunks", 2]
SAVE_EVERY_2 = ["--save-every", 2]
# The 4-layer LLaMA (references with checkpoints after steps 2 and 4: check_interleaved_checkpoints
# continues the interleaved run's and the full reference's).
LLAMA_CASES = {
    "full": [("p2-v2-d2-interleaved-zero1", 4, 1, INTERLEAVED + SAVE_EVERY_2, None, 2)],  # + check_p4_section
    "lora": [("p4-gpipe-uniform-checkpointing", 4, 0, P4 + GPIPE + ["--partition-method", "uniform",
                                                                  "--activation-checkpointing"], 4, 1),
             ("p2-d2-gpipe-zero2", 4, 2, P2 + GPIPE, 2, 2), ("p2-v2-interleaved", 2, 0, INTERLEAVED, None, 1)],
}
# The 4-layer OPT: the head tied to the token table (first stage) reads a copy on the last stage
# (P = 4 and interleaved with checkpoints after steps 2 and 4: check_tied_checkpoints).
OPT_CASES = {
    "full": [("p4-1f1b", 4, 0, P4 + SAVE_EVERY_2, 4, 1), ("p2-d2-gpipe-zero1", 4, 1, P2 + GPIPE, 2, 2),
             ("p2-v2-interleaved", 2, 0, INTERLEAVED + SAVE_EVERY_2, None, 1)],
    "lora": [("p2-d2-1f1b-zero2", 4, 2, P2, 2, 2)],
}


def check_tied_layout(report, label, manifest, ref_manifest):
    """A tied model's pipeline checkpoint (the last stage's copy of the token table is not saved:
    the first stage's table is the one copy, its master and optimizer state) is the one-rank run's
    checkpoint layout exactly (D = 1 both: the same padding)."""
    names = [p["name"] for p in manifest["layout"]["parameters"]]
    by_name = lambda layout: sorted(layout["parameters"], key=lambda p: p["name"])  # noqa: E731
    report.check(len(names) == len(set(names)) and manifest["layout"]["groups"] == ref_manifest["layout"]["groups"]
                 and by_name(manifest["layout"]) == by_name(ref_manifest["layout"]),
                 f"{label}: each parameter saved once ({len(names)}), the one-rank checkpoint's layout exactly")


def check_tied_checkpoints(report, zerotune, opt_dir, model, data):
    """The tied OPT's P = 4 1f1b and interleaved checkpoints have the one-rank layout (check_tied_layout).
    After step 2 the 1f1b one resumes on one rank, the interleaved one on P = 2, D = 2 GPipe ZeRO-1
    (the copy loaded from the table's place in the checkpoint, sliced for 2 replicas); the one-rank
    checkpoint resumes on the interleaved layout (the copy on rank 1's second chunk); the final
    interleaved one exports as the one-rank run's (the tied head written once)."""
    ref = finished(opt_dir, "opt-full-ref")
    ref_out = os.path.join(opt_dir, ref["name"])
    ref_manifest = read_manifest(ref_out, 2)
    seconds = 0.0
    for name, resumed in (("opt-full-p4-1f1b", ("opt-resumed-w1", 1, 0, [])),
                          ("opt-full-p2-v2-interleaved", ("opt-interleaved-resumed-p2-d2-gpipe-zero1", 4, 1,
                                                          P2 + GPIPE))):
        out = os.path.join(opt_dir, name)
        manifest = read_manifest(out, 2)
        check_tied_layout(report, f"{name} checkpoint", manifest, ref_manifest)
        seconds += resume_cases(report, zerotune, opt_dir, model, data,
                                os.path.join(out, "checkpoints", "global_step2"), ref, (resumed,))
    report.check(read_manifest(os.path.join(opt_dir, "opt-full-p2-v2-interleaved"), 2).get("pipeline", {}).get("chunks")
                 == 2, "opt-full-p2-v2-interleaved checkpoint: the manifest records 2 chunks")
    seconds += resume_cases(report, zerotune, opt_dir, model, data,
                            os.path.join(ref_out, "checkpoints", "global_step2"), ref,
                            (("opt-w1-resumed-interleaved", 2, 0, INTERLEAVED),))
    check_export(report, zerotune, model, opt_dir, finished(opt_dir, "opt-full-p2-v2-interleaved"), ref)
    return seconds


def main():
    args = parse_args(__doc__)
    report = Report("Pipeline stages (1F1B, GPipe, interleaved; D = 1, 2; P = 2, 4; LLaMA, tied OPT): same losses "
                    "and weights as one rank")
    start = time.monotonic()
    with temporary_directory(args, "zt-pipe-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)  # the 2-layer tiny LLaMA: the refusals
        with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
            llama4 = dict(json.load(stream), num_hidden_layers=4)
        config = os.path.join(workdir, "llama4.json")
        with open(config, "w") as stream:
            json.dump(llama4, stream)
        model4 = os.path.join(workdir, "model4")  # the same vocabulary: the same data
        subprocess.run([args.zerotune, "init", "--config", config, "--out", model4, "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        seconds = run_cases(report, args.zerotune, workdir, model4, data, "llama", LLAMA_CASES, ref_flags=SAVE_EVERY_2,
                            evaluate=True)
        seconds += check_p4_section(report, args.zerotune, workdir, model4, data)
        seconds += check_interleaved_checkpoints(report, args.zerotune, workdir, model4, data)
        opt_dir = os.path.join(workdir, "opt")
        os.makedirs(opt_dir)
        opt_model, opt_data = make_model_and_data(args.zerotune, opt_dir, model="opt",
                                                  overrides={"num_hidden_layers": 4})
        seconds += run_cases(report, args.zerotune, opt_dir, opt_model, opt_data, "opt", OPT_CASES,
                             ref_flags=SAVE_EVERY_2, evaluate=True)
        seconds += check_tied_checkpoints(report, args.zerotune, opt_dir, opt_model, opt_data)
        refused = check_refusals(report, args.zerotune, workdir, model, data)
        refused("a trainable tie across stages with ZeRO-2", 2, P2, "use ZeRO stage 0 or 1", stage=2,
                model=opt_model, data=opt_data)
    print(f"timing: {seconds:.1f} s in the pipeline runs, {time.monotonic() - start:.1f} s in all")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

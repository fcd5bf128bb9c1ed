# The optimizers beyond AdamW under ZeRO (issue 16): SGD (momentum, Nesterov, weight decay) and
# Lamb (FusedLamb: a trust ratio per parameter tensor, whose norms span the ranks' slices) on
# stages 0-3, with optimizer offload and offload_param, on 2 and 4 ranks, against one rank at
# stage 0 (losses, grad norms and final weights within float reassociation). Small buckets make
# stages 1/2 update several pieces per step, so Lamb's per-tensor sums are taken piece by piece.
# Their state buffers are partitioned (run.json's per-rank optimizer_state: SGD one fp32 buffer,
# Lamb two, 1/W each), checkpointed by name and re-sliced on resume to another world size and
# stage; a checkpoint of one optimizer is refused by a run of another, naming both.
import json
import os

from mpi_common import (Report, check_weights, load_weights, main_guard, make_model_and_data, parse_args,
                        read_metrics, read_run, run_ranks, temporary_directory, write_ds_config)

STEPS = 6
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6

OPTIMIZERS = {
    "adamw": ({"type": "AdamW", "params": {"lr": 3e-3}}, 2),
    "sgd": ({"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}}, 1),
    "lamb": ({"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01, "max_coeff": 2.0, "min_coeff": 0.05}}, 2),
}
KNOBS = {"reduce_bucket_size": 12000, "allgather_bucket_size": 12000, "stage3_param_persistence_threshold": 0}
CASES = ((2, 0, "none"), (2, 1, "cpu"), (2, 2, "none"), (2, 3, "cpu+param"), (4, 2, "cpu"), (4, 3, "none"))


def train(zerotune, workdir, model, data, optimizer, ranks, stage, offload, steps=STEPS, name=None, extra=(),
          device="cpu"):
    name = name or f"{optimizer}-w{ranks}-s{stage}-{offload}-{device}"
    out = os.path.join(workdir, name)
    zero = dict(KNOBS, stage=stage, offload_optimizer={"device": "none" if offload == "none" else "cpu"})
    if offload == "cpu+param":
        zero["offload_param"] = {"device": "cpu"}
    ds = write_ds_config(os.path.join(workdir, f"{optimizer}-s{stage}-{offload}.json"), 16, 4, zero,
                         OPTIMIZERS[optimizer][0])
    command = [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
               "--max-steps", steps, "--seed", 3, "--dump-final", out + ".safetensors", "--device", device] + list(extra)
    run_ranks(ranks, command)
    return out


def compare(report, label, got_out, ref_out, steps=STEPS):
    got, ref = read_metrics(got_out), read_metrics(ref_out)
    report.check(len(got) == len(ref) == steps, f"{label}: {len(got)} steps (reference {len(ref)})")
    for g, r in zip(got, ref):
        report.check(abs(g["loss"] - r["loss"]) <= LOSS_REL * abs(r["loss"]),
                     f"{label}: step {r['step']} loss {g['loss']:.9g} vs {r['loss']:.9g}")
        report.check(abs(g["grad_norm"] - r["grad_norm"]) <= NORM_REL * abs(r["grad_norm"]),
                     f"{label}: step {r['step']} grad_norm {g['grad_norm']:.9g} vs {r['grad_norm']:.9g}")
    check_weights(report, label, load_weights(got_out + ".safetensors"), load_weights(ref_out + ".safetensors"),
                  WEIGHT_ATOL, ref)


def check_state_bytes(report, label, out, ranks, stage, state_floats):
    run = read_run(out)
    memory = run["zero_memory_per_rank"]
    elements = run["zero_layout"]["trainable_elements"]
    master = memory["master_params"]
    report.check(memory["optimizer_state"] == state_floats * master,
                 f"{label}: per-rank optimizer state {memory['optimizer_state']} B = {state_floats} x the fp32 master "
                 f"partition ({master} B)")
    share = elements if stage == 0 else elements // ranks
    report.check(master == 4 * share, f"{label}: the master partition holds {master // 4} of {elements} elements")


def check_optimizers(report, zerotune, workdir, model, data, cases, device):
    """Each optimizer's `cases` (ranks, stage, offload) against one rank at stage 0 on `device`."""
    for optimizer, (_, state_floats) in OPTIMIZERS.items():
        if optimizer == "adamw":  # tests/mpi/test_zero_equivalence.py covers it
            continue
        reference = train(zerotune, workdir, model, data, optimizer, 1, 0, "none", device=device)
        report.check(read_metrics(reference)[-1]["loss"] < read_metrics(reference)[0]["loss"],
                     f"{optimizer} on {device}: one rank's loss goes down over {STEPS} steps")
        check_state_bytes(report, f"{optimizer} W=1 stage 0 on {device}", reference, 1, 0, state_floats)
        for ranks, stage, offload in cases:
            label = f"{optimizer} W={ranks} stage {stage} offload {offload} on {device}"
            out = train(zerotune, workdir, model, data, optimizer, ranks, stage, offload, device=device)
            compare(report, label, out, reference)
            check_state_bytes(report, label, out, ranks, stage, state_floats)


def main():
    args = parse_args(__doc__)
    report = Report("SGD and Lamb under ZeRO stages x world sizes x offload, checkpoints and re-slicing")
    with temporary_directory(args, "zt-optim-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        check_optimizers(report, args.zerotune, workdir, model, data, CASES, "cpu")
        # Checkpoints: 3 steps, then resumed on another world size and stage for the rest.
        for optimizer, (ranks, stage, offload), (new_ranks, new_stage, new_offload) in (
                ("lamb", (2, 3, "none"), (4, 1, "none")), ("sgd", (1, 0, "none"), (2, 2, "cpu"))):
            label = f"{optimizer}: W={ranks} stage {stage} -> W={new_ranks} stage {new_stage} offload {new_offload}"
            name = f"resume-{optimizer}"
            train(args.zerotune, workdir, model, data, optimizer, ranks, stage, offload, steps=3, name=name)
            out = train(args.zerotune, workdir, model, data, optimizer, new_ranks, new_stage, new_offload, name=name,
                        extra=["--resume", "auto"])
            with open(os.path.join(out, "checkpoints", "global_step3", "manifest.json")) as stream:
                saved = json.load(stream)["optimizer"]
            report.check(saved == {"type": optimizer,
                                   "state": ["exp_avg", "exp_avg_sq"] if optimizer == "lamb" else ["momentum_buffer"]},
                         f"{label}: the manifest names the optimizer and its state: {saved}")
            compare(report, label, out, os.path.join(workdir, f"{optimizer}-w1-s0-none-cpu"))
        # A checkpoint from before the optimizer seam (no "optimizer" entry) holds AdamW's state and resumes.
        name = "legacy-adamw"
        train(args.zerotune, workdir, model, data, "adamw", 2, 1, "none", steps=3, name=name)
        manifest_path = os.path.join(workdir, name, "checkpoints", "global_step3", "manifest.json")
        with open(manifest_path) as stream:
            manifest = json.load(stream)
        del manifest["optimizer"]
        with open(manifest_path, "w") as stream:
            json.dump(manifest, stream)
        out = train(args.zerotune, workdir, model, data, "adamw", 2, 1, "none", name=name, extra=["--resume", "auto"])
        report.check(len(read_metrics(out)) == STEPS, "a checkpoint without the manifest's optimizer entry (older "
                     "zerotune) resumes as AdamW's")
        # Another optimizer's checkpoint is refused, naming both.
        zero = dict(KNOBS, stage=2)
        ds = write_ds_config(os.path.join(workdir, "sgd-refused.json"), 16, 4, zero, OPTIMIZERS["sgd"][0])
        result, _ = run_ranks(2, [args.zerotune, "train", "--model", model, "--data", data, "--out",
                                  os.path.join(workdir, "resume-lamb"), "--deepspeed", ds, "--max-steps", STEPS + 2,
                                  "--seed", 3, "--resume", "auto"], expect_ok=False)
        report.check(result.returncode != 0 and "optimizer lamb" in result.stderr and "this run uses sgd" in result.stderr,
                     f"an SGD run refuses a Lamb checkpoint naming both (status {result.returncode}: "
                     f"{result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else ''})")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

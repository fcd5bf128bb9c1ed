# 1-bit Adam (DeepSpeed "OneBitAdam", issue 16) under ZeRO stages 0-2 and optimizer offload, which
# DeepSpeed refuses, on 2 and 4 ranks:
# - warm-up (updates 1..freeze_step): Adam without bias correction on reduced gradients, the same
#   as one rank's within float reassociation;
# - compression: every stage, with or without offload, computes the same exchange (the chunks are
#   the ranks' partitions at every stage), so runs at one world size agree to float rounding;
# - bytes per step from the communicator's counters: after the first compressed step (which
#   gathers the momentum whole once), >= 16x less than stage 0's fp32 all-reduce, and about 16x
#   less than stage 1's fp32 reduce-scatter;
# - the error feedback is checkpointed per rank: a resume on the same world size continues
#   exactly (bit-identical to the uninterrupted run), on another world size it restarts from zero
#   and says so;
# - convergence: over the tour-sized run the loss of 1-bit Adam stays within a stated margin of
#   the warm-up-only (uncompressed) run's;
# - stage 3 is refused with the reason.
# SignExchange itself is checked against DeepSpeed's formulas by mpi.sign_exchange.
import json
import os

from mpi_common import (Report, check_weights, load_weights, main_guard, make_model_and_data, parse_args,
                        read_metrics, run_ranks, temporary_directory, write_ds_config)

STEPS = 8
FREEZE = 3
LOSS_REL = 2e-6
NORM_REL = 2e-5
WEIGHT_ATOL = 2e-6
OPTIMIZER = {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": FREEZE, "weight_decay": 0.01,
                                              "betas": [0.9, 0.99], "cuda_aware": False, "comm_backend_name": "nccl"}}
KNOBS = {"reduce_bucket_size": 12000, "allgather_bucket_size": 12000}


def train(zerotune, workdir, model, data, ranks, stage, offload="none", steps=STEPS, name=None, extra=(), optimizer=None,
          expect_ok=True, ds_extra=None):
    """`ds_extra`: top-level DeepSpeed keys replacing the tour's (e.g. its WarmupLR "scheduler")."""
    name = name or f"w{ranks}-s{stage}-{offload}"
    out = os.path.join(workdir, name)
    zero = dict(KNOBS, stage=stage, offload_optimizer={"device": offload})
    ds = write_ds_config(os.path.join(workdir, f"{name}.json"), 16, 4, zero, optimizer or OPTIMIZER)
    if ds_extra:
        with open(ds) as stream:
            config = json.load(stream)
        config.update(ds_extra)
        with open(ds, "w") as stream:
            json.dump(config, stream, indent=1)
    result, _ = run_ranks(ranks, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                                  "--max-steps", steps, "--seed", 3, "--dump-final", out + ".safetensors"] + list(extra),
                          expect_ok=expect_ok)
    return out, result


def compare(report, label, got_out, ref_out, steps, weights=True):
    got, ref = read_metrics(got_out), read_metrics(ref_out)
    report.check(len(got) >= steps and len(ref) >= steps, f"{label}: {len(got)} and {len(ref)} steps")
    for g, r in list(zip(got, ref))[:steps]:
        report.check(abs(g["loss"] - r["loss"]) <= LOSS_REL * abs(r["loss"]),
                     f"{label}: step {r['step']} loss {g['loss']:.9g} vs {r['loss']:.9g}")
        report.check(abs(g["grad_norm"] - r["grad_norm"]) <= NORM_REL * abs(r["grad_norm"]),
                     f"{label}: step {r['step']} grad_norm {g['grad_norm']:.9g} vs {r['grad_norm']:.9g}")
    if weights:
        check_weights(report, label, load_weights(got_out + ".safetensors"), load_weights(ref_out + ".safetensors"),
                      WEIGHT_ATOL, ref)


def sent(record, kind):
    return record["comm_bytes_sent"][kind]


def main():
    args = parse_args("1-bit Adam under ZeRO: warm-up, compression, bytes, checkpoints, convergence")
    report = Report("1-bit Adam under ZeRO stages 0-2 and offload: warm-up, compression, bytes, checkpoints")
    with temporary_directory(args, "zt-onebit-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        one, _ = train(args.zerotune, workdir, model, data, 1, 0)
        runs = {}
        for ranks, stage, offload in ((2, 0, "none"), (2, 1, "none"), (2, 2, "none"), (2, 1, "cpu"), (4, 0, "none"),
                                      (4, 2, "cpu")):
            runs[(ranks, stage, offload)], _ = train(args.zerotune, workdir, model, data, ranks, stage, offload)
            compare(report, f"warm-up W={ranks} stage {stage} offload {offload} vs one rank",
                    runs[(ranks, stage, offload)], one, FREEZE, weights=False)
        for ranks, stage, offload in runs:
            if stage:
                compare(report, f"compressed W={ranks} stage {stage} offload {offload} vs stage 0",
                        runs[(ranks, stage, offload)], runs[(ranks, 0, "none")], STEPS)
        first = read_metrics(runs[(2, 0, "none")])[FREEZE]
        report.check(first["loss"] < read_metrics(runs[(2, 0, "none")])[0]["loss"], "W=2: the loss went down")

        # Bytes per step (rank 0's counters), warm-up vs compressed (after the first compressed step).
        stage0 = read_metrics(runs[(2, 0, "none")])
        fp32 = sent(stage0[FREEZE - 1], "all_reduce")
        compressed = [sent(r, "all_to_all") + sent(r, "all_gather") for r in stage0[FREEZE + 1:]]
        report.check(all(sent(r, "all_reduce") == 0 for r in stage0[FREEZE:]), "stage 0: no all-reduce after the freeze")
        report.check(min(fp32 / c for c in compressed) >= 16.0,
                     f"stage 0: {fp32:.0f} B of fp32 all-reduce per warm-up step vs {max(compressed):.0f} B compressed: "
                     f"{fp32 / max(compressed):.1f}x less")
        stage1 = read_metrics(runs[(2, 1, "none")])
        scatter, params = sent(stage1[FREEZE - 1], "reduce_scatter"), sent(stage1[FREEZE - 1], "all_gather")
        exchanged = [sent(r, "all_to_all") + sent(r, "all_gather") - params for r in stage1[FREEZE + 1:]]
        report.check(all(sent(r, "reduce_scatter") == 0 for r in stage1[FREEZE:]), "stage 1: no reduce-scatter after the freeze")
        report.check(min(scatter / e for e in exchanged) >= 15.0,
                     f"stage 1: {scatter:.0f} B of fp32 reduce-scatter vs {max(exchanged):.0f} B exchanged: "
                     f"{scatter / max(exchanged):.1f}x less (the parameter all-gather, {params:.0f} B, is the same)")
        first_exchange = sent(stage1[FREEZE], "all_gather") - params
        report.check(first_exchange > 4 * max(exchanged), f"stage 1: the first compressed step gathers the momentum whole "
                     f"once ({first_exchange:.0f} B)")

        # Checkpoints: the error feedback per rank, exact on the same world size.
        name = "resume-same"
        train(args.zerotune, workdir, model, data, 2, 1, steps=FREEZE + 2, name=name)
        with open(os.path.join(workdir, name, "checkpoints", f"global_step{FREEZE + 2}", "manifest.json")) as stream:
            manifest = json.load(stream)
        report.check(manifest["optimizer"] == {"type": "onebitadam", "state": ["exp_avg", "exp_avg_sq"]},
                     f"the manifest names the optimizer: {manifest['optimizer']}")
        report.check(manifest.get("exchange", {}).get("world_size") == 2 and len(manifest["exchange"]["files"]) == 2,
                     "the manifest lists both ranks' error-feedback files")
        out, result = train(args.zerotune, workdir, model, data, 2, 1, name=name, extra=["--resume", "auto"])
        compare(report, "resumed at step 5 on W=2 stage 1 vs uninterrupted", out, runs[(2, 1, "none")], STEPS)
        got, ref = load_weights(out + ".safetensors"), load_weights(runs[(2, 1, "none")] + ".safetensors")
        report.check(all(bool((got[k] == ref[k]).all()) for k in ref), "resumed on the same world size: bit-identical weights")
        name = "resume-other"
        train(args.zerotune, workdir, model, data, 2, 2, steps=FREEZE + 2, name=name)
        out, result = train(args.zerotune, workdir, model, data, 4, 0, name=name, extra=["--resume", "auto"])
        report.check("error feedback was saved on 2 ranks and this run has 4" in result.stdout,
                     "resumed on W=4: the error feedback restarts from zero, and the run says so")
        later = read_metrics(out)
        report.check(len(later) == STEPS and all(abs(r["loss"]) < 100 for r in later), "resumed on W=4: it trains on")

        # Stage 3 is refused.
        _, result = train(args.zerotune, workdir, model, data, 2, 3, name="stage3", expect_ok=False)
        report.check(result.returncode != 0 and "ZeRO stage 3" in result.stderr and "onebitadam" in result.stderr,
                     f"stage 3 is refused naming why: {result.stderr.strip().splitlines()[-1:]}")

        # Convergence: 1-bit Adam after 40 steps against the same optimizer never frozen.
        long_steps, freeze = 40, 10
        base = dict(OPTIMIZER, params=dict(OPTIMIZER["params"], freeze_step=freeze))
        uncompressed = dict(OPTIMIZER, params=dict(OPTIMIZER["params"], freeze_step=10 ** 6))
        onebit, _ = train(args.zerotune, workdir, model, data, 2, 1, steps=long_steps, name="long-onebit", optimizer=base)
        plain, _ = train(args.zerotune, workdir, model, data, 2, 1, steps=long_steps, name="long-plain",
                         optimizer=uncompressed)
        tail = lambda out: sum(r["loss"] for r in read_metrics(out)[-8:]) / 8  # noqa: E731
        start = read_metrics(plain)[0]["loss"]
        report.check(tail(onebit) < start - 0.5 * (start - tail(plain)),
                     f"convergence over {long_steps} steps: mean loss of the last 8 steps {tail(onebit):.4f} (1-bit, "
                     f"freeze {freeze}) vs {tail(plain):.4f} (never frozen), from {start:.4f}: 1-bit keeps at least half "
                     f"of the decrease")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

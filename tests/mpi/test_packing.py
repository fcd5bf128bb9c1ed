# --packing (issue 18) end to end on the CPU backend, 2 MPI ranks, gradient accumulation 2
# (global batch 16, micro-batch 4 samples), ZeRO stage 2, the tiny LLaMA and the OPT family case
# (learned positions):
#  1. the same samples per step: the packed run's losses equal the unpacked run's within float
#     reassociation (1e-5 relative), its token counts are the same, its padding fraction lower,
#     and its final weights agree within 2e-6;
#  2. resume stays exact: a packed run killed in step 5 and resumed from its step-3 checkpoint
#     has bit-identical losses and final weights to the uninterrupted packed run.
import os
import subprocess

from mpi_common import (MPI_ENV, Report, check_weights, load_weights, main_guard, make_model_and_data, mpiexec,
                        parse_args, read_metrics, run_ranks, temporary_directory, write_ds_config)

STEPS = 6


def command(zerotune, model, data, ds, out, extra=()):
    return [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds, "--max-steps", STEPS,
            "--seed", 3, "--dump-final", out + ".safetensors"] + list(extra)


def same_samples(report, label, zerotune, workdir, model_kind):
    model, data = make_model_and_data(zerotune, os.path.join(workdir, model_kind), samples=64, model=model_kind)
    ds = write_ds_config(os.path.join(workdir, model_kind + "-ds.json"), 16, 4,
                         {"stage": 2, "reduce_bucket_size": 20000})
    plain, packed = (os.path.join(workdir, model_kind + "-" + name) for name in ("plain", "packed"))
    run_ranks(2, command(zerotune, model, data, ds, plain))
    run_ranks(2, command(zerotune, model, data, ds, packed, ["--packing"]))
    reference, got = read_metrics(plain), read_metrics(packed)
    report.check(len(got) == len(reference) == STEPS, f"{label}: {len(got)} steps (unpacked {len(reference)})")
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(got, reference))
    report.check(worst <= 1e-5, f"{label}: packed losses equal the unpacked ones within 1e-5 relative "
                 f"(worst {worst:.1e}; {[round(r['loss'], 5) for r in got]})")
    report.check(all(a["tokens"] == b["tokens"] for a, b in zip(got, reference)),
                 f"{label}: the same tokens every step ({[r['tokens'] for r in got]})")
    report.check(all(a["padding_fraction"] < b["padding_fraction"] for a, b in zip(got, reference)),
                 f"{label}: less padding ({[round(r['padding_fraction'], 3) for r in got]} < "
                 f"{[round(r['padding_fraction'], 3) for r in reference]})")
    check_weights(report, label, load_weights(packed + ".safetensors"), load_weights(plain + ".safetensors"), 2e-6,
                  reference)
    return model, data, ds, packed


def exact_resume(report, zerotune, workdir, model, data, ds, reference):
    out = os.path.join(workdir, "killed")
    extra = ["--packing", "--save-every", 3]
    full = mpiexec(2, command(zerotune, model, data, ds, out, extra))
    print("mpi: running " + " ".join(map(str, full)) + "  (killed in step 5)", flush=True)
    result = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                            env=dict(os.environ, **MPI_ENV, ZT_FAULT="kill:step:1:5"))
    report.check(result.returncode != 0, f"packed run killed in step 5 failed (status {result.returncode})")
    run_ranks(2, command(zerotune, model, data, ds, out, extra + ["--resume", "auto"]))
    got, ref = [r["loss"] for r in read_metrics(out)], [r["loss"] for r in read_metrics(reference)]
    report.check(len(got) == STEPS and got == ref, f"packed resume: losses bit-identical to the uninterrupted run "
                 f"({len(got)} steps)")
    check_weights(report, "packed resume", load_weights(out + ".safetensors"), load_weights(reference + ".safetensors"),
                  0.0, read_metrics(reference))


def main():
    args = parse_args(__doc__)
    report = Report("--packing: the same samples, losses and gradients as unpacked; exact resume")
    with temporary_directory(args, "zt-packing-") as workdir:
        model, data, ds, packed = same_samples(report, "llama", args.zerotune, workdir, "llama")
        same_samples(report, "opt", args.zerotune, workdir, "opt")
        exact_resume(report, args.zerotune, workdir, model, data, ds, packed)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

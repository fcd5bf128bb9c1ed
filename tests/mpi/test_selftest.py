# `zerotune selftest` on the CPU backend (2 ranks): the table of GEMM plans, collectives (exact
# results, bus bandwidth), GEMM throughput and memory; exit status 0. A model too large for the
# host memory is a failed memory check, named with its rank and host, and exit status non-zero.
import json
import os

from mpi_common import (REPO, Report, main_guard, make_model_and_data, parse_args, run_ranks, temporary_directory,
                        write_ds_config)


def main():
    args = parse_args(__doc__)
    report = Report("zerotune selftest on the CPU backend")
    with temporary_directory(args, "zt-selftest-") as workdir:
        model, _ = make_model_and_data(args.zerotune, workdir, samples=8)
        ds = write_ds_config(os.path.join(workdir, "ds.json"), 4, 2, {"stage": 2})
        result, _ = run_ranks(2, [args.zerotune, "selftest", "--model", model, "--deepspeed", ds, "--device", "cpu"])
        out = result.stdout
        report.check("selftest: every check passed (2 ranks)" in out, "every check passed on 2 ranks")
        for check in ("all_reduce 1 MiB", "reduce_scatter 1 MiB", "all_gather 1 MiB",
                      "gemm 256^3 throughput", "memory: predicted need vs free"):
            report.check(any(line.startswith(check) and " ok " in line for line in out.splitlines()),
                         f"table row '{check}' is there and ok")
        report.check("busbw" in out and "TFLOP/s" in out, "bandwidth and throughput figures are printed")

        # A model whose states cannot fit in this machine's memory: the memory row fails on every rank.
        with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
            config = json.load(stream)
        config.update(hidden_size=16384, intermediate_size=65536, num_hidden_layers=64, num_attention_heads=128,
                      num_key_value_heads=128)
        huge = os.path.join(workdir, "huge")
        os.makedirs(huge)
        with open(os.path.join(huge, "config.json"), "w") as stream:
            json.dump(config, stream)
        result, _ = run_ranks(2, [args.zerotune, "selftest", "--model", huge, "--deepspeed", ds, "--device", "cpu",
                                  "--seq-len", "16"], expect_ok=False)
        out = result.stdout
        report.check(result.returncode != 0, f"exit status {result.returncode} when the run cannot fit")
        report.check("FAILED: memory: predicted need vs free on rank 0 (host " in out and
                     "FAILED: memory: predicted need vs free on rank 1 (host " in out,
                     f"the failure names the check, the rank and the host: {out[-500:]!r}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

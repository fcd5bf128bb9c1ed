# `train` without --device on ranks that see no GPU (CUDA_VISIBLE_DEVICES empty, as on a CPU node;
# the same in a build without CUDA) trains on the CPU and says why in the banner and run.json.
import os

from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_run, run_ranks, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("--device auto falls back to the CPU, saying why")
    with temporary_directory(args, "zt-device-default-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=16)
        out = os.path.join(workdir, "out")
        saved = dict(os.environ)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            result, _ = run_ranks(2, [args.zerotune, "train", "--model", model, "--data", data, "--out", out,
                                      "--max-steps", 1, "--micro-batch-size", 2])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        run = read_run(out)
        report.check(run["device"] == "cpu", f"device {run['device']}")
        report.check(run["device_reason"] in ("auto: this zerotune was built without the CUDA backend",
                                              "auto: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES '';"
                                              " or no NVIDIA driver)"), f"reason {run['device_reason']!r}")
        report.check(f"device: cpu ({run['device_reason']})" in result.stdout, "the banner says which device and why")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

"""A configuration error on N ranks (issue 17): every rank reads the same bad flag or file, so
the job prints the message once, from rank 0, and ends non-zero without MPI_Abort's noise
(each rank exits 1). Two cases on 2 and 4 ranks: a bad flag value (--lr nan) and a missing
model directory. A failure on some ranks only still ends the job at once with the failing
rank's message (tests/mpi/test_failures.py)."""
import os
import subprocess

from mpi_common import MPI_ENV, Report, main_guard, make_model_and_data, mpiexec, parse_args, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("a configuration error on every rank is printed once, without MPI_Abort")
    with temporary_directory(args, "zt-config-once-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=16)
        cases = {
            "lr-nan": (["--model", model, "--lr", "nan"], "--lr must be a finite number >= 0, not nan"),
            "missing-model": (["--model", os.path.join(workdir, "no-such-model")], "no-such-model"),
        }
        for ranks in (2, 4):
            for name, (flags, phrase) in cases.items():
                command = mpiexec(ranks, [args.zerotune, "train", "--data", data, "--out",
                                          os.path.join(workdir, f"out-{name}-{ranks}"), "--max-steps", "1"] + flags)
                print("mpi: running " + " ".join(command), flush=True)
                result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        timeout=120, env=dict(os.environ, **MPI_ENV))
                output = result.stdout + result.stderr
                print(output, flush=True)
                errors = [line for line in output.splitlines() if ": error (rank " in line]
                label = f"{name} on {ranks} ranks"
                report.check(result.returncode != 0, f"{label}: exit status {result.returncode} (non-zero)")
                report.check(len(errors) == 1 and "error (rank 0)" in errors[0] and phrase in errors[0],
                             f"{label}: one error line, from rank 0, naming the problem ({len(errors)} lines)")
                report.check("MPI_ABORT" not in output and "MPI_Abort" not in output, f"{label}: no MPI_Abort noise")
                report.check(f"every one of the {ranks} ranks failed" in output, f"{label}: says every rank failed")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

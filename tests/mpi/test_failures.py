# Failure handling (issue 4): when one rank fails, every rank exits non-zero within seconds with
# the message and the failing rank, and a collective that never completes aborts the job
# naming the collective.
#   1. a file missing on rank 1 only (MPMD launch: rank 1 gets another --data);
#   2. an exception on rank 1 in the middle of step 2 (ZT_FAULT=throw:step:1:2), stage 2;
#   3. rank 1 hangs in step 2 (ZT_FAULT=hang:step:1:2), stages 2 and 3 (bucket reductions and
#      parameter gathers in flight): rank 0's next collective times out after --comm-timeout 5 s
#      and the job ends within one timeout (plus start-up), not one per collective in flight,
#      with a message naming the collective.
#   4. the same in a 2-stage pipeline (--pipeline-stages 2, issue 32): rank 1 (stage 1) hangs in step
#      2's backward, and rank 0 (stage 0), waiting for the gradient of its output, times out naming
#      the point-to-point exchange; and rank 1 (stage 1) killed in step 2's backward (ZT_FAULT=kill:
#      SIGKILL, as the OOM killer or a lost node): the job ends within the comm timeout, the launcher
#      naming the killed rank.
import os
import subprocess
import time

from mpi_common import MPI_ENV, Report, main_guard, make_model_and_data, parse_args, temporary_directory

LIMIT_S = 60  # "within seconds": generous for an oversubscribed 2-core CI machine


def launch(report, label, command, extra_env=None, limit_s=LIMIT_S):
    env = dict(os.environ, **MPI_ENV, **(extra_env or {}))
    print("mpi: running " + " ".join(command), flush=True)
    start = time.monotonic()
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=LIMIT_S,
                                env=env)
    except subprocess.TimeoutExpired:
        report.fail(f"{label}: the job still ran after {LIMIT_S} s (a rank hangs)")
        return None
    seconds = time.monotonic() - start
    report.check(result.returncode != 0, f"{label}: job exit status {result.returncode} (non-zero)")
    report.check(seconds < limit_s, f"{label}: ended after {seconds:.1f} s (limit {limit_s} s)")
    return result.stdout + result.stderr


def main():
    args = parse_args(__doc__)
    report = Report("a failing or hanging rank ends the whole job with its message")
    with temporary_directory(args, "zt-fail-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        # Each launch writes into its own --out (a directory holding another run is refused, issue 17).
        def train(out):
            return ["train", "--model", model, "--out", os.path.join(workdir, out), "--micro-batch-size", "2",
                    "--grad-accum", "1", "--max-steps", "4", "--zero-stage", "2"]
        base = ["mpiexec", "--oversubscribe", "--bind-to", "none"]

        missing = os.path.join(workdir, "no-such-data")
        output = launch(report, "missing file on rank 1",
                        base + ["-np", "1", args.zerotune] + train("out-missing") + ["--data", data] +
                        [":", "-np", "1", args.zerotune] + train("out-missing") + ["--data", missing])
        if output is not None:
            report.check("error (rank 1)" in output and "no-such-data" in output,
                         "missing file: the message names rank 1 and the missing path")

        output = launch(report, "exception on rank 1 in step 2",
                        base + ["-np", "2", args.zerotune] + train("out-throw") + ["--data", data],
                        {"ZT_FAULT": "throw:step:1:2"})
        if output is not None:
            report.check("error (rank 1)" in output and "injected fault" in output and "step 2" in output,
                         "exception: the message names rank 1, the fault and the step")

        timeout = 5
        for stage in ("2", "3"):
            # Start-up and steps 1-2 take about a second: the job must end well before 2 timeouts.
            output = launch(report, f"rank 1 hangs in step 2, stage {stage}",
                            base + ["-np", "2", args.zerotune] + train(f"out-hang-{stage}")[:-1] +
                            [stage, "--data", data, "--comm-timeout", str(timeout)],
                            {"ZT_FAULT": "hang:step:1:2"}, limit_s=timeout + 3.5)
            if output is not None:
                report.check("error (rank 0)" in output and f"did not complete within {timeout} s" in output and
                             "step 2" in output, f"hang, stage {stage}: rank 0 reports the collective that timed out")
                names = ("all_reduce", "reduce_scatter", "all_gather", "scalar_all_reduce", "barrier")
                report.check(any(f"collective {name} " in output for name in names),
                             f"hang, stage {stage}: the collective is named")
        output = launch(report, "rank 1 hangs in step 2, pipeline stage 1 of 2",
                        base + ["-np", "2", args.zerotune] + train("out-hang-pipeline") +
                        ["--data", data, "--comm-timeout", str(timeout), "--pipeline-stages", "2", "--no-save-at-end"],
                        {"ZT_FAULT": "hang:step:1:2"}, limit_s=timeout + 3.5)
        if output is not None:
            report.check("error (rank 0)" in output and f"collective point_to_point did not complete within {timeout} s"
                         in output and "step 2" in output,
                         "hang in a pipeline: rank 0 reports the point-to-point exchange that timed out")
        output = launch(report, "rank 1 killed in step 2, pipeline stage 1 of 2",
                        base + ["-np", "2", args.zerotune] + train("out-kill-pipeline") +
                        ["--data", data, "--comm-timeout", str(timeout), "--pipeline-stages", "2", "--no-save-at-end"],
                        {"ZT_FAULT": "kill:step:1:2"}, limit_s=timeout + 3.5)
        if output is not None:
            report.check("rank 1" in output and "signal 9" in output,
                         "killed in a pipeline: the launcher names rank 1 and its signal")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

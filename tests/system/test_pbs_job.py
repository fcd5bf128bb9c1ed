# job_scripts/pbs/train.pbs under bash with a PBS-like environment (PBS cannot run here):
# PBS_NODEFILE listing this host twice (two rank slots), PBS_O_WORKDIR, PBS_JOBID, and mpirun
# on this machine.
#  1. a 2-rank run: exit 0, the job ran in PBS_O_WORKDIR (a relative ZT_OUT lands there), the
#     nodefile became a hostfile with 2 slots (world size 2), its temporary hostfile is gone,
#     and the losses equal a plain 2-rank mpiexec run's; `zerotune report OUT` draws the run;
#  2. the walltime: with ZT_WALLTIME and ZT_CHECKPOINT_MARGIN the script signals the ranks
#     before the end; zerotune checkpoints and exits 0 early; the next job of the chain (the same
#     script again, stopped by its walltime too) resumes with --resume auto where the first
#     stopped; the steps of both have the losses of one uninterrupted run of as many steps. The
#     jobs are planned far longer than they run, so the timers always fire mid-training,
#     whatever this machine's speed (WarmupLR does not depend on the planned total).
import os
import re
import socket
import subprocess

from system_common import (JOB_SCRIPTS, OracleError, Report, check_metrics_keys, compare_losses, job_env, main_guard,
                           make_model_and_data, parse_args, read_metrics, read_run, require_programs, run_script,
                           temporary_directory, write_ds_config)
from mpi_common import run_ranks

STEPS = 8
LONG_STEPS = 1000000  # planned, never reached: each job of the chain ends by its walltime timer
WALLTIME = "00:00:08"  # with a 4 s margin: the timer fires about 4 s into each job


def pbs_env(base, workdir, temporary):
    nodefile = os.path.join(workdir, "nodefile")
    with open(nodefile, "w") as stream:
        stream.write(f"{socket.gethostname()}\n" * 2)
    return dict(base, PBS_NODEFILE=nodefile, PBS_O_WORKDIR=workdir, PBS_JOBID="4242.pbs-server", TMPDIR=temporary)


def main():
    args = parse_args(__doc__)
    report = Report("PBS: train.pbs with a PBS-like environment and mpirun on this machine")
    require_programs(["mpirun"], "openmpi-bin")
    zerotune = os.path.abspath(args.zerotune)
    script = os.path.join(JOB_SCRIPTS, "pbs", "train.pbs")
    with temporary_directory(args, "zt-pbs-") as workdir:
        model, data = make_model_and_data(zerotune, workdir)
        ds_config = write_ds_config(os.path.join(workdir, "ds.json"), 16, 4, {"stage": 1})
        jobdir = os.path.join(workdir, "submitted-from")
        temporary = os.path.join(workdir, "tmp")
        os.makedirs(jobdir)
        os.makedirs(temporary)

        # 1. a plain run; ZT_OUT is relative: it must land in PBS_O_WORKDIR, not in the cwd.
        env = pbs_env(job_env(zerotune, model, data, "out", ds_config, ["--max-steps", STEPS, "--seed", 3],
                              ZT_CPU_BIND="none"), jobdir, temporary)
        status, output = run_script(["bash", script], env, cwd=workdir)
        report.check(status == 0, f"train.pbs exits 0 (got {status})")
        report.check("2 ranks on 1 node(s)" in output, "PBS_NODEFILE's two lines became 2 ranks on one node")
        report.check("walltime unknown" in output, "without ZT_WALLTIME or qstat the script says it sets no timer")
        out = os.path.join(jobdir, "out")
        records = read_metrics(out)
        check_metrics_keys(report, records, f"{out}/metrics.jsonl")
        report.check(read_run(out).get("world_size") == 2, "run.json world_size == 2")
        report.check(os.listdir(temporary) == [], f"the temporary hostfile was removed (left: {os.listdir(temporary)})")
        # `zerotune report OUT` over the finished run: the page and the summary.
        status, output = run_script([zerotune, "report", out], os.environ, workdir)
        report.check(status == 0 and "summary:" in output and f"report: {out}/report.html" in output,
                     "zerotune report OUT prints the summary and the page's path")
        with open(os.path.join(out, "report.html")) as stream:
            page = stream.read()
        report.check(page.count("<svg") == 3, f"report.html draws loss, throughput and memory ({page.count('<svg')} svg)")
        reference_out = os.path.join(workdir, "mpiexec")
        run_ranks(2, [zerotune, "train", "--model", model, "--data", data, "--out", reference_out, "--deepspeed",
                      ds_config, "--max-steps", STEPS, "--seed", 3])
        compare_losses(report, "train.pbs vs mpiexec -np 2", records, read_metrics(reference_out), STEPS)

        # 2. the walltime timer, then the next job of the chain (stopped by its timer as well).
        long_args = ["--max-steps", LONG_STEPS, "--seed", 3, "--log-every", 50]
        env = pbs_env(job_env(zerotune, model, data, "out-chain", ds_config, long_args, ZT_CPU_BIND="none",
                              ZT_WALLTIME=WALLTIME, ZT_CHECKPOINT_MARGIN=4), jobdir, temporary)
        chain_out = os.path.join(jobdir, "out-chain")
        stopped_at = []
        for job in ("first", "second"):
            status, output = run_script(["bash", script], env, cwd=workdir)
            report.check(status == 0, f"the {job} job of the chain exits 0 after the walltime checkpoint (got {status})")
            timer = re.search(rf"walltime {WALLTIME}: the checkpoint is requested in (\d+) s", output)
            report.check(timer is not None and int(timer.group(1)) <= 4,
                         f"{job} job: the script set the timer from ZT_WALLTIME (8 s - 4 s margin - the time it ran)")
            stop = re.search(r"stop requested \(signal\) at step (\d+)", output)
            report.check("received SIGUSR1" in output and stop is not None,
                         f"{job} job: the timer fired and zerotune stopped with a checkpoint")
            if stop is None:
                raise OracleError(f"the {job} job did not stop on its walltime timer (output above)")
            stopped_at.append(int(stop.group(1)))
        report.check(f"resumed from out-chain/checkpoints/global_step{stopped_at[0]} at step {stopped_at[0]}" in output,
                     f"the second job resumed where the first stopped (step {stopped_at[0]})")
        report.check(stopped_at[1] > stopped_at[0], f"the second job trained on, to step {stopped_at[1]}")
        reference_long = os.path.join(workdir, "uninterrupted")
        run_ranks(2, [zerotune, "train", "--model", model, "--data", data, "--out", reference_long, "--deepspeed",
                      ds_config, "--max-steps", stopped_at[1], "--seed", 3, "--log-every", 50])
        compare_losses(report, "two chained jobs vs one uninterrupted run", read_metrics(chain_out),
                       read_metrics(reference_long), stopped_at[1])
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

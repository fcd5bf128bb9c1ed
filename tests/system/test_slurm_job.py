# job_scripts/slurm/train.sbatch on a real single-node Slurm (slurmctld + slurmd from Debian's
# slurm-wlm on this machine, auth/none, started by scripts/setup_slurm.sh and always stopped):
#  1. a 2-rank job end to end (`sbatch --wait`, exit 0, metrics.jsonl with every key, run.json
#     with world size 2), launched the way the script picks (srun --mpi=pmix when available);
#  2. the time-limit flow: SIGUSR1 to the batch shell (what `--signal=B:USR1@300` sends), the
#     script passes it on, zerotune checkpoints and exits 0, the script requeues the job, the
#     requeued job resumes with --resume auto and finishes, with the same losses as job 1;
#  3. the same job through the mpirun launcher inside the allocation (ZT_LAUNCHER=mpirun).
import os
import re
import subprocess
import time

from system_common import (JOB_SCRIPTS, REPO, OracleError, Report, check_metrics_keys, compare_losses, free_port,
                           job_env, main_guard, make_model_and_data, parse_args, read_metrics, read_run,
                           require_programs, require_root, run_script, temporary_directory, wait_for_records,
                           write_ds_config)

# Long enough to signal the job in the middle: the USR1 goes out after SIGNAL_AFTER records and
# stops the run about 3 steps later (measured: step 13), far from the end (a step takes ~25 ms).
STEPS = 120
SIGNAL_AFTER = 10    # records in metrics.jsonl before the USR1
SBATCH_CPU_ONLY = ["--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=10"]


def job_fields(job_id, env):
    """scontrol's view of a job: {"JobState": ..., "Restarts": ..., "ExitCode": ...}."""
    result = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=30)
    if result.returncode != 0:
        raise OracleError(f"scontrol show job {job_id}: {result.stderr.strip()}")
    return dict(re.findall(r"(\w+)=(\S*)", result.stdout))


def wait_for_job(job_id, env, condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    fields = {}
    while time.monotonic() < deadline:
        fields = job_fields(job_id, env)
        if condition(fields):
            return fields
        time.sleep(0.3)
    raise OracleError(f"job {job_id}: {what} did not happen within {timeout_s} s (JobState "
                      f"{fields.get('JobState')}, Reason {fields.get('Reason')}, Restarts {fields.get('Restarts')})")


def read_log(path):
    with open(path) as stream:
        return stream.read()


def sbatch(env, workdir, name, extra=()):
    return ["sbatch", *SBATCH_CPU_ONLY, f"--output={os.path.join(workdir, name + '-%j.out')}", *extra,
            os.path.join(JOB_SCRIPTS, "slurm", "train.sbatch")]


def check_finished_run(report, label, out, steps, ranks):
    records = read_metrics(out)
    check_metrics_keys(report, records, f"{label}: {out}/metrics.jsonl")
    report.check(len(records) == steps, f"{label}: {len(records)} steps recorded, {steps} expected")
    run = read_run(out)
    report.check(run.get("world_size") == ranks, f"{label}: run.json world_size {run.get('world_size')} == {ranks}")
    return records


def end_to_end(report, workdir, env_for, slurm_env):
    out = os.path.join(workdir, "out-plain")
    status, output = run_script(sbatch(workdir, workdir, "plain", ["--wait"]), env_for(out), workdir, timeout_s=180)
    report.check(status == 0, f"sbatch --wait train.sbatch (2 ranks) exits 0 (got {status})")
    job_id = re.search(r"Submitted batch job (\d+)", output)
    if not job_id:
        raise OracleError("sbatch printed no job id")
    log = read_log(os.path.join(workdir, f"plain-{job_id.group(1)}.out"))
    print(f"---- job log ----\n{log}----")
    launcher = re.search(r"launcher (\w+)", log)
    report.check(launcher is not None, "the job log names the launcher")
    report.check("--resume auto" in log, "the job runs zerotune with --resume auto")
    report.check("preflight: + " in log and "selftest: every check passed (2 ranks)" in log,
                 "the first run of the job ran the preflight (zerotune selftest) on both ranks, and it passed")
    fields = job_fields(job_id.group(1), slurm_env)
    report.check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
                 f"job {job_id.group(1)}: COMPLETED with ExitCode 0:0 (got {fields.get('JobState')}, "
                 f"{fields.get('ExitCode')})")
    return check_finished_run(report, "plain job", out, STEPS, 2)


def time_limit_requeue(report, workdir, env_for, slurm_env, reference):
    out = os.path.join(workdir, "out-requeue")
    status, output = run_script(sbatch(workdir, workdir, "requeue", ["--parsable"]), env_for(out), workdir)
    if status != 0:
        raise OracleError("sbatch failed")
    job_id = output.strip().split(";")[0]
    if not wait_for_records(out, SIGNAL_AFTER, 120):
        raise OracleError(f"job {job_id} wrote no {SIGNAL_AFTER} metrics records within 120 s")
    # What `#SBATCH --signal=B:USR1@300` does at the time limit: USR1 to the batch shell only.
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], env=slurm_env, check=True, timeout=30)
    print(f"system: sent SIGUSR1 to the batch shell of job {job_id}", flush=True)
    fields = wait_for_job(job_id, slurm_env, lambda f: f.get("Restarts") == "1" or f.get("JobState") == "COMPLETED",
                          120, "the requeue")
    report.check(fields.get("Restarts") == "1", f"job {job_id} was requeued once (Restarts {fields.get('Restarts')})")
    # Slurm holds a requeued job back for a while (Reason=BeginTime, about 2 minutes); let it go now.
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=slurm_env, timeout=30)
    fields = wait_for_job(job_id, slurm_env, lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED",
                                                                               "TIMEOUT", "NODE_FAIL"),
                          180, "the end of the requeued job")
    log = read_log(os.path.join(workdir, f"requeue-{job_id}.out"))
    print(f"---- job log ----\n{log}----")
    report.check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
                 f"requeued job {job_id}: COMPLETED with ExitCode 0:0 (got {fields.get('JobState')}, "
                 f"{fields.get('ExitCode')})")
    report.check("received SIGUSR1" in log, "the script got the time-limit signal")
    report.check("stop requested" in log and "checkpoint saved" in log,
                 "zerotune saved a checkpoint and stopped on the signal")
    report.check("requeueing job" in log, "the script requeued the job")
    report.check(f"job {job_id} (restart 1)" in log, "the requeued job ran again (restart 1)")
    after_restart = log.split(f"job {job_id} (restart 1)")[-1]
    report.check("preflight: + " not in after_restart, "a requeued run skips the preflight (ZT_PREFLIGHT default 0)")
    report.check(re.search(r"resumed from \S*checkpoints\S*", log) is not None, "the second run resumed (--resume auto)")
    records = check_finished_run(report, "requeued job", out, STEPS, 2)
    compare_losses(report, "requeued job vs uninterrupted", records, reference, STEPS)


def mpirun_launcher(report, workdir, env_for, reference):
    out = os.path.join(workdir, "out-mpirun")
    env = env_for(out)
    env["ZT_LAUNCHER"] = "mpirun"
    env["ZT_ARGS"] = "--max-steps 6 --seed 3"
    status, output = run_script(sbatch(workdir, workdir, "mpirun", ["--wait"]), env, workdir, timeout_s=180)
    report.check(status == 0, f"sbatch --wait train.sbatch with ZT_LAUNCHER=mpirun exits 0 (got {status})")
    records = check_finished_run(report, "mpirun job", out, 6, 2)
    compare_losses(report, "mpirun launcher vs srun", records, reference[:6], 6)


def main():
    args = parse_args(__doc__)
    report = Report("Slurm: train.sbatch on a single-node Slurm (2 ranks, time-limit requeue, both launchers)")
    require_root("slurmd starts jobs as their user")
    require_programs(["slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "srun"], "slurm-wlm")
    require_programs(["mpirun"], "openmpi-bin")
    zerotune = os.path.abspath(args.zerotune)  # the job runs in another directory
    with temporary_directory(args, "zt-slurm-") as workdir:
        model, data = make_model_and_data(zerotune, workdir)
        ds_config = write_ds_config(os.path.join(workdir, "ds.json"), 16, 4, {"stage": 2})
        slurm_dir = os.path.join(workdir, "slurm")
        setup = os.path.join(REPO, "scripts", "setup_slurm.sh")
        ports = {"ZT_SLURMCTLD_PORT": str(free_port()), "ZT_SLURMD_PORT": str(free_port())}
        slurm_env = dict(os.environ, SLURM_CONF=os.path.join(slurm_dir, "slurm.conf"))
        try:
            subprocess.run(["bash", setup, "start", slurm_dir], env=dict(os.environ, **ports), check=True, timeout=120)

            def env_for(out):
                env = job_env(zerotune, model, data, out, ds_config, ["--max-steps", STEPS, "--seed", 3,
                                                                           "--log-every", 20])
                env["SLURM_CONF"] = slurm_env["SLURM_CONF"]
                return env

            reference = end_to_end(report, workdir, env_for, slurm_env)
            time_limit_requeue(report, workdir, env_for, slurm_env, reference)
            mpirun_launcher(report, workdir, env_for, reference)
        except Exception:
            for log in ("slurmctld.log", "slurmd.log"):
                path = os.path.join(slurm_dir, log)
                if os.path.exists(path):
                    print(f"---- {path} (last 30 lines) ----\n" + "".join(open(path).readlines()[-30:]))
            raise
        finally:
            subprocess.run(["bash", setup, "stop", slurm_dir], timeout=60)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

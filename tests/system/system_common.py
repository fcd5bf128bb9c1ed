# Shared helpers of the system tests (tests/system/test_*.py): the job scripts of job_scripts/
# run for real (Slurm daemons, sshd, a fake PBS environment). Reuses the MPI tests' tiny model
# and data and the oracle's Report (tests/mpi/mpi_common.py, tests/oracle/oracle_common.py):
# a missing program (slurmctld, sshd, mpirun) is a failure that says to run scripts/setup.sh,
# never a skip.
import os
import random
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from mpi_common import (MPI_ENV, REPO, OracleError, Report, main_guard, make_model_and_data,  # noqa: E402,F401
                        parse_args, read_metrics, read_run, temporary_directory, write_ds_config)
from oracle_common import check_metrics_keys  # noqa: E402,F401

JOB_SCRIPTS = os.path.join(REPO, "job_scripts")
LOSS_REL = 2e-6   # the same global batch over other ranks: fp32 sums in another order
NORM_REL = 2e-5


def find_program(name, package):
    """The path of a program (on PATH, or in /usr/sbin for daemons); fails (never skips) when
    it is missing."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        raise OracleError(f"{name} not found: install {package} (scripts/setup.sh installs it)")
    return path


def require_programs(names, package):
    for name in names:
        find_program(name, package)


def require_root(why):
    if os.geteuid() != 0:
        raise OracleError(f"this test must run as root: {why}")


def free_port():
    """A TCP port nothing listens on now, below the kernel's ephemeral range: a port the kernel picks
    (bind to 0) comes from that range, which every outgoing connection draws its source port from
    too, so one of the MPI runs of a test beside this one could take it before the daemon that was
    given it binds (slurmctld's "Address already in use")."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as stream:
        ephemeral_low = int(stream.read().split()[0])
    for port in random.sample(range(10000, max(10200, min(ephemeral_low, 32768))), 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OracleError(f"no free TCP port between 10000 and {ephemeral_low} after 200 tries")


def job_env(zerotune, model, data, out, ds_config, train_args, **extra):
    """The environment a job script takes its run from (ZT_*), over this process's, with the
    MPI settings every multi-rank test uses (root allowed, no busy-waiting on 2 cores)."""
    env = dict(os.environ, **MPI_ENV)
    env.update(ZT_BIN=zerotune, ZT_MODEL=model, ZT_DATA=data, ZT_OUT=out, ZT_DS_CONFIG=ds_config,
               ZT_ARGS=" ".join(str(a) for a in train_args))
    env.update({key: str(value) for key, value in extra.items()})
    return env


def run_script(command, env, cwd, timeout_s=240):
    """Runs a job script; returns (exit status, stdout + stderr). Prints the output."""
    print("system: running " + " ".join(command), flush=True)
    result = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=timeout_s)
    print(f"---- output (exit status {result.returncode}) ----\n{result.stdout}----", flush=True)
    return result.returncode, result.stdout


def compare_losses(report, label, got, reference, steps):
    """got and reference are metrics.jsonl training records; checks `steps` of them, each once,
    with the reference's loss and grad norm."""
    report.check([r["step"] for r in got] == list(range(1, steps + 1)),
                 f"{label}: steps 1..{steps} recorded once each (got {len(got)} records)")
    by_step = {r["step"]: r for r in reference}
    for record in got:
        if record["step"] not in by_step:
            report.fail(f"{label}: step {record['step']} is not in the reference run")
            continue
        ref = by_step[record["step"]]
        report.scalar(f"{label} step {record['step']} loss", record["loss"], ref["loss"], LOSS_REL)
        report.scalar(f"{label} step {record['step']} grad_norm", record["grad_norm"], ref["grad_norm"], NORM_REL)


def wait_for_records(out_dir, count, timeout_s, process=None):
    """Waits until OUT/metrics.jsonl holds `count` lines; False on timeout or when `process`
    (a Popen) ended first."""
    path = os.path.join(out_dir, "metrics.jsonl")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        if os.path.exists(path):
            with open(path) as stream:
                if sum(1 for line in stream if line.strip()) >= count:
                    return True
        time.sleep(0.1)
    return False

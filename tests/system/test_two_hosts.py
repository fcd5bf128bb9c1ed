# A two-host launch over ssh: sshd runs on this machine (a spare port, a host key and an
# authorized client key made for the test, listening on 127.0.0.2 and 127.0.0.3), and
# job_scripts/mpirun/train.sh with hostfiles/loopback-two-hosts.txt (127.0.0.2 slots=2,
# 127.0.0.3 slots=2) starts 4 ranks through it: Open MPI sees two nodes and reaches each over
# ssh. The run must give the same losses and gradient norms as one rank with the same global
# batch (train_batch_size 16, micro-batch 4: accumulation 4 on one rank, 1 on four).
#
# Then the same launch as a 2-node pipeline (issue 32): DeepSpeed's "pipeline" section with 2
# stages (ZeRO-1 in each stage's 2 replicas), so each "host" runs one stage (its 2 slots) and the
# activations cross between them: the same losses as one rank again, run.json's layout 2 stages x
# 2 replicas. (The layout printed at start names one node: both "hosts" have this machine's name.)
#
# ssh gets its settings (port, key, no host-key prompt) from a config file in the test's
# temporary directory, through OMPI_MCA_plm_rsh_agent="ssh -F FILE": nothing in ~/.ssh changes.
# The two "hosts" are one machine with one host name: Open MPI's shared-memory transport would
# give both hosts' ranks the same segment names, so the test uses TCP between all ranks
# (OMPI_MCA_btl=self,tcp), as ranks on different real hosts talk anyway.
# The "remote" orted must not share its hwloc topology through a shared-memory segment
# (OMPI_MCA_rtc_hwloc_vmhole=none): Open MPI 4.1 maps that segment at the end of the biggest hole
# in the address space, next to the stack, and an orted crashed there once in CI (SIGSEGV in
# hwloc_shmem_topology_write) before any rank started. Nothing of zerotune's runs in that code.
import json
import os
import pwd
import subprocess
import time

from system_common import (JOB_SCRIPTS, REPO, OracleError, Report, compare_losses, find_program, free_port, job_env,
                           main_guard, make_model_and_data, parse_args, read_metrics, read_run, require_programs,
                           run_script, temporary_directory, write_ds_config)

STEPS = 6
HOSTS = ("127.0.0.2", "127.0.0.3")
HOSTFILE = os.path.join(REPO, "hostfiles", "loopback-two-hosts.txt")


def start_sshd(workdir):
    """Starts sshd (it daemonizes) for HOSTS on a free port; returns (ssh config path, pid file, log)."""
    ssh_dir = os.path.join(workdir, "ssh")
    os.makedirs(ssh_dir)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(ssh_dir, key)], check=True,
                       timeout=30)
    authorized = os.path.join(ssh_dir, "authorized_keys")
    with open(os.path.join(ssh_dir, "client_key.pub")) as source, open(authorized, "w") as target:
        target.write(source.read())
    os.chmod(authorized, 0o600)
    port = free_port()
    pid_file = os.path.join(ssh_dir, "sshd.pid")
    log = os.path.join(ssh_dir, "sshd.log")
    sshd_config = os.path.join(ssh_dir, "sshd_config")
    with open(sshd_config, "w") as stream:
        stream.write(f"Port {port}\n" + "".join(f"ListenAddress {host}\n" for host in HOSTS) +
                     f"HostKey {ssh_dir}/host_key\nAuthorizedKeysFile {authorized}\nPidFile {pid_file}\n"
                     "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                     "PermitRootLogin prohibit-password\n"
                     # the temporary directory's modes are not sshd's business here; no PAM in a container
                     "StrictModes no\nUsePAM no\n")
    ssh_config = os.path.join(ssh_dir, "ssh_config")
    with open(ssh_config, "w") as stream:
        stream.write(f"Host {' '.join(HOSTS)}\n  Port {port}\n  User {pwd.getpwuid(os.getuid()).pw_name}\n"
                     f"  IdentityFile {ssh_dir}/client_key\n  IdentitiesOnly yes\n  BatchMode yes\n"
                     "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    # sshd refuses to start without its privilege-separation directory.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    subprocess.run([find_program("sshd", "openssh-server"), "-f", sshd_config, "-E", log], check=True, timeout=30)
    deadline = time.monotonic() + 20
    while not (os.path.exists(pid_file) and open(pid_file).read().strip()):
        if time.monotonic() > deadline:
            raise OracleError(f"sshd wrote no pid file {pid_file} (log: {log})")
        time.sleep(0.1)
    return ssh_config, pid_file, log


def stop_sshd(pid_file):
    if not os.path.exists(pid_file):
        return
    pid = int(open(pid_file).read().strip())
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def pipeline_run(report, env, workdir, reference_out):
    """mpirun/train.sh over the two hosts with 2 pipeline stages from the DeepSpeed JSON."""
    with open(env["ZT_DS_CONFIG"]) as stream:
        config = json.load(stream)
    config["zero_optimization"] = {"stage": 1}
    config["pipeline"] = {"stages": 2, "partition": "parameters"}
    ds_config = os.path.join(workdir, "ds-pipeline.json")
    with open(ds_config, "w") as stream:
        json.dump(config, stream)
    out = os.path.join(workdir, "two-hosts-pipeline")
    status, output = run_script(["bash", os.path.join(JOB_SCRIPTS, "mpirun", "train.sh")],
                                dict(env, ZT_OUT=out, ZT_DS_CONFIG=ds_config, ZT_PREFLIGHT="0"), workdir)  # checked above
    report.check(status == 0, f"mpirun/train.sh, 2 pipeline stages over two hosts, exits 0 (got {status})")
    report.check("pipeline.stages 2 -> --pipeline-stages 2" in output, "the JSON's pipeline section was read")
    layout = read_run(out).get("pipeline_layout", {})
    report.check(layout.get("stages") == 2 and layout.get("replicas") == 2,
                 f"run.json: 2 stages x 2 replicas ({layout})")
    compare_losses(report, "2 pipeline stages on 2 hosts vs 1 rank", read_metrics(out), read_metrics(reference_out),
                   STEPS)


def main():
    args = parse_args(__doc__)
    report = Report("two hosts over ssh: mpirun/train.sh with a 127.0.0.2 + 127.0.0.3 hostfile, 4 ranks = 1 rank")
    require_programs(["ssh", "ssh-keygen"], "openssh-client")
    find_program("sshd", "openssh-server")
    require_programs(["mpirun"], "openmpi-bin")
    zerotune = os.path.abspath(args.zerotune)
    with temporary_directory(args, "zt-hosts-") as workdir:
        model, data = make_model_and_data(zerotune, workdir)
        ds_config = write_ds_config(os.path.join(workdir, "ds.json"), 16, 4, {"stage": 2})
        train_args = ["--max-steps", STEPS, "--seed", 3]
        ssh_config, pid_file, log = start_sshd(workdir)
        try:
            for host in HOSTS:
                reach = subprocess.run(["ssh", "-F", ssh_config, host, "true"], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, timeout=30)
                if reach.returncode != 0:
                    raise OracleError(f"ssh to {host} through the test's sshd failed: {reach.stdout.strip()} "
                                      f"(sshd log: {open(log).read()})")
            # The reference: one rank, the same global batch, no launcher.
            reference_out = os.path.join(workdir, "one-rank")
            status, _ = run_script([zerotune, "train", "--model", model, "--data", data, "--out", reference_out,
                                    "--deepspeed", ds_config] + [str(a) for a in train_args], os.environ, workdir)
            if status != 0:
                raise OracleError("the one-rank reference run failed")

            out = os.path.join(workdir, "two-hosts")
            env = job_env(zerotune, model, data, out, ds_config, train_args, ZT_HOSTFILE=HOSTFILE, ZT_CPU_BIND="none",
                          OMPI_MCA_plm_rsh_agent=f"ssh -F {ssh_config}", OMPI_MCA_btl="self,tcp",
                          OMPI_MCA_rtc_hwloc_vmhole="none")
            logins_before = open(log).read().count("Accepted publickey")
            status, output = run_script(["bash", os.path.join(JOB_SCRIPTS, "mpirun", "train.sh")], env, workdir)
            report.check(status == 0, f"mpirun/train.sh over two hosts exits 0 (got {status})")
            report.check("4 ranks on the hosts of" in output, "the script launches the hostfile's 4 slots")
            logins = open(log).read().count("Accepted publickey") - logins_before
            report.check(logins >= len(HOSTS), f"mpirun logged in over ssh for each host ({logins} logins)")
            run = read_run(out)
            report.check(run.get("world_size") == 4, f"run.json world_size {run.get('world_size')} == 4")
            report.check(run.get("nodes") == 2, f"run.json nodes {run.get('nodes')} == 2 (ranks see two hosts)")
            compare_losses(report, "4 ranks on 2 hosts vs 1 rank", read_metrics(out), read_metrics(reference_out), STEPS)
            pipeline_run(report, env, workdir, reference_out)
        finally:
            stop_sshd(pid_file)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# The job scripts' input checks (job_scripts/slurm/train.sbatch, pbs/train.pbs, mpirun/train.sh):
# every missing or wrong ZT_* variable, scheduler variable or hostfile stops the script before
# anything is launched, with exit status 2 and a message naming the variable and the problem.
import os

from system_common import JOB_SCRIPTS, Report, main_guard, parse_args, run_script, temporary_directory

SCRIPTS = {
    "slurm": os.path.join(JOB_SCRIPTS, "slurm", "train.sbatch"),
    "pbs": os.path.join(JOB_SCRIPTS, "pbs", "train.pbs"),
    "mpirun": os.path.join(JOB_SCRIPTS, "mpirun", "train.sh"),
}


def main():
    args = parse_args(__doc__)
    report = Report("job scripts: bad inputs stop them with a message naming the variable")
    zerotune = os.path.abspath(args.zerotune)
    with temporary_directory(args, "zt-inputs-") as workdir:
        model = os.path.join(workdir, "model")
        data = os.path.join(workdir, "data")
        os.makedirs(model)
        os.makedirs(data)
        open(os.path.join(model, "config.json"), "w").close()
        nodefile = os.path.join(workdir, "nodefile")
        with open(nodefile, "w") as stream:
            stream.write("node1\nnode1\n")
        empty_nodefile = os.path.join(workdir, "empty-nodefile")
        open(empty_nodefile, "w").close()
        no_slots = os.path.join(workdir, "no-slots-hostfile")
        with open(no_slots, "w") as stream:
            stream.write("10.0.0.11\n")
        # What each script needs to get past its scheduler checks; the ZT_* run.
        scheduler = {"slurm": {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"},
                     "pbs": {"PBS_NODEFILE": nodefile, "PBS_O_WORKDIR": workdir},
                     "mpirun": {}}
        good = {"ZT_BIN": zerotune, "ZT_MODEL": model, "ZT_DATA": data, "ZT_OUT": os.path.join(workdir, "out")}
        base = {key: value for key, value in os.environ.items() if not key.startswith(("ZT_", "SLURM_", "PBS_"))}

        cases = []  # (script, label, changes (None: unset), words the message must hold)
        for name in SCRIPTS:
            cases += [
                (name, "no ZT_MODEL", {"ZT_MODEL": None}, ["ZT_MODEL is not set"]),
                (name, "ZT_MODEL without config.json", {"ZT_MODEL": data}, ["ZT_MODEL=", "no config.json"]),
                (name, "no ZT_DATA", {"ZT_DATA": None}, ["ZT_DATA is not set"]),
                (name, "ZT_DATA missing", {"ZT_DATA": data + "-missing"}, ["ZT_DATA=", "no such directory"]),
                (name, "no ZT_OUT", {"ZT_OUT": None}, ["ZT_OUT is not set"]),
                (name, "ZT_DS_CONFIG missing", {"ZT_DS_CONFIG": "/nonexistent/ds.json"}, ["ZT_DS_CONFIG=", "no such file"]),
                (name, "ZT_BIN not executable", {"ZT_BIN": "/nonexistent/zerotune"}, ["ZT_BIN=", "no such executable"]),
                (name, "ZT_CPU_BIND unknown", {"ZT_CPU_BIND": "sockets"}, ["ZT_CPU_BIND=", "cores or none"]),
                (name, "ZT_PREFLIGHT unknown", {"ZT_PREFLIGHT": "yes"}, ["ZT_PREFLIGHT=", "1 (run zerotune selftest first) or 0"]),
                (name, "ZT_AUTOTUNE unknown", {"ZT_AUTOTUNE": "yes"}, ["ZT_AUTOTUNE=", "1 (run zerotune autotune first"]),
            ]
        cases += [
            ("slurm", "outside Slurm", {"SLURM_JOB_ID": None}, ["SLURM_JOB_ID is not set", "sbatch"]),
            ("slurm", "ZT_LAUNCHER unknown", {"ZT_LAUNCHER": "ssh"}, ["ZT_LAUNCHER=", "auto, srun or mpirun"]),
            ("pbs", "outside PBS", {"PBS_NODEFILE": None}, ["PBS_NODEFILE is not set", "qsub"]),
            ("pbs", "empty nodefile", {"PBS_NODEFILE": empty_nodefile}, ["PBS_NODEFILE=", "missing or empty"]),
            ("pbs", "bad walltime", {"ZT_WALLTIME": "1 day"}, ["ZT_WALLTIME=", "[[HH:]MM:]SS"]),
            ("mpirun", "hostfile missing", {"ZT_HOSTFILE": "/nonexistent/hosts"}, ["ZT_HOSTFILE=", "no such file"]),
            ("mpirun", "hostfile without slots", {"ZT_HOSTFILE": no_slots}, ["10.0.0.11", "no slots=N"]),
            ("mpirun", "ZT_NP not a number", {"ZT_NP": "four"}, ["ZT_NP=", "positive integer"]),
        ]
        for name, label, changes, words in cases:
            env = dict(base, **scheduler[name], **good)
            for key, value in changes.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            status, output = run_script(["bash", SCRIPTS[name]], env, workdir, timeout_s=60)
            report.check(status == 2, f"{name}: {label}: exit status 2 (got {status})")
            missing = [word for word in words if word not in output]
            report.check(not missing, f"{name}: {label}: the message names the problem"
                         + (f" (missing {missing} in: {output.strip()})" if missing else ""))
            report.check("] + " not in output, f"{name}: {label}: nothing was launched")  # "[script] + command"
        report.check(not os.path.exists(os.path.join(workdir, "out", "metrics.jsonl")), "no run started")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

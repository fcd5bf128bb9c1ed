# `zerotune autotune` on the CPU backend, 2 ranks, with a small --device-memory budget: the
# chosen setting fits and is the fastest measured; a budget nothing fits names the smallest need
# (autotune_check.py; issue 20). And a job script with ZT_AUTOTUNE=1 (job_scripts/mpirun/train.sh
# on this machine, 2 ranks): it autotunes first, then trains with ds_config_optimal.json.
import json
import os
import subprocess

from autotune_check import check_autotune, make_inputs
from mpi_common import REPO, Report, main_guard, parse_args, temporary_directory


def check_job_script(report, zerotune, workdir):
    model, data = make_inputs(zerotune, os.path.join(workdir, "job"))
    out = os.path.join(workdir, "job", "out")
    env = dict(os.environ, ZT_BIN=os.path.abspath(zerotune), ZT_MODEL=model, ZT_DATA=data, ZT_OUT=out,
               ZT_DS_CONFIG=os.path.join(REPO, "data", "tiny-llama", "ds_config.json"), ZT_NP="2",
               ZT_CPU_BIND="none", ZT_PREFLIGHT="0", ZT_MPIRUN_ARGS="--oversubscribe", ZT_AUTOTUNE="1",
               ZT_ARGS="--device cpu --max-steps 2 --seed 3",
               ZT_AUTOTUNE_ARGS="--stages 0,2 --no-offload --max-micro-batch 2 --trial-steps 2", OMP_NUM_THREADS="1")
    result = subprocess.run(["bash", os.path.join(REPO, "job_scripts", "mpirun", "train.sh")], env=env,
                            capture_output=True, text=True, timeout=600)
    report.check(result.returncode == 0, f"job script with ZT_AUTOTUNE=1: exit 0 (got {result.returncode}: "
                                         f"{result.stderr[-1500:]!r})")
    optimal = os.path.join(out, "autotune", "autotuning_results", "ds_config_optimal.json")
    report.check(os.path.exists(optimal), "job script: autotune wrote ds_config_optimal.json")
    run_path = os.path.join(out, "run.json")
    run = json.load(open(run_path)) if os.path.exists(run_path) else {}
    report.check(run.get("deepspeed_config_path") == optimal,
                 f"job script: trained with the optimal JSON (run.json: {run.get('deepspeed_config_path')})")
    with open(os.path.join(out, "autotune", "autotuning_results", "results.json")) as stream:
        best = json.load(stream)["optimal"]
    report.check(run.get("activation_checkpointing") == ("_acT_" in best),
                 f"job script: activation checkpointing as in the optimal setting {best}")
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    report.check(len(metrics) == 2, f"job script: trained 2 steps ({len(metrics)} records)")


def main():
    args = parse_args(__doc__)
    report = Report("zerotune autotune on the CPU backend")
    with temporary_directory(args, "zt-autotune-") as workdir:
        check_autotune(report, args.zerotune, workdir, "cpu", 2)
        check_job_script(report, args.zerotune, workdir)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

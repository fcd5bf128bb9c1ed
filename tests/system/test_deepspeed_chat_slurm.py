# DeepSpeed-Chat step 1 as ONE Slurm submission: `ZT_SCHEDULER=slurm
# job_scripts/deepspeed-chat/step1_sft.sh` on a real single-node Slurm (scripts/setup_slurm.sh, as
# test_slurm_job.py) with a tiny LLaMA and a SentencePiece tokenizer trained on the sample rows
# (spm_train, as the README tour). The script returns at once; then
#  1. three jobs ran in order and COMPLETED: prep (one task), train (job_scripts/slurm/train.sbatch
#     on 2 ranks, started only after prep ended: --dependency=afterok) and export (after train);
#  2. prep wrote the training split and the evaluation split held out of the rows
#     (ZT_EVAL_FRACTION 0.25), and the run evaluated on it before the first step and at the end of
#     the epoch (metrics.jsonl eval records at step 0 and the last step, "ppl: " lines in the log);
#  3. the export is the fp16 run's model in fp16 (safetensors dtype F16, torch_dtype float16);
#  4. a chain whose prep fails (a missing tokenizer) ends with prep FAILED and the later jobs
#     cancelled, not pending forever (--kill-on-invalid-dep).
import json
import os
import re
import struct
import subprocess
import time

from system_common import (REPO, OracleError, Report, free_port, main_guard, parse_args, read_metrics, read_run,
                           require_programs, require_root, run_script, temporary_directory)
from mpi_common import MPI_ENV

ROWS = 40  # of data/rm-static-sample.jsonl: 30 training rows, 10 held out
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def make_model(zerotune, workdir):
    """The tour's tiny LLaMA with a SentencePiece BPE tokenizer of 1000 pieces trained on the rows."""
    model = os.path.join(workdir, "model")
    subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "tour-llama", "config.json"), "--out",
                    model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    rows = os.path.join(workdir, "rows.jsonl")
    corpus = os.path.join(workdir, "corpus.txt")
    with open(os.path.join(REPO, "data", "rm-static-sample.jsonl")) as stream:
        lines = stream.readlines()
    with open(rows, "w") as out:
        out.writelines(lines[:ROWS])
    with open(corpus, "w") as out:
        for line in lines:
            row = json.loads(line)
            out.write(row["prompt"] + row["chosen"] + "\n" + row["rejected"] + "\n")
    subprocess.run(["spm_train", f"--input={corpus}", f"--model_prefix={model}/tokenizer", "--vocab_size=1000",
                    "--model_type=bpe", "--byte_fallback=true", "--split_digits=true",
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                    "--allow_whitespace_only_pieces=true", "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=3",
                    "--minloglevel=2"], check=True)
    return model, rows


def job_fields(job_id, env):
    result = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=30)
    if result.returncode != 0:
        raise OracleError(f"scontrol show job {job_id}: {result.stderr.strip()}")
    return dict(re.findall(r"(\w+)=(\S*)", result.stdout))


def wait_until_final(job_ids, env, timeout_s):
    """{job id: scontrol fields} once every job is in a final state."""
    deadline = time.monotonic() + timeout_s
    while True:
        fields = {job: job_fields(job, env) for job in job_ids}
        if all(f.get("JobState") in FINAL_STATES for f in fields.values()):
            return fields
        if time.monotonic() > deadline:
            raise OracleError("jobs not finished in time: " +
                              ", ".join(f"{job} {f.get('JobState')} ({f.get('Reason')})" for job, f in fields.items()))
        time.sleep(0.5)


def submitted_jobs(output):
    """{"prep": id, "training": id, "export": id} from the script's "submitted the ... job N" lines."""
    return {name: job for name, job in re.findall(r"submitted the (\w+) job (\d+)", output)}


def safetensors_dtypes(path):
    with open(path, "rb") as stream:
        size = struct.unpack("<Q", stream.read(8))[0]
        header = json.loads(stream.read(size))
    return {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}


def step1_chain(report, zerotune, workdir, env):
    status, output = run_script(["bash", os.path.join(REPO, "job_scripts", "deepspeed-chat", "step1_sft.sh")], env,
                                workdir, timeout_s=60)
    report.check(status == 0, f"step1_sft.sh with ZT_SCHEDULER=slurm submits and exits 0 (got {status})")
    jobs = submitted_jobs(output)
    if set(jobs) != {"prep", "training", "export"}:
        raise OracleError(f"the script did not name three submitted jobs (prep, training, export): {jobs}")
    fields = wait_until_final(list(jobs.values()), env, 240)
    work = env["ZT_WORK"]
    for name in ("prep", "train", "export"):
        for log in sorted(os.listdir(os.path.join(work, "slurm"))):
            if log.startswith(name + "-") and log.endswith(".out"):
                print(f"---- {log} ----\n" + open(os.path.join(work, "slurm", log)).read() + "----")
    for name, job in jobs.items():
        report.check(fields[job].get("JobState") == "COMPLETED" and fields[job].get("ExitCode") == "0:0",
                     f"the {name} job {job} COMPLETED with ExitCode 0:0 (got {fields[job].get('JobState')}, "
                     f"{fields[job].get('ExitCode')})")
    ends = {name: fields[job].get("EndTime", "") for name, job in jobs.items()}
    starts = {name: fields[job].get("StartTime", "") for name, job in jobs.items()}
    report.check(starts["training"] >= ends["prep"] and starts["export"] >= ends["training"],
                 f"each job started after the one before ended (prep ended {ends['prep']}, training started "
                 f"{starts['training']}, ended {ends['training']}, export started {starts['export']})")
    return work


def check_results(report, work):
    data = sorted(os.listdir(os.path.join(work, "data")))
    report.check(any(n.startswith("train-") for n in data) and any(n.startswith("eval-") for n in data),
                 f"prep (inside the chain) wrote the train and eval splits ({data})")
    run = os.path.join(work, "run")
    report.check(read_run(run).get("world_size") == 2, "the training job ran 2 ranks")
    steps = read_metrics(run)
    with open(os.path.join(run, "metrics.jsonl")) as stream:
        evals = [json.loads(line) for line in stream if '"eval_loss"' in line]
    last = steps[-1]["step"] if steps else -1
    report.check([r["step"] for r in evals] == [0, last],
                 f"evaluation before training and at the end of the epoch (eval records at steps "
                 f"{[r['step'] for r in evals]}, last step {last})")
    for record in evals:
        report.check(abs(record["eval_ppl"] - 2.718281828459045 ** record["eval_loss"]) < 1e-6 * record["eval_ppl"],
                     f"step {record['step']}: eval_ppl {record['eval_ppl']:.3f} = exp(eval_loss {record['eval_loss']:.5f})")
    logs = [os.path.join(work, "slurm", n) for n in os.listdir(os.path.join(work, "slurm")) if n.startswith("train-")]
    log = "".join(open(path).read() for path in logs)
    report.check(len(re.findall(r"\| ppl: [0-9.]+, loss: [0-9.]+", log)) == 2,
                 "the training log prints 'ppl: P, loss: L' twice (before training, after the epoch)")
    export = os.path.join(work, "export")
    weights = os.path.join(export, "model.safetensors")
    report.check(os.path.exists(weights) and safetensors_dtypes(weights) == {"F16"},
                 f"the export of the fp16 run is fp16 ({safetensors_dtypes(weights) if os.path.exists(weights) else 'none'})")
    config = json.load(open(os.path.join(export, "config.json"))) if os.path.exists(weights) else {}
    report.check(config.get("torch_dtype") == "float16", f"config.json torch_dtype float16 ({config.get('torch_dtype')})")


def failed_prep_cancels_chain(report, workdir, env):
    env = dict(env, ZT_WORK=os.path.join(workdir, "work-bad"), ZT_MODEL=os.path.join(workdir, "model-no-tokenizer"))
    os.makedirs(env["ZT_MODEL"], exist_ok=True)
    with open(os.path.join(workdir, "model", "config.json")) as src, open(os.path.join(env["ZT_MODEL"], "config.json"), "w") as dst:
        dst.write(src.read())
    status, output = run_script(["bash", os.path.join(REPO, "job_scripts", "deepspeed-chat", "step1_sft.sh")], env,
                                workdir, timeout_s=60)
    jobs = submitted_jobs(output)
    if status != 0 or set(jobs) != {"prep", "training", "export"}:
        raise OracleError(f"the failing chain was not submitted (status {status}, jobs {jobs})")
    fields = wait_until_final(list(jobs.values()), env, 120)
    states = {name: fields[job].get("JobState") for name, job in jobs.items()}
    report.check(states == {"prep": "FAILED", "training": "CANCELLED", "export": "CANCELLED"},
                 f"a failed prep cancels the training and export jobs ({states})")


def main():
    args = parse_args(__doc__)
    report = Report("DeepSpeed-Chat step 1 on Slurm: one submission (prep -> train -> export), eval ppl, fp16 export")
    require_root("slurmd starts jobs as their user")
    require_programs(["slurmctld", "slurmd", "sbatch", "scontrol", "srun"], "slurm-wlm")
    require_programs(["mpirun"], "openmpi-bin")
    require_programs(["spm_train"], "sentencepiece")
    zerotune = os.path.abspath(args.zerotune)
    with temporary_directory(args, "zt-step1-slurm-") as workdir:
        model, rows = make_model(zerotune, workdir)
        ds_config = os.path.join(workdir, "ds16.json")
        with open(ds_config, "w") as out:  # fp16 as DeepSpeed-Chat's step 1; a small first loss scale: no skipped steps
            json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1,
                       "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
                       "fp16": {"enabled": True, "initial_scale_power": 4},
                       "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95]}}}, out)
        slurm_dir = os.path.join(workdir, "slurm")
        setup = os.path.join(REPO, "scripts", "setup_slurm.sh")
        ports = {"ZT_SLURMCTLD_PORT": str(free_port()), "ZT_SLURMD_PORT": str(free_port())}
        env = dict(os.environ, **MPI_ENV, SLURM_CONF=os.path.join(slurm_dir, "slurm.conf"), ZT_SCHEDULER="slurm",
                   ZT_BIN=zerotune, ZT_MODEL=model, ZT_RM_STATIC=rows, ZT_EVAL_FRACTION="0.25",
                   ZT_WORK=os.path.join(workdir, "work"), ZT_DS_CONFIG=ds_config, ZT_MAX_SEQ_LEN="256",
                   ZT_ARGS="--epochs 1 --seed 3", ZT_PREFLIGHT="0",
                   ZT_SBATCH_ARGS="--gpus-per-node=0 --ntasks-per-node=2 --cpus-per-task=1 --time=10",
                   ZT_SBATCH_PREP_ARGS="--cpus-per-task=1 --time=10")
        try:
            subprocess.run(["bash", setup, "start", slurm_dir], env=dict(os.environ, **ports), check=True, timeout=120)
            check_results(report, step1_chain(report, zerotune, workdir, env))
            failed_prep_cancels_chain(report, workdir, env)
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

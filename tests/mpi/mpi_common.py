# Shared helpers of the MPI tests (tests/mpi/test_*.py): running `zerotune train` under
# mpiexec with W ranks, and the tiny model + data they train on. Reuses the oracle's Report
# and metrics readers (tests/oracle/oracle_common.py), so these tests never skip either.
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from oracle_common import (OracleError, Report, main_guard, parse_args, read_metrics,  # noqa: E402,F401
                           temporary_directory)
import safetensors.torch  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
           # oversubscribed ranks on 2 cores: no busy-wait in Open MPI's progress loop
           "OMPI_MCA_mpi_yield_when_idle": "1"}


def mpiexec(ranks, command):
    return ["mpiexec", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + [str(c) for c in command]


def run_ranks(ranks, command, timeout_s=300, expect_ok=True):
    """Runs `command` on `ranks` MPI ranks; returns (result, seconds)."""
    full = mpiexec(ranks, command)
    print("mpi: running " + " ".join(full), flush=True)
    env = dict(os.environ, **MPI_ENV)
    start = time.monotonic()
    result = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout_s, env=env)
    seconds = time.monotonic() - start
    if expect_ok and result.returncode != 0:
        print(f"---- stdout ----\n{result.stdout}\n---- stderr ----\n{result.stderr}\n----------------", file=sys.stderr)
        raise OracleError(f"exit status {result.returncode}: {' '.join(full)}")
    return result, seconds


def make_model_and_data(zerotune, workdir, samples=64, seed=0):
    """A tiny random LLaMA (data/tiny-llama/config.json) and a token-shard split for it."""
    model = os.path.join(workdir, "model")
    data = os.path.join(workdir, "data")
    subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"), "--out",
                    model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                    "--samples", str(samples), "--vocab", "256", "--min-len", "16", "--max-len", "48", "--seed",
                    str(seed)], check=True, stdout=subprocess.DEVNULL)
    return model, data


def write_ds_config(path, train_batch_size, micro_batch, zero):
    """DeepSpeed JSON: the tour's optimizer and schedule, a fixed global batch, `zero`."""
    with open(os.path.join(REPO, "data", "tiny-llama", "ds_config.json")) as stream:
        config = json.load(stream)
    config.pop("gradient_accumulation_steps", None)
    config["train_batch_size"] = train_batch_size
    config["train_micro_batch_size_per_gpu"] = micro_batch
    config["zero_optimization"] = zero
    with open(path, "w") as stream:
        json.dump(config, stream, indent=1)
    return path


def load_weights(path):
    if not os.path.exists(path):
        raise OracleError(f"zerotune did not write {path}")
    return safetensors.torch.load_file(path)


def read_run(out_dir):
    with open(os.path.join(out_dir, "run.json")) as stream:
        return json.load(stream)

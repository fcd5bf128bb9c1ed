# Shared helpers of the MPI tests (tests/mpi/test_*.py): running `zerotune train` under
# mpiexec with W ranks, the tiny models + data they train on, and final-weight comparisons.
# Reuses the oracle's Report, metrics readers and family models (tests/oracle/oracle_common.py),
# so these tests never skip either.
import json
import os
import subprocess
import tempfile
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from oracle_common import (OracleError, Report, main_guard, parse_args, read_metrics,  # noqa: E402,F401
                           temporary_directory)
import oracle_common  # noqa: E402
import safetensors.torch  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
           # oversubscribed ranks on 2 cores: no busy-wait in Open MPI's progress loop
           "OMPI_MCA_mpi_yield_when_idle": "1"}


def mpiexec(ranks, command):
    return ["mpiexec", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + [str(c) for c in command]


def rank_records(report, label, world, binary, arguments, timeout_s):
    """Runs a C++ rank driver (`binary OUT_DIR arguments...`) on `world` ranks; each rank writes
    OUT_DIR/rank<r>.json. Returns the ranks' records, or None after reporting a failed run."""
    with tempfile.TemporaryDirectory() as out:
        command = mpiexec(world, [binary, out] + list(arguments))
        result = subprocess.run(command, env=dict(os.environ, **MPI_ENV), capture_output=True, text=True,
                                timeout=timeout_s)
        report.check(result.returncode == 0, f"{label}: exit {result.returncode} {result.stderr[-600:]}")
        if result.returncode:
            return None
        records = []
        for r in range(world):
            with open(os.path.join(out, f"rank{r}.json")) as stream:
                records.append(json.load(stream))
        return records


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


# The models the MPI tests train (make_model_and_data's `model`): "llama" is the untied tiny LLaMA
# of data/tiny-llama (`zerotune init`, vocabulary 256); the others are rows of the oracle's family
# cases (oracle_common.FAMILY_CASES: tiny random models saved by transformers, whose step 0
# tests/oracle/test_family_parity.py checks against HF), by label: "opt" (tied head, learned
# positions, LayerNorm with biases, dropout 0), "llama_tied" (tie_word_embeddings),
# "opt_350m_shape" (word_embed_proj_dim < hidden_size: project_in/out; post-LN, no final
# LayerNorm; tied head).
FAMILY_MODELS = ("opt", "llama_tied", "opt_350m_shape")


def make_family_model(label, model_dir, seed=11, **overrides):
    """Writes the family case `label` (a tiny random HF model in fp32; `overrides` of its config,
    e.g. num_hidden_layers) to model_dir and returns its transformers config."""
    return oracle_common.make_family_model(model_dir, seed, *oracle_common.family_case(label, **overrides))


def make_model_and_data(zerotune, workdir, samples=64, seed=0, model="llama", config=None, tag="", overrides=None):
    """A tiny random model (`model`: "llama" or one of FAMILY_MODELS) in workdir/model{tag} and a
    token-shard split for its vocabulary in workdir/data{tag}. `config`: another LLaMA config.json
    than tiny-llama's (vocabulary 256); `overrides`: of a family model's config."""
    model_dir = os.path.join(workdir, "model" + tag)
    data = os.path.join(workdir, "data" + tag)
    if model == "llama":
        config = config or os.path.join(REPO, "data", "tiny-llama", "config.json")
        subprocess.run([zerotune, "init", "--config", config, "--out", model_dir, "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        vocab = 256
    else:
        vocab = make_family_model(model, model_dir, **(overrides or {})).vocab_size
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                    "--samples", str(samples), "--vocab", str(vocab), "--min-len", "16", "--max-len", "48", "--seed",
                    str(seed)], check=True, stdout=subprocess.DEVNULL)
    return model_dir, data


def hf_config(model_dir):
    """The model's config as transformers reads it (its defaults applied: OPT's tied head)."""
    return oracle_common.transformers.AutoConfig.from_pretrained(model_dir)


def write_ds_config(path, train_batch_size, micro_batch, zero, optimizer=None):
    """DeepSpeed JSON: the tour's optimizer (or `optimizer`) and schedule, a fixed global batch,
    `zero`."""
    with open(os.path.join(REPO, "data", "tiny-llama", "ds_config.json")) as stream:
        config = json.load(stream)
    if optimizer:
        config["optimizer"] = optimizer
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


def gradient_free(name):
    """OPT's key-projection biases. Without RoPE such a bias adds the same amount to every score
    of a query row, which softmax ignores: its true gradient is exactly 0, and zerotune's is fp32
    rounding of a sum that cancels (~1e-9; tests/oracle/test_family_parity.py bounds it at step 0).
    Adam normalises that noise into moves of up to ~lr per step, different for every summation
    order (world size, stage, bucket), so no tolerance of float reassociation applies to them."""
    return name.startswith("model.decoder.layers.") and name.endswith(".self_attn.k_proj.bias")


def check_weights(report, label, weights, reference, atol, metrics):
    """Final weights (name -> tensor) against the reference's: the same tensors, each within atol
    (0: bit-identical). With atol > 0 a gradient-free tensor (see gradient_free) is only held to
    Adam's largest move: both runs' moves of up to lr per step, 2 x the sum of the steps' lr
    (`metrics`: the run's records)."""
    report.check(sorted(weights) == sorted(reference), f"{label}: same trainable tensors")
    free = sorted(name for name in reference if atol > 0 and gradient_free(name))
    compared = [name for name in reference if name not in free and name in weights]
    worst = max(float((weights[name] - reference[name]).abs().max()) for name in compared)
    report.check(worst <= atol, f"{label}: final weights max abs diff {worst:.2e} <= {atol:.0e}")
    if free:
        check_gradient_free(report, label, weights, reference, free, metrics)


def check_gradient_free(report, label, weights, reference, free, metrics):
    """The gradient-free tensors `free` (see gradient_free) within Adam's largest move: both runs'
    moves of up to lr per step, 2 x the sum of the steps' lr (`metrics`: the run's records)."""
    bound = 2.0 * sum(record["lr"] for record in metrics)
    moved = max(float((weights[name] - reference[name]).abs().max()) for name in free if name in weights)
    report.check(moved <= bound, f"{label}: the {len(free)} gradient-free OPT k_proj biases differ by {moved:.2e} "
                 f"<= 2 x the sum of the learning rates {bound:.1e}")


def check_weights_by_moves(report, label, weights, reference, initial, rtol, metrics):
    """Final weights against the reference's for a ReLU model (OPT), measured against how far training
    moved each tensor: ||w - ref|| / ||ref - initial|| <= rtol. Two runs that differ only in
    summation order (world size, stage, buckets) can put one ReLU input on the other side of zero;
    that token's term then leaves one neuron's gradient, every upstream gradient changes by a part of
    it, and Adam turns the difference into moves of ~1e-5 everywhere (measured: about 2e-4 of each
    tensor's move; one flipped fc1 row 4.5e-5, 20x an elementwise 2e-6). A state restored wrongly
    (a master or Adam slice, the step count) is off by O(lr) per step, i.e. O(1) of the move, so rtol
    1e-2 keeps a 50x margin both ways. Gradient-free tensors keep check_weights' Adam bound."""
    report.check(sorted(weights) == sorted(reference), f"{label}: same trainable tensors")
    compared = [name for name in reference if not gradient_free(name) and name in weights]
    relative = {name: float((weights[name] - reference[name]).float().norm() /
                            (reference[name] - initial[name]).float().norm()) for name in compared}
    name = max(relative, key=relative.get)
    report.check(relative[name] <= rtol, f"{label}: final weights within {rtol:.0e} of each tensor's move "
                 f"(worst {name}: {relative[name]:.2e})")
    free = [name for name in reference if gradient_free(name)]
    if free:
        check_gradient_free(report, label, weights, reference, free, metrics)


def read_run(out_dir):
    with open(os.path.join(out_dir, "run.json")) as stream:
        return json.load(stream)

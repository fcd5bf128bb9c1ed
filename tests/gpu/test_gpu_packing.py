# GPU (label gpu; on the emulated device label gpu-emu): --packing (issue 18) on
# `zerotune train --device cuda` for every model family on tiny random models made by
# `zerotune init`: llama (GQA), mistral, qwen2 (q/k/v biases, tied head) and pre-LN OPT (learned
# positions, residual dropout 0.1: a packed token keeps its row id, so its dropout mask). One
# step of 2 micro-batches of 4 samples each, fp32: the step-0 loss and every gradient
# (--dump-step0) of the packed run equal the unpacked run's within 1e-5 of each tensor's largest
# magnitude (the CUDA kernels' packed attention and RoPE, confined to each sample, against
# their unpacked selves). Without a GPU every check fails with zerotune's message (never skips).
# The memory of --packing under cuDNN (issue 29, check_packed_memory): 4 samples of 70..128
# tokens, each its own row, three ending in padding, make cuDNN's ragged graph 7 sequences,
# bucketed to B' = 8: twice the rows counted one sample per row (estimate without --packing, what
# the model counted before), which the step's measured peak exceeds (on the emulated device; a
# real engine's dS is its own); run.json's prediction holds it (on the emulated device within
# 0.1%: the unpacked run's own residual, not the attention's; on a GPU not less than measured);
# and a device limit between the two counts stops the packed run before its first step, naming
# --packing and the attention workspace.
import json
import os
import subprocess
import sys

from mpi_common_path import add_mpi_path, worst_relative_error  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, load_weights, main_guard, parse_args, run_ranks, temporary_directory,
                        write_ds_config)
from device_sizing import EMULATED
from make_token_shard import random_samples, write_shard

VOCAB = 256
COMMON = {"vocab_size": VOCAB, "num_hidden_layers": 2, "max_position_embeddings": 64, "bos_token_id": 1,
          "eos_token_id": 2, "pad_token_id": 0, "hidden_size": 64, "num_attention_heads": 4}
MODELS = {
    "llama": dict(COMMON, model_type="llama", intermediate_size=96, num_key_value_heads=2, initializer_range=0.1),
    "mistral": dict(COMMON, model_type="mistral", intermediate_size=96, num_key_value_heads=2, sliding_window=64,
                    initializer_range=0.1),
    "qwen2": dict(COMMON, model_type="qwen2", intermediate_size=96, num_key_value_heads=2, tie_word_embeddings=True,
                  initializer_range=0.1),
    "opt": dict(COMMON, model_type="opt", ffn_dim=96, dropout=0.1, init_std=0.1),
}
BOUND = 1e-5


def check_packed_memory(report, zerotune, workdir):
    """cuDNN's packed graph is counted (bf16: cuDNN's attention) and a run that cannot hold it stops."""
    config_path = os.path.join(workdir, "long-config.json")
    with open(config_path, "w") as stream:
        json.dump(dict(MODELS["llama"], max_position_embeddings=128), stream)
    model, data = os.path.join(workdir, "long-llama"), os.path.join(workdir, "long-data")
    subprocess.run([zerotune, "init", "--config", config_path, "--out", model, "--seed", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    os.makedirs(data)
    samples = [random_samples(1, VOCAB, length, length, seed)[0] for seed, length in enumerate((128, 100, 80, 70))]
    write_shard(os.path.join(data, "train-00000.h5"), samples, vocab_size=VOCAB)
    ds = os.path.join(workdir, "long-ds.json")
    with open(ds, "w") as stream:
        json.dump({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
                   "zero_optimization": {"stage": 0}}, stream)
    # One process each, without mpiexec (its start-up would be most of this check's time).
    estimate = subprocess.run([zerotune, "estimate", "--model", model, "--data", data, "--deepspeed", ds, "--device",
                               "cuda", "--json"], check=True, stdout=subprocess.PIPE, text=True)
    one_per_row = json.loads(estimate.stdout)["rows"][0]["zerotune_run"]["device_peak_bytes"]
    out = os.path.join(workdir, "long-packed")
    train = [zerotune, "train", "--model", model, "--data", data, "--deepspeed", ds, "--device", "cuda", "--seed", "4",
             "--max-steps", "1", "--no-save-at-end", "--packing"]
    subprocess.run(train + ["--out", out], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "run.json")) as stream:
        predicted = json.load(stream)["memory_predicted"]["device_peak_bytes"]
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        measured = json.loads(stream.readline())["mem_device_peak"]
    # The emulated cuDNN's dS is the frontend's own estimate; a real engine's is its own (issue 31: hold on a GPU).
    if EMULATED:
        report.check(measured > one_per_row, f"packed step's peak {measured} B exceeds the one-sample-per-row count "
                     f"{one_per_row} B")
    close = abs(predicted - measured) <= 0.001 * measured if EMULATED else predicted >= measured
    report.check(close, f"packed step's peak {measured} B vs predicted {predicted} B")
    limit = (one_per_row + predicted) // 2
    refused = os.path.join(workdir, "long-refused")
    result = subprocess.run(train + ["--out", refused, "--device-memory-limit", str(limit)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    expected = ("--packing: ", " of it is the attention workspace, cuDNN's packed attention graph counted at up to 8 "
                "sequences x 128 tokens per micro-batch (4 samples of 70 to 128 tokens")
    said = result.stderr[result.stderr.find("this run needs"):][:700]
    report.check(result.returncode != 0 and all(text in result.stderr for text in expected),
                 f"--device-memory-limit {limit}: refused naming --packing: {said!r}")
    report.check(not os.path.exists(os.path.join(refused, "metrics.jsonl")), "refused before the first step")


def main():
    args = parse_args(__doc__)
    report = Report("--packing on the CUDA backend: packed step 0 equals unpacked for every family")
    with temporary_directory(args, "zt-gpu-packing-") as workdir:
        data = os.path.join(workdir, "data")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                        "--samples", "16", "--vocab", str(VOCAB), "--min-len", "6", "--max-len", "40", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        ds = write_ds_config(os.path.join(workdir, "ds.json"), 8, 4, {"stage": 0})
        for name, config in MODELS.items():
            try:
                config_path = os.path.join(workdir, name + "-config.json")
                with open(config_path, "w") as stream:
                    json.dump(config, stream)
                model = os.path.join(workdir, name)
                subprocess.run([args.zerotune, "init", "--config", config_path, "--out", model, "--seed", "2"],
                               check=True, stdout=subprocess.DEVNULL)
                dumps = {}
                for label, extra in (("unpacked", []), ("packed", ["--packing"])):
                    path = os.path.join(workdir, f"{name}-{label}.safetensors")
                    run_ranks(1, [args.zerotune, "train", "--model", model, "--data", data, "--out",
                                  os.path.join(workdir, f"{name}-{label}"), "--deepspeed", ds, "--seed", 4, "--device",
                                  "cuda", "--max-steps", 1, "--dump-step0", path] + extra)
                    dumps[label] = load_weights(path)
                packed, unpacked = dumps["packed"], dumps["unpacked"]
                # The logits are laid out by rows, which packing changes; the loss and gradients are not.
                report.check(sorted(packed) == sorted(unpacked) and len(packed) > 3,
                             f"[{name}] the same {len(packed)} tensors in both dumps")
                loss, reference = float(packed["loss"]), float(unpacked["loss"])
                report.check(abs(loss - reference) <= BOUND * abs(reference),
                             f"[{name}] step-0 loss packed {loss:.7f} vs unpacked {reference:.7f}")
                skip = ["logits"] + [key for key in unpacked if name == "opt" and key.endswith("k_proj.bias")]
                worst_name, worst = worst_relative_error(packed, unpacked, skip)
                report.check(worst <= BOUND, f"[{name}] every gradient packed vs unpacked within {BOUND:.0e} of its "
                             f"largest magnitude (worst {worst:.2e} in {worst_name})")
            except Exception as error:  # noqa: BLE001 - reported; the next family still runs
                report.fail(f"[{name}] {type(error).__name__}: {error}")
        try:
            check_packed_memory(report, args.zerotune, workdir)
        except Exception as error:  # noqa: BLE001 - reported
            report.fail(f"[packed memory] {type(error).__name__}: {error}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

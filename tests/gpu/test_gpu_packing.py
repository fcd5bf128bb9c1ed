# GPU (label gpu; on the emulated device label gpu-emu): --packing (issue 18) on
# `zerotune train --device cuda` for every model family on tiny random models made by
# `zerotune init`: llama (GQA), mistral, qwen2 (q/k/v biases, tied head) and pre-LN OPT (learned
# positions, residual dropout 0.1: a packed token keeps its row id, so its dropout mask). One
# step of 2 micro-batches of 4 samples each, fp32: the step-0 loss and every gradient
# (--dump-step0) of the packed run equal the unpacked run's within 1e-5 of each tensor's largest
# magnitude (the CUDA kernels' packed attention and RoPE, confined to each sample, against
# their unpacked selves). Without a GPU every check fails with zerotune's message (never skips).
import json
import os
import subprocess
import sys

from mpi_common_path import add_mpi_path, worst_relative_error  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, load_weights, main_guard, parse_args, run_ranks, temporary_directory,
                        write_ds_config)

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
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

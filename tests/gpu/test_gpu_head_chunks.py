# GPU (label gpu; on the emulated device label gpu-emu): the chunked LM head + cross-entropy
# (issue 18, `--head-chunk-rows`) on `zerotune train --device cuda`, on tiny random models made
# by `zerotune init`: an untied LLaMA, a tied Qwen2 and pre-LN OPT (tied head, residual dropout).
# One step of 2 micro-batches, fp32 and bf16: chunks of 5 rows (the last one shorter) and the
# automatic size give the step-0 loss, logits and every gradient (--dump-step0) of one chunk
# over all rows (the unchunked computation) within 1e-5 (fp32) / 1e-2 (bf16) of each tensor's
# largest magnitude. Without a GPU every check fails with zerotune's message (never skips).
import json
import os
import subprocess
import sys

from mpi_common_path import add_mpi_path, worst_relative_error  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import (REPO, Report, load_weights, main_guard, parse_args, run_ranks, temporary_directory,
                        write_ds_config)

VOCAB = 512
COMMON = {"vocab_size": VOCAB, "num_hidden_layers": 2, "max_position_embeddings": 64, "bos_token_id": 1,
          "eos_token_id": 2, "pad_token_id": 0, "hidden_size": 64, "num_attention_heads": 4}
MODELS = {
    "llama": dict(COMMON, model_type="llama", intermediate_size=96, num_key_value_heads=2, initializer_range=0.1),
    "qwen2": dict(COMMON, model_type="qwen2", intermediate_size=96, num_key_value_heads=2, tie_word_embeddings=True,
                  initializer_range=0.1),
    "opt": dict(COMMON, model_type="opt", ffn_dim=96, dropout=0.1, init_std=0.1),
}


def main():
    args = parse_args(__doc__)
    report = Report("chunked LM head + cross-entropy on the CUDA backend equals one chunk")
    with temporary_directory(args, "zt-gpu-head-chunks-") as workdir:
        data = os.path.join(workdir, "data")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                        "--samples", "16", "--vocab", str(VOCAB), "--min-len", "6", "--max-len", "30", "--seed", "6"],
                       check=True, stdout=subprocess.DEVNULL)
        for name, config in MODELS.items():
            config_path = os.path.join(workdir, name + "-config.json")
            with open(config_path, "w") as stream:
                json.dump(config, stream)
            model = os.path.join(workdir, name)
            subprocess.run([args.zerotune, "init", "--config", config_path, "--out", model, "--seed", "2"], check=True,
                           stdout=subprocess.DEVNULL)
            for dtype, bound in (("fp32", 1e-5), ("bf16", 1e-2)):
                try:
                    ds = write_ds_config(os.path.join(workdir, f"ds-{dtype}.json"), 8, 4, {"stage": 0})
                    if dtype == "bf16":
                        with open(ds) as stream:
                            section = json.load(stream)
                        section["bf16"] = {"enabled": True}
                        with open(ds, "w") as stream:
                            json.dump(section, stream)
                    dumps = {}
                    for label, rows in (("one chunk", 100000), ("chunks of 5", 5), ("automatic", 0)):
                        path = os.path.join(workdir, f"{name}-{dtype}-{rows}.safetensors")
                        run_ranks(1, [args.zerotune, "train", "--model", model, "--data", data, "--out",
                                      os.path.join(workdir, f"{name}-{dtype}-{rows}"), "--deepspeed", ds, "--seed", 4,
                                      "--device", "cuda", "--max-steps", 1, "--dump-step0", path, "--head-chunk-rows",
                                      rows])
                        dumps[label] = load_weights(path)
                    reference = dumps["one chunk"]
                    for label in ("chunks of 5", "automatic"):
                        got = dumps[label]
                        report.check(sorted(got) == sorted(reference) and "logits" in got,
                                     f"[{name} {dtype} {label}] the same {len(got)} tensors, logits included")
                        skip = [key for key in reference if name == "opt" and key.endswith("k_proj.bias")]
                        worst_name, worst = worst_relative_error(got, reference, skip)
                        report.check(worst <= bound, f"[{name} {dtype} {label}] loss, logits and gradients within "
                                     f"{bound:.0e} of one chunk's (worst {worst:.2e} in {worst_name})")
                except Exception as error:  # noqa: BLE001 - reported; the next case still runs
                    report.fail(f"[{name} {dtype}] {type(error).__name__}: {error}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

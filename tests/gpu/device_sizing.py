# Test models sized from the device the GPU tests run on. Memory claims (a discard gives memory
# back, 16-bit gradients halve the store, LOMO holds no full gradient buffer) are measured in the
# device's virtual-memory chunks: the emulator's 64 KiB by default (ZT_EMU_VMM_GRANULARITY), a
# GPU's 2 MiB (cuMemGetAllocationGranularity). The tests' models were made to be many chunks of
# 64 KiB; on a device with larger chunks they are widened so that each unit spans as many chunks
# as on the emulator. The granularity is read from the device (run.json's device_memory, written
# by `zerotune train`), never assumed.
import json
import math
import os
import subprocess
import sys

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import REPO, read_run, run_ranks, write_ds_config

MADE_FOR_GRANULARITY = 64 * 1024  # the chunk the tests' models and bounds were made for
# On the emulated device (tests/CMakeLists.txt runs the gpu-emu tests with ZT_EMU_SCHEDULE set):
# checks that need its knobs (ZT_EMU_NCCL_VERSION) or its arena-exact cudaMemGetInfo run only there,
# and say so elsewhere.
EMULATED = "ZT_EMU_SCHEDULE" in os.environ


def device_granularity(zerotune, workdir):
    """The CUDA backend's discard granularity in bytes: one 1-step run of tiny-llama on the device."""
    probe = os.path.join(workdir, "granularity-probe")
    model = probe + "-model"
    subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"), "--out",
                    model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    data = probe + "-data"
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                    "--samples", "2", "--vocab", "256", "--min-len", "8", "--max-len", "8", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    ds = write_ds_config(probe + ".json", 2, 2, {"stage": 0})
    run_ranks(1, [zerotune, "train", "--model", model, "--data", data, "--out", probe, "--deepspeed", ds,
                  "--max-steps", 1, "--device", "cuda", "--no-save-at-end"])
    granularity = read_run(probe)["device_memory"]["discard_granularity_bytes"]
    print(f"device: discard granularity {granularity} B (the tests' models were made for {MADE_FOR_GRANULARITY} B)")
    return granularity


def width_factor(granularity):
    """How many times wider a model made for 64 KiB chunks must be (its blocks' bytes grow with the
    square of the width): 1 on the emulator's default, 6 for a GPU's 2 MiB."""
    if granularity <= MADE_FOR_GRANULARITY:
        return 1
    return math.ceil(math.sqrt(granularity / MADE_FOR_GRANULARITY))


def widened_config(base_config, factor, out_path, layers=None):
    """`base_config` (an HF LLaMA config.json) `factor` times wider: hidden, intermediate and head
    counts scale, the head dimension stays (the attention kernels' tiles bound it); `layers`: that
    many blocks instead of the base's. Returns out_path."""
    with open(base_config) as stream:
        config = json.load(stream)
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"):
        config[key] *= factor
    if layers is not None:
        config["num_hidden_layers"] = layers
    with open(out_path, "w") as stream:
        json.dump(config, stream, indent=1)
    return out_path

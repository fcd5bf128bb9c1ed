#!/usr/bin/env python3
# Oracle: models written by `zerotune init` (our safetensors writer, HF layout, sharding) load in
# transformers' LlamaForCausalLM with nothing missing, hold exactly the bytes the files hold, run
# a forward pass, and shard by transformers' rule (shard_checkpoint, as save_pretrained does).
# Run: ZT_PYTHON tests/oracle/test_safetensors_interop.py --zerotune build/zerotune
import argparse
import collections
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import LlamaForCausalLM
from transformers.modeling_utils import shard_checkpoint

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "pad_token_id": 0,
    "torch_dtype": "float32",
}


def run_init(zerotune, config_path, out_dir, *extra):
    command = [zerotune, "init", "--config", config_path, "--out", out_dir, *extra]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert out_dir in result.stdout, f"the summary line does not name the output: {result.stdout!r}"
    return result.stdout


def load_checked(model_dir, dtype):
    model, info = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, output_loading_info=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info[kind], f"{model_dir}: transformers reports {kind}: {info[kind]}"
    return model


def files_content(model_dir):
    """Every tensor of the model's safetensors files, read by the safetensors library."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    tensors = {}
    for shard in shards:
        path = os.path.join(model_dir, shard)
        with safe_open(path, framework="pt") as f:
            assert f.metadata() == {"format": "pt"}, f"{path}: metadata {f.metadata()}"
        tensors.update(load_file(path))
    return tensors


def tensors_in_file_order(model_dir):
    """Tensor names in the order of the data: shard by shard, by data offset within a shard
    (read from the raw header, as the format defines it)."""
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    names = []
    for shard in shards:
        with open(os.path.join(model_dir, shard), "rb") as f:
            header_length = struct.unpack("<Q", f.read(8))[0]
            assert header_length % 8 == 0, f"{shard}: header length {header_length} is not a multiple of 8"
            header = json.loads(f.read(header_length))
        header.pop("__metadata__", None)
        names += sorted(header, key=lambda name: header[name]["data_offsets"][0])
    return names


def check_fp32_model(zerotune, work):
    config_path = os.path.join(work, "tiny_config.json")
    with open(config_path, "w") as f:
        json.dump(TINY_LLAMA, f, indent=1)
    model_dir = os.path.join(work, "fp32")
    run_init(zerotune, config_path, model_dir, "--seed", "1234")

    with open(config_path, "rb") as a, open(os.path.join(model_dir, "config.json"), "rb") as b:
        assert a.read() == b.read(), "config.json was not copied unchanged"

    model = load_checked(model_dir, torch.float32)
    stored = files_content(model_dir)
    state = model.state_dict()
    assert set(stored) == set(state), f"keys differ: {set(stored) ^ set(state)}"
    for name, tensor in stored.items():
        assert tensor.dtype == torch.float32, f"{name}: {tensor.dtype}"
        assert torch.equal(state[name], tensor), f"{name}: transformers holds other values than the file"

    # HF's _init_weights: N(0, initializer_range) for Linear/Embedding, ones for RMSNorm, pad row 0.
    embed = stored["model.embed_tokens.weight"]
    assert torch.all(embed[0] == 0), "the pad_token_id row of the embedding is not zero"
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.down_proj.weight"):
        std = stored[name].std().item()
        assert abs(std - 0.02) < 0.002, f"{name}: std {std}, expected about 0.02"
        assert abs(stored[name].mean().item()) < 0.002, f"{name}: mean {stored[name].mean().item()}"
    assert torch.all(stored["model.norm.weight"] == 1)

    # Forward: near-uniform predictions from a freshly initialised model.
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, TINY_LLAMA["vocab_size"], (2, 16), generator=generator)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    assert out.logits.shape == (2, 16, TINY_LLAMA["vocab_size"])
    assert torch.isfinite(out.logits).all()
    assert abs(out.loss.item() - math.log(TINY_LLAMA["vocab_size"])) < 0.1, f"loss {out.loss.item()}"

    # A different seed gives different weights; the same seed the same file.
    again = os.path.join(work, "fp32_again")
    run_init(zerotune, config_path, again, "--seed", "1234")
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as a, open(os.path.join(again, "model.safetensors"), "rb") as b:
        assert a.read() == b.read(), "the same seed did not reproduce the file"
    other = os.path.join(work, "fp32_other_seed")
    run_init(zerotune, config_path, other, "--seed", "99")
    assert not torch.equal(files_content(other)["lm_head.weight"], stored["lm_head.weight"])
    return config_path, model


def check_sharded_half_models(zerotune, work, config_path, fp32_model):
    for dtype_flag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        model_dir = os.path.join(work, f"{dtype_flag}_sharded")
        run_init(zerotune, config_path, model_dir, "--seed", "1234", "--dtype", dtype_flag, "--max-shard-size", "50KB")
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        assert os.path.exists(index_path), f"{model_dir}: no index written"
        assert not os.path.exists(os.path.join(model_dir, "model.safetensors"))
        with open(index_path) as f:
            ours = json.load(f)

        model = load_checked(model_dir, dtype)
        stored = files_content(model_dir)
        state = model.state_dict()
        reference = fp32_model.state_dict()
        assert set(stored) == set(state) == set(ours["weight_map"])
        for name, tensor in stored.items():
            assert tensor.dtype == dtype, f"{name}: {tensor.dtype}"
            assert torch.equal(state[name], tensor), f"{name}: transformers holds other values than the file"
            # The stored values are the fp32 init rounded to nearest even, as torch rounds.
            assert torch.equal(tensor, reference[name].to(dtype)), f"{name}: not the {dtype_flag} rounding of fp32"
        ids = torch.randint(1, TINY_LLAMA["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():  # in fp32: Debian's torch 1.13 has no fp16 matmul on the CPU
            logits = model.float()(input_ids=ids).logits
        assert torch.isfinite(logits).all()

        # transformers' sharding rule (shard_checkpoint, which save_pretrained uses) applied to the
        # tensors in our file order gives the same files, index and total_size.
        ordered = collections.OrderedDict((name, stored[name]) for name in tensors_in_file_order(model_dir))
        hf_shards, hf_index = shard_checkpoint(ordered, max_shard_size="50KB", weights_name="model.safetensors")
        assert hf_index is not None, "transformers would not shard this model at 50KB"
        assert ours["weight_map"] == hf_index["weight_map"], "shard assignment differs from transformers'"
        assert ours["metadata"]["total_size"] == hf_index["metadata"]["total_size"], (ours["metadata"], hf_index["metadata"])
        assert sorted(hf_shards) == sorted(set(ours["weight_map"].values()))


def check_errors(zerotune, work):
    bad = dict(TINY_LLAMA, rope_scaling={"type": "dynamic", "factor": 2.0})
    path = os.path.join(work, "bad_config.json")
    with open(path, "w") as f:
        json.dump(bad, f)
    out = os.path.join(work, "bad_out")
    result = subprocess.run([zerotune, "init", "--config", path, "--out", out], capture_output=True, text=True)
    assert result.returncode != 0, "an unsupported rope_scaling was accepted"
    for part in (path, "rope_scaling", "dynamic"):
        assert part in result.stderr, f"{part!r} not in the error: {result.stderr}"
    assert not os.path.exists(os.path.join(out, "model.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--zerotune", required=True, help="path to the zerotune executable")
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory(prefix="zt-safetensors-interop-") as work:
        config_path, fp32_model = check_fp32_model(args.zerotune, work)
        check_sharded_half_models(args.zerotune, work, config_path, fp32_model)
        check_errors(args.zerotune, work)
    print("safetensors interop: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

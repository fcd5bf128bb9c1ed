# Oracle: QLoRA's 4-bit base (issue 19) holds bitsandbytes' bits.
#
# bitsandbytes itself cannot be installed here (its wheels need torch >= 2; this venv has
# Debian's torch 1.13 and no GPU), so the oracle is bitsandbytes' reference algorithm
# (bitsandbytes/backends/default/ops.py quantize_4bit / quantize_blockwise / dequantize_*,
# functional.quantize_4bit with compress_statistics, get_4bit_type, create_dynamic_map) written
# again below in torch, step by step as bitsandbytes computes it (fp32 tensors, reciprocal of the
# clamped absmax, bucketize on the fp32 midpoints, torch's fp32 mean for the offset).
#
#   1. A tiny random LLaMA is quantized by the oracle (NF4, double quantization) and saved in
#      bitsandbytes' 4-bit state dict layout with a quantization_config, as transformers'
#      save_pretrained writes a load_in_4bit model.
#   2. zerotune quantizing the fp32 model itself (--quantize nf4 --double-quant) and zerotune
#      loading the bitsandbytes checkpoint train with the same losses, bit for bit; and so does
#      plain LoRA on the fp32 model holding the oracle's dequantized weights (so zerotune's
#      dequantization is the oracle's, bit for bit, inside training).
#   3. With lr 0, the merged export of the QLoRA run is the oracle's dequantized base, bit for
#      bit (fp32): every 4-bit code and scale agrees.
#   4. The same for FP4 without double quantization (export only), and the PEFT export of the
#      adapter; a 4-bit base without LoRA is refused.
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402
from oracle_common import torch, safetensors  # noqa: E402

BLOCKSIZE = 64
NESTED_BLOCKSIZE = 256
# A model whose MLP weights span several 256-blocks of scales (320 x 128 / 64 = 640 blocks).
QLORA_LLAMA = dict(hidden_size=128, intermediate_size=320, num_attention_heads=4, num_key_value_heads=2)
STEPS = 4


# ---- bitsandbytes' reference algorithm ------------------------------------------------------

def code_4bit(quant_type):
    """get_4bit_type: the table, divided by its largest magnitude, in fp32."""
    if quant_type == "nf4":
        data = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
    else:
        data = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]
    code = torch.tensor(data, dtype=torch.float32)
    return code / code.abs().max()


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        boundaries = torch.linspace(0.1, 1, 2 ** i + 1, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


def blockwise_indices(flat, blocksize, sorted_code):
    """The shared blockwise step: (indices into sorted_code, absmax), full blocks scaled by the
    reciprocal of the clamped absmax, a short last block divided by its clamped absmax."""
    n = flat.numel()
    full = n - n % blocksize
    blocks = flat[:full].reshape(-1, blocksize)
    absmax = blocks.abs().max(dim=-1)[0]
    scaled = torch.clamp(blocks * (1.0 / absmax.clamp(min=1e-38).view(-1, 1)), -1, 1).reshape(-1)
    if n % blocksize:
        last = flat[full:].abs().max().clamp(min=1e-38)
        absmax = torch.cat([absmax, last.unsqueeze(0)])
        scaled = torch.cat([scaled, torch.clamp(flat[full:] / last, -1, 1)])
    return scaled, absmax


def quantize_4bit(weight, quant_type, double_quant):
    """functional.quantize_4bit -> the state dict pieces Linear4bit saves."""
    code = code_4bit(quant_type)
    sorted_code, order = torch.sort(code, stable=True)  # FP4's table is not sorted; ties keep table order
    bounds = (sorted_code[:-1] + sorted_code[1:]) / 2
    scaled, absmax = blockwise_indices(weight.reshape(-1).float(), BLOCKSIZE, sorted_code)
    if scaled.numel() % 2:
        scaled = torch.nn.functional.pad(scaled, (0, 1))
    q = order[torch.bucketize(scaled, bounds)].to(torch.uint8)
    packed = ((q[::2] << 4) | q[1::2]).unsqueeze(1)
    state = {"quant_type": quant_type, "blocksize": BLOCKSIZE, "dtype": "float32", "shape": list(weight.shape)}
    pieces = {"": packed, ".quant_map": code}
    if not double_quant:
        pieces[".absmax"] = absmax
        return pieces, state
    offset = absmax.mean()
    centred = absmax - offset
    dynamic = dynamic_map()
    dyn_bounds = (dynamic[:-1] + dynamic[1:]) / 2
    scaled2, absmax2 = blockwise_indices(centred, NESTED_BLOCKSIZE, dynamic)
    pieces[".absmax"] = torch.bucketize(scaled2, dyn_bounds).to(torch.uint8)
    pieces[".nested_absmax"] = absmax2
    pieces[".nested_quant_map"] = dynamic
    state.update({"nested_blocksize": NESTED_BLOCKSIZE, "nested_dtype": "float32", "nested_offset": offset.item()})
    return pieces, state


def dequantize_4bit(pieces, state):
    """functional.dequantize_4bit (with dequantize_blockwise + offset for nested scales), fp32."""
    absmax = pieces[".absmax"]
    if "nested_offset" in state:
        nested = pieces[".nested_quant_map"][absmax.long()]
        n = nested.numel()
        scales = pieces[".nested_absmax"].repeat_interleave(NESTED_BLOCKSIZE)[:n]
        absmax = nested * scales
        absmax += torch.tensor(state["nested_offset"], dtype=torch.float32)
    packed = pieces[""].reshape(-1)
    codes = torch.empty(packed.numel() * 2, dtype=torch.int64)
    codes[::2] = (packed >> 4).long()
    codes[1::2] = (packed & 0xF).long()
    n = 1
    for extent in state["shape"]:
        n *= extent
    values = pieces[".quant_map"][codes][:n]
    values = values * absmax.repeat_interleave(BLOCKSIZE)[:n]
    return values.reshape(state["shape"])


# ---- models --------------------------------------------------------------------------------

def quantized_names(state_dict):
    return [name for name, tensor in state_dict.items()
            if name.endswith("_proj.weight") and tensor.dim() == 2 and not name.startswith("lm_head")]


def write_bnb_model(source_dir, out_dir, quant_type, double_quant):
    """source_dir's model saved as transformers saves a load_in_4bit model (bitsandbytes layout)."""
    os.makedirs(out_dir, exist_ok=True)
    state = safetensors.torch.load_file(os.path.join(source_dir, "model.safetensors"))
    out = {}
    for name, tensor in state.items():
        if name not in quantized_names(state):
            out[name] = tensor
            continue
        pieces, quant_state = quantize_4bit(tensor, quant_type, double_quant)
        for suffix, piece in pieces.items():
            out[name + suffix] = piece.contiguous()
        out[f"{name}.quant_state.bitsandbytes__{quant_type}"] = torch.tensor(
            list(json.dumps(quant_state).encode("utf-8")), dtype=torch.uint8)
    safetensors.torch.save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(source_dir, "config.json")) as stream:
        config = json.load(stream)
    config["quantization_config"] = {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
        "bnb_4bit_quant_type": quant_type, "bnb_4bit_use_double_quant": double_quant,
        "bnb_4bit_compute_dtype": "float32", "bnb_4bit_quant_storage": "uint8",
        "llm_int8_skip_modules": None}
    with open(os.path.join(out_dir, "config.json"), "w") as stream:
        json.dump(config, stream, indent=2)
    return out


def dequantized_reference(source_dir, quant_type, double_quant):
    """{name: the oracle's dequantize(quantize(W))} for the 4-bit weights, else W itself."""
    state = safetensors.torch.load_file(os.path.join(source_dir, "model.safetensors"))
    result = {}
    for name, tensor in state.items():
        if name in quantized_names(state):
            pieces, quant_state = quantize_4bit(tensor, quant_type, double_quant)
            result[name] = dequantize_4bit(pieces, quant_state)
        else:
            result[name] = tensor
    return result


def write_dense_model(source_dir, out_dir, weights):
    os.makedirs(out_dir, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in weights.items()},
                                os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(source_dir, "config.json")) as source, open(os.path.join(out_dir, "config.json"), "w") as out:
        out.write(source.read())


LORA = ["--lora-r", 4, "--lora-alpha", 8, "--lora-targets", "all-linear"]


def train(zerotune, model_dir, data_dir, out_dir, extra, lr="1e-2", steps=STEPS):
    oc.run_zerotune(zerotune, ["train", "--model", model_dir, "--data", data_dir, "--out", out_dir,
                               "--no-shuffle", "--max-steps", steps, "--micro-batch-size", 2, "--grad-accum", 1,
                               "--lr", lr] + LORA + list(extra))
    return [record["loss"] for record in oc.read_metrics(out_dir)]


def check_bits_equal(report, label, got, ref):
    same = set(got) == set(ref)
    worst = 0
    for name in ref:
        if name in got and not torch.equal(got[name].float(), ref[name].float()):
            worst += 1
            print(f"      {name}: max diff {float((got[name].float() - ref[name].float()).abs().max()):.3e}")
    report.check(same and worst == 0, f"[{label}] merged export == the oracle's dequantized base, bit for bit "
                                      f"({len(ref)} tensors, {worst} differ)")


def main():
    args = oc.parse_args("QLoRA: zerotune's 4-bit base holds bitsandbytes' bits")
    report = oc.Report("QLoRA 4-bit format: zerotune vs bitsandbytes' reference algorithm")
    with oc.temporary_directory(args, "zt_oracle_qlora_") as tmp:
        fp32_dir = os.path.join(tmp, "fp32")
        config = oc.make_llama(fp32_dir, seed=19, initializer_range=0.05, **QLORA_LLAMA)
        data_dir = os.path.join(tmp, "data")
        oc.write_data(data_dir, oc.make_samples(5, [9, 14, 7, 12, 16, 10, 8, 13], config.vocab_size), config.vocab_size)

        # 2. training: zerotune's quantization, bitsandbytes' checkpoint, the oracle's dense weights
        bnb_dir = os.path.join(tmp, "bnb_nf4_dq")
        write_bnb_model(fp32_dir, bnb_dir, "nf4", True)
        dense_dir = os.path.join(tmp, "dense_nf4_dq")
        reference = dequantized_reference(fp32_dir, "nf4", True)
        write_dense_model(fp32_dir, dense_dir, reference)
        own = train(args.zerotune, fp32_dir, data_dir, os.path.join(tmp, "own"), ["--quantize", "nf4", "--double-quant"])
        loaded = train(args.zerotune, bnb_dir, data_dir, os.path.join(tmp, "loaded"), [])
        dense = train(args.zerotune, dense_dir, data_dir, os.path.join(tmp, "dense"), [])
        print(f"      losses: quantized by zerotune {own}\n      bnb checkpoint {loaded}\n      dense oracle {dense}")
        report.check(len(own) == STEPS and own == loaded,
                     "[nf4+dq] zerotune quantizing == zerotune loading the bitsandbytes checkpoint (losses, bit for bit)")
        report.check(own == dense, "[nf4+dq] QLoRA == LoRA on the oracle's dequantized weights (losses, bit for bit)")

        # 3. lr 0: the merged export is the dequantized base
        for quant_type, double_quant in (("nf4", True), ("fp4", False)):
            label = f"{quant_type}{'+dq' if double_quant else ''}"
            flags = ["--quantize", quant_type] + (["--double-quant"] if double_quant else [])
            out_dir = os.path.join(tmp, f"lr0_{label}")
            train(args.zerotune, fp32_dir, data_dir, out_dir, flags, lr="0", steps=1)
            merged = os.path.join(tmp, f"merged_{label}")
            oc.run_export(args.zerotune, os.path.join(out_dir, "checkpoints", "global_step1"), fp32_dir, merged,
                          "--format", "hf", "--merge")
            exported = safetensors.torch.load_file(os.path.join(merged, "model.safetensors"))
            check_bits_equal(report, label, exported, dequantized_reference(fp32_dir, quant_type, double_quant))

        # 4. the adapter of a QLoRA run exports as PEFT; 4-bit without LoRA is refused
        peft_dir = os.path.join(tmp, "peft")
        oc.run_export(args.zerotune, os.path.join(tmp, "own", "checkpoints", f"global_step{STEPS}"), fp32_dir, peft_dir,
                      "--format", "peft")
        adapter = safetensors.torch.load_file(os.path.join(peft_dir, "adapter_model.safetensors"))
        report.check(len(adapter) > 0 and all("lora_" in key for key in adapter),
                     f"[peft] the QLoRA adapter exports ({len(adapter)} tensors, adapters only)")
        oc.check_refused(args.zerotune, report, "--quantize without LoRA",
                         ["train", "--model", fp32_dir, "--data", data_dir, "--out", os.path.join(tmp, "x"),
                          "--max-steps", 1, "--quantize", "nf4"], "--lora-r")
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

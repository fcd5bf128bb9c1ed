"""The LoRA training step of bench/gpu_llama7b.sh in HF transformers + PEFT, for the
zerotune/HF ratio: the same model directory, LoRA r/alpha on the 7 linear projections of every
layer (PEFT's "all-linear" for LLaMA, named explicitly so older PEFT versions work too), dropout
0, AdamW (torch's default implementation) with clipping at 1.0, random token ids of exactly
--seq tokens, --batch rows per step.

Precision as HF Trainer's bf16=True: frozen base weights in bf16 (torch_dtype=bfloat16), the
trainable LoRA weights and AdamW state in fp32, forward under torch.autocast(bfloat16) --
zerotune's bf16 (fp32 master weights). --dtype fp32 (the CPU dry run) is plain fp32.

Each step is timed between torch.cuda.synchronize() calls; the first is a warm-up and not
counted: tokens/s = tokens of the timed steps / their seconds. Peak memory is
torch.cuda.max_memory_allocated() over the whole run (load included), as zerotune's
mem_device_peak counts everything since its start.

  python bench/hf_peft_step.py --model DIR [--device cuda] [--dtype bf16] [--seq 2048]
                               [--batch 1] [--steps 4] [--lora-r 16] [--lora-alpha 32]
                               [--gradient-checkpointing]
The last line is "HF_RESULT {json}".
"""
import argparse
import json
import resource
import time

import peft
import torch
import transformers

LLAMA_LINEAR_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="HF model directory (zerotune init's output)")
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4, help="steps in all; the first is a warm-up")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=float, default=32.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute each layer in backward (zerotune's --activation-checkpointing)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is a warm-up)")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("hf_peft_step.py: --device cuda but torch sees no CUDA device")
    bf16 = args.dtype == "bf16"
    torch.manual_seed(args.seed)

    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, torch_dtype=torch.bfloat16 if bf16 else torch.float32, low_cpu_mem_usage=True)
    model.config.use_cache = False
    if args.gradient_checkpointing:  # non-reentrant: works with frozen embeddings (no input grads needed)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = peft.LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
                           target_modules=LLAMA_LINEAR_MODULES, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora).to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    for parameter in trainable:  # fp32 master weights for what trains (HF Trainer + PEFT do the same)
        parameter.data = parameter.data.float()
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    model.train()

    input_ids = torch.randint(3, model.config.vocab_size, (args.batch, args.seq), device=device)  # [B, T]
    step_seconds = []
    losses = []
    for _ in range(args.steps):
        synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        step_seconds.append(time.perf_counter() - start)
        losses.append(float(loss))
        print(f"hf step {len(step_seconds)}/{args.steps}: loss {losses[-1]:.4f}, {step_seconds[-1]:.3f} s", flush=True)

    timed = step_seconds[1:]
    result = {
        "tokens_per_sec": args.batch * args.seq * len(timed) / sum(timed),
        "step_seconds": step_seconds,
        "losses": losses,
        "batch": args.batch,
        "seq": args.seq,
        "dtype": args.dtype,
        "gradient_checkpointing": args.gradient_checkpointing,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "max_memory_allocated": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "mem_host_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
        "trainable_parameters": sum(p.numel() for p in trainable),
        "attn_implementation": getattr(model.config, "_attn_implementation", "eager"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
    print(f"hf: {result['tokens_per_sec']:.1f} tokens/s over steps 2-{args.steps}, "
          f"attention {result['attn_implementation']}, {result['trainable_parameters']} trainable parameters")
    print("HF_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

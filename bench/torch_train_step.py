"""The PyTorch side of bench/run_cpu_bench.sh: one training step (forward, backward, AdamW) of
the same small LLaMA as bench_train_step.cpp (HF transformers LlamaForCausalLM, fp32, eager
attention), random weights and tokens, on the same threads. Prints the median step time."""
import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
for name, default in [("hidden", 512), ("layers", 4), ("seq", 256), ("batch", 4), ("vocab", 32000), ("steps", 5),
                      ("threads", 2)]:
    parser.add_argument(f"--{name}", type=int, default=default)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
heads = args.hidden // 64
config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3 // 64 * 64,
                     num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                     max_position_embeddings=args.seq, attn_implementation="eager")
model = LlamaForCausalLM(config).float().train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
n = args.batch * args.seq
ids = (torch.arange(n) * 7919 % args.vocab).reshape(args.batch, args.seq)
times = []
for step in range(args.steps + 1):  # step 0 warms up
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=False)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    elapsed = time.perf_counter() - start
    if step > 0:
        times.append(elapsed)
median = statistics.median(times)
print(f"torch {torch.__version__} cpu: hidden {args.hidden} layers {args.layers} seq {args.seq} batch {args.batch} "
      f"vocab {args.vocab} | loss {loss.item():.4f} | median step {median:.4f} s | {n / median:.0f} tokens/s")
print(f"TORCH_STEP_SECONDS {median:.6f}")

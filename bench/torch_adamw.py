"""The PyTorch side of the CPU Adam benchmark (bench/bench_cpu_adam.cpp): torch.optim.AdamW on
one fp32 parameter of n elements with a gradient, single-tensor (foreach=False) and multi-tensor
(foreach=True) implementations, on the given threads. Prints the best step time and the rate
in the same bytes convention as bench_cpu_adam (28 bytes per element: 4 arrays read, 3 written),
and TORCH_ADAM_SECONDS_<impl> lines for scripts.
    .venv/bin/python bench/torch_adamw.py [--n 67108864] [--repeats 10] [--threads 2]"""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=1 << 26)
parser.add_argument("--repeats", type=int, default=10)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)

print(f"torch {torch.__version__} AdamW: n {args.n}, {torch.get_num_threads()} threads, best of {args.repeats}")
for name, foreach in (("single_tensor", False), ("foreach", True)):
    param = torch.nn.Parameter((torch.arange(args.n, dtype=torch.float32) % 1000 - 500) * 0.01)
    param.grad = (torch.arange(args.n, dtype=torch.float32) % 777 - 388) * 1e-4
    optimizer = torch.optim.AdamW([param], lr=1e-4, weight_decay=0.01, foreach=foreach)
    optimizer.step()  # warm-up: creates exp_avg and exp_avg_sq
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        optimizer.step()
        best = min(best, time.perf_counter() - start)
    rate = 28.0 * args.n / best / 1e9
    print(f"  torch AdamW {name:14s} {best * 1e3:8.2f} ms  {rate:7.2f} GB/s (28 bytes/element convention)")
    print(f"TORCH_ADAM_SECONDS_{name} {best:.6f}")
    del optimizer, param

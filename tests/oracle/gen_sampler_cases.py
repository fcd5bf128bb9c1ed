"""Prints the C++ initialisers of the torch-recorded sampler cases in tests/unit/test_sampler.cpp.
Run with a Python that has torch (the cases in the test were recorded with Debian's torch 1.13.1):
    /usr/bin/python3 tests/oracle/gen_sampler_cases.py
Each case is one rank's list from torch.utils.data.DistributedSampler after set_epoch(epoch):
its length, its first HEAD entries and sum_j (j+1) * list[j] (so long lists are checked whole).
"""
import torch
from torch.utils.data import DistributedSampler

HEAD = 12

# (n, world_size, rank, seed, epoch, shuffle, drop_last): padding once and several times
# (n=2, W=8), truncation, n < W with drop_last (empty), 64-bit seeds, large n.
CASES = [
    (1, 1, 0, 0, 0, True, False),
    (1, 4, 3, 0, 0, True, False),
    (1, 4, 0, 0, 0, True, True),
    (2, 8, 5, 42, 1, True, False),
    (7, 2, 0, 0, 0, True, False),
    (7, 2, 1, 0, 0, True, False),
    (7, 3, 2, 42, 5, True, True),
    (7, 4, 1, 1234, 1, False, False),
    (10, 3, 0, 42, 0, True, False),
    (10, 3, 2, 42, 0, True, False),
    (10, 4, 3, 1234, 5, True, True),
    (100, 8, 7, 0, 1, True, False),
    (100, 3, 1, 1234, 0, True, True),
    (1000, 1, 0, 42, 5, True, False),
    (1000, 8, 3, 1234, 1, True, True),
    (12345, 4, 2, 0, 0, True, False),
    (12345, 8, 7, 42, 5, True, True),
    (12345, 3, 1, 1234, 1, False, True),
    (50, 2, 1, 2**32 + 5, 0, True, False),
    (50, 2, 0, 2**63 + 3, 2, True, False),
]


def rank_list(n, world_size, rank, seed, epoch, shuffle, drop_last):
    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def main():
    print(f"// Recorded with torch {torch.__version__} by tests/oracle/gen_sampler_cases.py.")
    for n, world_size, rank, seed, epoch, shuffle, drop_last in CASES:
        indices = rank_list(n, world_size, rank, seed, epoch, shuffle, drop_last)
        weighted = sum((j + 1) * v for j, v in enumerate(indices))
        head = ", ".join(str(v) for v in indices[:HEAD])
        print(f"    {{{n}, {world_size}, {rank}, {seed}ull, {epoch}, {str(shuffle).lower()}, "
              f"{str(drop_last).lower()}, {len(indices)}, {weighted}, {{{head}}}}},")


if __name__ == "__main__":
    main()

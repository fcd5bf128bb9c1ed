# SignExchange (zero/sign_exchange.h) against DeepSpeed's compressed_allreduce, written here in
# numpy from deepspeed/runtime/comm/nccl.py (0.16.5): worker error feedback, one scale
# ||x|| / sqrt(numel) per worker, signs with sign(0) = +1, the server's average of every worker's
# decompressed chunk plus its error, recompressed with its own scale. The C++ side
# (tests/mpi/sign_exchange_ranks.cpp) runs on W = 2 and 4 MPI ranks for 3 rounds, so that the
# error buffers carry over; chunks of 40 (DeepSpeed pads to multiples of 8 W: none here, so its
# scales' element counts are ours) and of 13 (bytes partly used: only zerotune runs it, and it
# is checked against the same formulas with the unpadded counts).
#   python sign_exchange_oracle.py --ranks-binary build/tests/zt_sign_exchange_ranks
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpi_common import Report, main_guard, rank_records  # noqa: E402

RTOL = 2e-6  # float32 norms (double inside zerotune), divisions and sums in rank order


def sign(x):
    return np.where(x >= 0, np.float32(1), np.float32(-1))


def reference(inputs, chunk, rounds):
    """inputs[r][k]: rank r's vector in round k. Returns per round: average [W*C], worker errors
    [W][W*C], server errors [W][C]."""
    world = len(inputs)
    worker_error = [np.zeros(world * chunk, np.float32) for _ in range(world)]
    server_error = [np.zeros(chunk, np.float32) for _ in range(world)]
    results = []
    for k in range(rounds):
        signs, scales = [], []
        for r in range(world):
            x = inputs[r][k] + worker_error[r]
            scale = np.float32(np.linalg.norm(x.astype(np.float64)) / np.sqrt(x.size))
            worker_error[r] = (x - scale * sign(x)).astype(np.float32)
            signs.append(sign(x))
            scales.append(scale)
        average = np.zeros(world * chunk, np.float32)
        for c in range(world):
            y = server_error[c].copy()
            for w in range(world):
                y = (y + signs[w][c * chunk:(c + 1) * chunk] * np.float32(scales[w] / world)).astype(np.float32)
            scale = np.float32(np.linalg.norm(y.astype(np.float64)) / np.sqrt(chunk))
            server_error[c] = (y - scale * sign(y)).astype(np.float32)
            average[c * chunk:(c + 1) * chunk] = scale * sign(y)
        results.append((average, [e.copy() for e in worker_error], [e.copy() for e in server_error]))
    return results


def close(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / (np.abs(want) + np.sqrt(np.mean(want ** 2)) + 1e-30)))


def check(report, binary, world, chunk, rounds=3):
    records = rank_records(report, f"W={world} C={chunk}", world, binary, [chunk, rounds], 120)
    if records is None:
        return
    inputs = [[np.asarray(rk["input"], np.float32) for rk in rec["rounds"]] for rec in records]
    expected = reference(inputs, chunk, rounds)
    for k, (average, worker_errors, server_errors) in enumerate(expected):
        for r, rec in enumerate(records):
            got = rec["rounds"][k]
            label = f"W={world} C={chunk} round {k} rank {r}"
            report.check(close(got["average"], average) <= RTOL, f"{label}: average (rel {close(got['average'], average):.1e})")
            report.check(close(got["own_chunk"], average[r * chunk:(r + 1) * chunk]) <= RTOL, f"{label}: own chunk")
            report.check(close(got["worker_error"], worker_errors[r]) <= RTOL,
                         f"{label}: worker error (rel {close(got['worker_error'], worker_errors[r]):.1e})")
            report.check(close(got["server_error"], server_errors[r]) <= RTOL, f"{label}: server error")
        # Every rank holds the same average; it carries one magnitude per chunk.
        report.check(all(records[r]["rounds"][k]["average"] == records[0]["rounds"][k]["average"] for r in range(world)),
                     f"W={world} C={chunk} round {k}: the same average on every rank")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks-binary", required=True)
    args = parser.parse_args()
    report = Report("mpi.sign_exchange")
    for world, chunk in ((2, 40), (4, 40), (2, 13), (4, 13)):
        check(report, args.ranks_binary, world, chunk)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

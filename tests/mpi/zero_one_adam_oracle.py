# 0/1 Adam through the ZeRO engine (zero/compressed_reduction.h, optim/zero_one_adam.h) against
# DeepSpeed's ZeroOneAdam.step (deepspeed/runtime/fp16/onebit/zoadam.py, 0.16.5), transcribed
# here in numpy for one tensor per parameter group: the variance schedule (var_interval doubling
# after var_update_scaler variance updates), the 1-bit compressed gradient average on the other
# steps, the freeze after var_freeze_step with the one-time reset of the error feedback, the
# local steps with the momentum accumulator and the synchronisations at
# s % local_step_interval == 0 (the interval doubling after local_step_scaler steps, capped at
# local_step_clipper), and DeepSpeed's compressed_allreduce (as mpi/sign_exchange_oracle.py).
# DeepSpeed's first step() call only initialises: zerotune's update t is its step s = t + 1.
# The C++ side (tests/mpi/zero_one_adam_ranks.cpp) trains a tiny problem whose gradient depends
# on each rank's own parameters, so the ranks' drift in the local steps is part of what is
# compared; every rank's parameters after every update are checked, at stages 0, 1 (with and
# without optimizer offload) and 2, on 2 and 4 ranks.
#   python zero_one_adam_oracle.py --ranks-binary build/tests/zt_zero_one_adam_ranks
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpi_common import Report, main_guard, rank_records  # noqa: E402

F = np.float32
RTOL = 2e-5  # float32 trajectories over 30 updates (sums in another order): 2e-6 measured
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 0.05, 0.9, 0.99, 1e-8, 0.01
UPDATES, VAR_FREEZE, VAR_SCALER, LOCAL_SCALER, CLIPPER = 30, 12, 2, 3, 4
TENSORS = (("w", 128, WEIGHT_DECAY), ("n", 64, 0.0))  # name, numel, weight decay (zero_one_adam_ranks.cpp)


def sign(x):
    return np.where(x >= 0, F(1), F(-1))


def scale_of(x):
    return F(np.linalg.norm(x.astype(np.float64)) / np.sqrt(x.size))


def compressed_allreduce(xs, worker_error, server_error):
    """DeepSpeed's compressed_allreduce over the ranks' vectors xs; updates the error lists in place."""
    world, n = len(xs), xs[0].size
    chunk = n // world
    signs, scales = [], []
    for r in range(world):
        x = (xs[r] + worker_error[r]).astype(F)
        scale = scale_of(x)
        worker_error[r] = (x - scale * sign(x)).astype(F)
        signs.append(sign(x))
        scales.append(scale)
    out = np.zeros(n, F)
    for c in range(world):
        y = server_error[c].copy()
        for w in range(world):
            y = (y + signs[w][c * chunk:(c + 1) * chunk] * F(scales[w] / world)).astype(F)
        scale = scale_of(y)
        server_error[c] = (y - scale * sign(y)).astype(F)
        out[c * chunk:(c + 1) * chunk] = scale * sign(y)
    return [out.copy() for _ in range(world)]


def problem(tensor, numel, rank, update):
    i = np.arange(numel, dtype=np.float64)
    target = np.cos(0.3 * i + 1.1 * rank + tensor).astype(F)
    curvature = (0.5 + 0.4 * np.sin(1.3 * i + tensor)).astype(F)
    noise = (0.3 * np.sin(0.91 * i + 2.3 * rank + 0.57 * update + tensor)).astype(F)
    return target, curvature, noise


def deepspeed_zero_one_adam(world):
    """Every rank's parameters of every tensor after each update: [update][rank][tensor]."""
    trajectory = [[dict() for _ in range(world)] for _ in range(UPDATES)]
    for k, (name, numel, weight_decay) in enumerate(TENSORS):
        p = [(0.5 * np.sin(0.7 * np.arange(numel) + k)).astype(F) for _ in range(world)]
        m = [np.zeros(numel, F) for _ in range(world)]
        v = [np.zeros(numel, F) for _ in range(world)]
        u = [np.zeros(numel, F) for _ in range(world)]
        worker_error = [np.zeros(numel, F) for _ in range(world)]
        server_error = [np.zeros(numel // world, F) for _ in range(world)]
        lrs, freeze_key, reinitial_error_buffer = 0.0, False, False
        var_interval, var_counter, local_interval, local_counter = 1, 0, 1, 0
        for t in range(1, UPDATES + 1):
            s = t + 1  # DeepSpeed's state['step'] (its first call initialised it to 1)
            local = []
            for r in range(world):
                target, curvature, noise = problem(k, numel, r, t)
                local.append((((p[r] - target).astype(F) * curvature).astype(F) + noise).astype(F))
            divided = [(g / F(world)).astype(F) for g in local]  # zerotune sums over ranks
            if not freeze_key:
                if s % var_interval == 0:  # the engine all-reduced the gradients
                    g = divided[0].copy()
                    for r in range(1, world):
                        g = (g + divided[r]).astype(F)
                    for r in range(world):
                        v[r] = (F(BETA2) * v[r] + F(1 - BETA2) * g * g).astype(F)
                        m[r] = (F(BETA1) * m[r] + F(1 - BETA1) * g).astype(F)
                else:
                    averaged = compressed_allreduce([d * F(world) for d in divided], worker_error, server_error)
                    for r in range(world):
                        m[r] = (F(BETA1) * m[r] + F(1 - BETA1) * averaged[r]).astype(F)
            else:
                for r in range(world):
                    m[r] = (F(BETA1) * m[r] + F(1 - BETA1) * (divided[r] * F(world))).astype(F)
                lrs += LR
            for r in range(world):
                update = (m[r] / (np.sqrt(v[r]) + F(EPS)) + F(weight_decay) * p[r]).astype(F)
                p[r] = (p[r] + F(-LR) * update).astype(F)
                if freeze_key:
                    u[r] = (u[r] + F(-LR) * update).astype(F)
            if freeze_key and s % local_interval == 0:  # synchronisation
                inputs = []
                for r in range(world):
                    p[r] = (p[r] - u[r]).astype(F)
                    inputs.append((u[r] * (np.sqrt(v[r]) + F(EPS))).astype(F))
                averaged = compressed_allreduce(inputs, worker_error, server_error) if world > 1 else inputs
                for r in range(world):
                    m[r] = (averaged[r] * F(-1.0 / lrs)).astype(F)
                    p[r] = (p[r] + averaged[r] / (np.sqrt(v[r]) + F(EPS))).astype(F)
                    u[r] = np.zeros(numel, F)
                lrs = 0.0
            if not freeze_key:
                if s % var_interval == 0:
                    var_counter += 1
                    if var_counter == VAR_SCALER:
                        var_counter, var_interval = 0, var_interval * 2
            else:
                local_counter += 1
                if local_counter == LOCAL_SCALER:
                    local_counter, local_interval = 0, min(CLIPPER, local_interval * 2)
            if s > VAR_FREEZE:
                freeze_key = True
            if freeze_key and not reinitial_error_buffer:
                worker_error = [np.zeros(numel, F) for _ in range(world)]
                server_error = [np.zeros(numel // world, F) for _ in range(world)]
                reinitial_error_buffer = True
            for r in range(world):
                trajectory[t - 1][r][name] = p[r].copy()
    return trajectory


def close(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / (np.sqrt(np.mean(want ** 2)) + 1e-30))


def check(report, binary, world, stage, offload, expected):
    label = f"W={world} stage {stage}" + (" offload" if offload else "")
    records = rank_records(report, label, world, binary,
                           [stage, int(offload), UPDATES, VAR_FREEZE, VAR_SCALER, LOCAL_SCALER, CLIPPER], 200)
    if records is None:
        return
    worst = 0.0
    for t in range(UPDATES):
        for r in range(world):
            for name, _, _ in TENSORS:
                error = close(records[r]["updates"][t][name], expected[t][r][name])
                worst = max(worst, error)
                if error > RTOL:
                    report.check(False, f"{label}: update {t + 1} rank {r} {name}: rel {error:.2e}")
    report.check(worst <= RTOL, f"{label}: every rank's parameters after every update within {RTOL} "
                 f"(worst {worst:.1e})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks-binary", required=True)
    args = parser.parse_args()
    report = Report("mpi.zero_one_adam_oracle")
    for world in (2, 4):
        expected = deepspeed_zero_one_adam(world)
        # The oracle itself goes through every phase: compressed-gradient steps before the freeze,
        # ranks apart between synchronisations, together (to rounding) after each.
        apart = [t for t in range(UPDATES) if close(expected[t][0]["w"], expected[t][1]["w"]) > 1e-3]
        report.check(apart and apart[0] > VAR_FREEZE - 1, f"W={world}: the ranks drift apart only in the local steps "
                     f"(updates {[t + 1 for t in apart]})")
        report.check(len(apart) < UPDATES - VAR_FREEZE, f"W={world}: and synchronise again")
        cases = ((0, False), (1, False), (1, True), (2, False)) if world == 2 else ((0, False), (2, False))
        for stage, offload in cases:
            check(report, args.ranks_binary, world, stage, offload, expected)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# Emulated device only (label gpu-emu; a GPU's driver calls cannot be counted): ZeRO-3's virtual
# memory without per-chunk driver traffic (issue 30, item 2).
# A stage-3 step gathers every unit twice (forward, backward) and commits its gradients once; the
# discardable buffers (src/backend/cuda/cuda_vmm.h) map and unmap physical memory per committed
# range, not per chunk, and reuse the physical memory of discarded ranges
# (src/backend/physical_pool.h). On the emulated device, which counts its driver calls
# (ZT_EMU_CALL_REPORT), tiny-llama on 2 ranks at stage 3, and at stage 3 with offload_param cpu:
#   - the driver's cuMemMap + cuMemUnmap calls of one step (the difference between a run of
#     STEPS + 2 steps and one of STEPS steps, halved; the most of any rank) are at most
#     MAPS_PER_UNIT per unit: each unit is committed 3 times a step (2 gathers, its gradients) in
#     at most 2 groups (decay / no-decay), and a commit maps at most 3 extents (its partial first
#     chunk, its whole chunks, its partial last chunk), each unmapped once; per-chunk mapping
#     needs one call per 4 KiB chunk here (measured before this test: 1152 and 1332 map + unmap
#     calls per step for 4 units, against a bound of 144);
#   - a step's cuMemCreate + cuMemRelease calls are at most its map and unmap calls, and with
#     units of whole chunks (tiny-llama with intermediate_size 176 and 8 layers, as a 7B model's
#     blocks are whole 2 MiB chunks) at most ALIGNED_CREATES of them: units of equal size reuse
#     each other's memory (measured: 24 of 104; per-chunk mapping creates and releases a chunk
#     at every map and unmap);
#   - cuMemSetAccess is one per cuMemMap;
#   - the runs of STEPS and STEPS + 2 steps start with the same losses (counting changes nothing).
# The chunk is made 4 KiB (ZT_EMU_VMM_GRANULARITY) so that a unit of tiny-llama spans tens of
# chunks. Fast: 6 runs of 1-3 steps, about 20 s on 2 cores.
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from mpi_common import (REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, read_run,  # noqa: E402
                        run_ranks, temporary_directory, write_ds_config)

STEPS = 1
RANKS = 2
GRANULARITY = 4096
# Commits per unit and step (2 gathers + 1 gradient commit) x groups (2) x extents per commit (3),
# for the maps and again for the unmaps.
MAPS_PER_UNIT = 2 * 3 * 2 * 3
ALIGNED_CREATES = 0.5  # of the map and unmap calls (per-chunk mapping: 1)
# Every unit of tiny-llama (16k-45k elements) gathered and released (none persistent, none kept
# between forward and backward), and gradients reduced about a unit at a time, as a 7B model's
# are by DeepSpeed's defaults.
ZERO = {"stage": 3, "stage3_param_persistence_threshold": 1000, "stage3_max_reuse_distance": 0,
        "stage3_prefetch_bucket_size": 50000, "reduce_bucket_size": 50000, "allgather_bucket_size": 50000}


def read_calls(prefix):
    """{category: {call: count}} of each rank's ZT_EMU_CALL_REPORT file."""
    ranks = []
    for rank in range(RANKS):
        with open(f"{prefix}.{rank}") as stream:
            ranks.append(json.load(stream))
    return ranks


def train(zerotune, workdir, model, data, name, steps, zero):
    out = os.path.join(workdir, f"{name}-{steps}")
    ds = write_ds_config(os.path.join(workdir, name + ".json"), 8, 2, zero)
    prefix = os.path.join(workdir, f"{name}-{steps}-calls")
    saved = dict(os.environ)
    os.environ.update({"ZT_EMU_CALL_REPORT": prefix, "ZT_EMU_VMM_GRANULARITY": str(GRANULARITY)})
    try:
        run_ranks(RANKS, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed", ds,
                          "--max-steps", steps, "--seed", 5, "--device", "cuda", "--no-save-at-end"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out, read_calls(prefix)


def per_step(short, long, call, category="vmm"):
    """The most calls of `call` one step makes on any rank."""
    return max((b[category].get(call, 0) - a[category].get(call, 0)) / 2 for a, b in zip(short, long))


def check_setting(report, zerotune, workdir, model, data, name, zero, creates_per_map=1.0):
    """`creates_per_map`: a step's cuMemCreate + cuMemRelease calls are at most this fraction of
    its cuMemMap + cuMemUnmap calls."""
    out, short = train(zerotune, workdir, model, data, name, STEPS, zero)
    out_long, long = train(zerotune, workdir, model, data, name, STEPS + 2, zero)
    units = len(read_run(out)["zero_layout"]["unit_elements"])
    losses = [record["loss"] for record in read_metrics(out)]
    report.check(losses == [record["loss"] for record in read_metrics(out_long)][:STEPS],
                 f"{name}: the first {STEPS} steps' losses are the same in both runs")
    calls = {call: per_step(short, long, call) for call in
             ("cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemCreate", "cuMemRelease")}
    waits = per_step(short, long, "cudaEventSynchronize", "host_waits")
    print(f"{name}: {units} units; driver calls per step: {calls}; cudaEventSynchronize per step: {waits}", flush=True)
    maps = calls["cuMemMap"] + calls["cuMemUnmap"]
    report.check(maps <= MAPS_PER_UNIT * units,
                 f"{name}: {maps} cuMemMap + cuMemUnmap calls per step, at most {MAPS_PER_UNIT} per unit "
                 f"({units} units)")
    creates = calls["cuMemCreate"] + calls["cuMemRelease"]
    bound = creates_per_map * maps
    report.check(creates <= bound, f"{name}: {creates} cuMemCreate + cuMemRelease calls per step, at most {bound}")
    report.check(calls["cuMemSetAccess"] == calls["cuMemMap"],
                 f"{name}: one cuMemSetAccess per cuMemMap ({calls['cuMemSetAccess']} vs {calls['cuMemMap']})")


def main():
    args = parse_args(__doc__)
    report = Report("ZeRO-3 maps and unmaps per range, not per chunk")
    with temporary_directory(args, "zt-gpu-vmm-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=32)
        check_setting(report, args.zerotune, workdir, model, data, "stage3", ZERO)
        check_setting(report, args.zerotune, workdir, model, data, "stage3-offload-param",
                      dict(ZERO, offload_param={"device": "cpu"}))
        # Units of whole chunks (a block of 46080 fp32 elements is 45 chunks, as a 7B block is 193
        # of a GPU's): units of equal size reuse each other's memory.
        config = os.path.join(workdir, "aligned-config.json")
        with open(os.path.join(REPO, "data", "tiny-llama", "config.json")) as stream:
            aligned = dict(json.load(stream), intermediate_size=176, num_hidden_layers=8)
        with open(config, "w") as stream:
            json.dump(aligned, stream)
        model, data = make_model_and_data(args.zerotune, workdir, samples=32, config=config, tag="-aligned")
        check_setting(report, args.zerotune, workdir, model, data, "stage3-aligned", ZERO, creates_per_map=ALIGNED_CREATES)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

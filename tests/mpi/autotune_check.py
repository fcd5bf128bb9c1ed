# `zerotune autotune` with a small memory budget (issue 20), shared by tests/mpi/test_autotune.py
# (the CPU backend, 2 ranks, --device-memory) and tests/gpu/test_gpu_autotune.py (the device,
# whose free memory is the budget: --device-memory-limit, on a GPU as on the emulated device).
# The budget is put in the widest gap between the memory model's predictions of the search
# space (`zerotune estimate --device D --json` for micro-batch 1, 2, 4), so that some settings
# fit and some do not. Checks:
#   - every experiment that ran was predicted within the budget, every pruned one over it, and
#     at least one was pruned;
#   - the chosen setting fits (its measured peak is within the budget) and is the fastest of
#     those measured (samples/s); ds_config_optimal.json holds its stage, offload and
#     micro-batch, cmd_optimal.txt the command to train with it, OUT/report.html its table and
#     plot;
#   - a budget nothing fits stops with a message naming the smallest need (bytes and setting).
import json
import os
import subprocess
import sys

from mpi_common import REPO, run_ranks
from oracle_common import OracleError

TOKENS = 32
MICRO_BATCHES = (1, 2, 4)


def make_inputs(zerotune, workdir):
    model = os.path.join(workdir, "model")
    data = os.path.join(workdir, "data")
    subprocess.run([zerotune, "init", "--config", os.path.join(REPO, "data", "tiny-llama", "config.json"), "--out",
                    model, "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", data,
                    "--samples", "32", "--vocab", "256", "--min-len", str(TOKENS), "--max-len", str(TOKENS), "--seed",
                    "0"], check=True, stdout=subprocess.DEVNULL)
    return model, data


def predicted_needs(zerotune, device, model, ds, ranks, stages):
    """{(stage, offload_optimizer, offload_param, checkpointing, micro_batch): bytes} from the estimate."""
    needs = {}
    for micro in MICRO_BATCHES:
        result = subprocess.run([zerotune, "estimate", "--model", model, "--deepspeed", ds, "--gpus-per-node",
                                 str(ranks), "--seq-len", str(TOKENS), "--micro-batch", str(micro), "--device", device,
                                 "--json"], capture_output=True, text=True)
        if result.returncode != 0:
            raise OracleError(f"zerotune estimate failed: {result.stderr[-2000:]}")
        for row in json.loads(result.stdout)["rows"]:
            if row["stage"] not in stages:
                continue
            for checkpointing, run in row["zerotune_run_by_checkpointing"].items():
                need = run["host_peak_bytes"] if device == "cpu" else max(run["device_peak_bytes"],
                                                                           run["device_setup_peak_bytes"])
                needs[(row["stage"], row["offload_optimizer"], row["offload_param"], checkpointing == "on", micro)] = need
    return needs


def widest_gap_budget(needs):
    values = sorted(set(needs.values()))
    if len(values) < 3:
        raise OracleError(f"the search space's predictions do not differ enough to place a budget: {values}")
    middle = values[len(values) // 4: len(values) - len(values) // 4 + 1]
    gaps = [(b - a, a, b) for a, b in zip(middle, middle[1:])]
    _, low, high = max(gaps)
    return (low + high) // 2


def check_autotune(report, zerotune, workdir, device, ranks):
    model, data = make_inputs(zerotune, workdir)
    ds = os.path.join(REPO, "data", "tiny-llama", "ds_config.json")
    stages = (0, 3)
    needs = predicted_needs(zerotune, device, model, ds, ranks, stages)
    budget = widest_gap_budget(needs)
    out = os.path.join(workdir, f"autotune-{device}")
    command = [zerotune, "autotune", "--model", model, "--data", data, "--out", out, "--deepspeed", ds, "--device",
               device, "--stages", "0,3", "--max-micro-batch", 4, "--trial-steps", 2, "--seed", 3]
    if device == "cpu":
        command += ["--device-memory", budget]
    else:  # the device's free memory is the budget: a GPU made that small (on a real GPU as here)
        command += ["--device-memory-limit", budget]
    run_ranks(ranks, command, timeout_s=600)
    results_dir = os.path.join(out, "autotuning_results")
    with open(os.path.join(results_dir, "results.json")) as stream:
        results = json.load(stream)
    experiments = results["experiments"]
    ran = [e for e in experiments if e["ran"]]
    pruned = [e for e in experiments if e["pruned"]]
    report.check(len(ran) >= 2, f"{device}: {len(ran)} experiments ran")
    report.check(len(pruned) >= 1, f"{device}: {len(pruned)} experiments were pruned by the budget of {budget} bytes "
                                   f"(results.json budget {results['budget_bytes']})")
    effective = results["budget_bytes"]
    report.check(abs(effective - budget) <= 0.05 * budget,
                 f"{device}: the search's budget {effective} is the one given, {budget} (within 5%)")
    for e in ran:
        report.check(e["memory_predicted_bytes"] <= effective, f"{device}: {e['name']} ran, predicted "
                                                               f"{e['memory_predicted_bytes']} <= {effective}")
    for e in pruned:
        report.check(e["memory_predicted_bytes"] > effective, f"{device}: {e['name']} pruned, predicted "
                                                              f"{e['memory_predicted_bytes']} > {effective}")
    best = next(e for e in experiments if e["name"] == results["optimal"])
    fastest = max(ran, key=lambda e: e["samples_per_sec"])
    report.check(best["name"] == fastest["name"],
                 f"{device}: the chosen {best['name']} ({best['samples_per_sec']:.3f} samples/s) is the fastest measured "
                 f"({fastest['name']}, {fastest['samples_per_sec']:.3f})")
    report.check(0 < best["memory_measured_bytes"] <= effective,
                 f"{device}: the chosen setting fits: measured {best['memory_measured_bytes']} <= budget {effective}")
    with open(os.path.join(results_dir, "ds_config_optimal.json")) as stream:
        optimal = json.load(stream)
    zero = optimal["zero_optimization"]
    report.check((zero["stage"], zero["offload_optimizer"]["device"], zero["offload_param"]["device"],
                  optimal["train_micro_batch_size_per_gpu"]) ==
                 (best["zero_stage"], best["offload_optimizer"], best["offload_param"],
                  best["train_micro_batch_size_per_gpu"]),
                 f"{device}: ds_config_optimal.json is the chosen setting: {zero}, "
                 f"micro-batch {optimal['train_micro_batch_size_per_gpu']}")
    with open(os.path.join(results_dir, "cmd_optimal.txt")) as stream:
        cmd = stream.read()
    report.check("ds_config_optimal.json" in cmd and cmd.startswith("zerotune train") and
                 (("--activation-checkpointing" in cmd) == best["activation_checkpointing"]),
                 f"{device}: cmd_optimal.txt trains with it: {cmd.strip()}")
    with open(os.path.join(out, "report.html")) as stream:
        page = stream.read()
    report.check("<svg" in page and best["name"] in page, f"{device}: report.html has the table and the plot")

    # A budget nothing fits: a clear message with the smallest need.
    smallest = min(needs.values())
    tiny = smallest // 2
    result, _ = run_ranks(ranks, [zerotune, "autotune", "--model", model, "--data", data, "--out",
                                  os.path.join(workdir, f"nothing-{device}"), "--deepspeed", ds, "--device", device,
                                  "--stages", "0,3", "--max-micro-batch", 4, "--trial-steps", 2, "--device-memory",
                                  tiny], expect_ok=False)
    report.check(result.returncode != 0, f"{device}: autotune with {tiny} bytes fails")
    report.check("no setting fits" in result.stderr and "the smallest need is" in result.stderr and
                 f"({smallest} bytes" in result.stderr,
                 f"{device}: the message names the smallest need ({smallest} bytes): {result.stderr[-700:]!r}")

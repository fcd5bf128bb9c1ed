"""The largest sequence length whose training run stays within a memory budget (part d of
bench/gpu_llama7b.sh). Each trial makes a shard of --steps samples of exactly SEQ tokens
(make_bench_data), runs ZEROTUNE_TRAIN_COMMAND + --data/--out/--deepspeed/--max-steps/
--micro-batch-size 1 for --steps steps, and reads the peak of --mem-key (metrics.jsonl; by
default mem_device_peak, the CUDA caching allocator's peak of memory in use) over those steps.
The search doubles SEQ from --start until a trial goes over the budget (or --max is passed),
then bisects in multiples of --granularity between the last fit and the first miss. With
--bracket LO,HI (a predicted boundary, e.g. from `zerotune estimate --max-seq-len`) it starts from
LO (should fit) and HI (should not), widening whichever end is wrong, and bisects between them.

--config is tried first; when zerotune refuses it and its message names offload_param (stage-3
parameter offload not implemented), the search says so and continues with --fallback-config.
A trial that fails with "out of memory" counts as over the budget; any other failure ends the
search with an error naming the trial and its log.

  seq_search.py --make-data BIN --work DIR --vocab V --budget-gib 24 --config A.json
                [--fallback-config B.json] [--mem-key mem_device_peak] [--start 2048]
                [--max 65536] [--granularity 256] [--steps 2] [--bracket LO,HI] --out PART.json
                -- ZEROTUNE train --model DIR --lora-r 16 ... (the rest of the train command)
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess

from bench_results import GIB, summarize_run


def offloads_parameters(config_path):
    """Whether a DeepSpeed JSON asks for stage-3 parameter offload to the CPU."""
    with open(config_path) as stream:
        zero = json.load(stream).get("zero_optimization", {})
    return zero.get("offload_param", {}).get("device") == "cpu"


class Search:
    def __init__(self, args, train_command):
        self.args = args
        self.train_command = train_command
        self.config = args.config
        self.fallback_reason = None
        self.trials = []   # {"seq", "peak", "fits", "command"} in the order run
        self.commands = []

    def log_tail(self, path, lines=25):
        with open(path, errors="replace") as stream:
            return "".join(stream.readlines()[-lines:])

    def run(self, command, log_path):
        self.commands.append(shlex.join(command))
        with open(log_path, "w") as log:
            return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode

    def fits(self, seq):
        """Runs one trial (once per seq); True when its peak memory is within the budget."""
        done = [t["fits"] for t in self.trials if t["seq"] == seq and t["config"] == self.config]
        if done:
            return done[0]
        a = self.args
        data = os.path.join(a.work, f"data-seq{seq}-n{a.steps}")
        if not os.path.exists(os.path.join(data, "train-00000.h5")):
            data_log = os.path.join(a.work, f"data-seq{seq}.log")
            if self.run([a.make_data, data, "--seq", str(seq), "--samples", str(a.steps), "--vocab", str(a.vocab)],
                        data_log) != 0:
                raise SystemExit(f"seq_search.py: make_bench_data failed for seq {seq}:\n{self.log_tail(data_log)}")
        name = os.path.splitext(os.path.basename(self.config))[0]
        out = os.path.join(a.work, f"search-{name}-seq{seq}")
        shutil.rmtree(out, ignore_errors=True)
        log_path = out + ".log"
        command = self.train_command + ["--data", data, "--out", out, "--deepspeed", self.config,
                                        "--max-steps", str(a.steps), "--micro-batch-size", "1"]
        print(f"seq_search: seq {seq} with {self.config} ...", flush=True)
        if self.run(command, log_path) != 0:
            tail = self.log_tail(log_path)
            if "out of memory" in tail:
                print(f"seq_search: seq {seq}: out of device memory (over the budget)", flush=True)
                self.trials.append({"seq": seq, "peak": None, "fits": False, "config": self.config,
                                    "note": "out of memory"})
                return False
            if self.fallback_reason is None and a.fallback_config and "offload_param" in tail:
                self.fallback_reason = tail.strip().splitlines()[-1]
                print(f"seq_search: *** zerotune refuses {self.config} (offload_param): {self.fallback_reason}\n"
                      f"seq_search: *** FALLING BACK to {a.fallback_config} (offload_optimizer only, parameters "
                      f"stay on the device)", flush=True)
                self.config = a.fallback_config
                return self.fits(seq)
            raise SystemExit(f"seq_search.py: the trial at seq {seq} failed (log {log_path}):\n{tail}")
        summary = summarize_run(out, skip_first=False)
        peak = summary[a.mem_key]
        if peak is None:
            raise SystemExit(f"seq_search.py: {out}/metrics.jsonl has no {a.mem_key} (a CPU run has no device "
                             f"memory: use --mem-key mem_host_peak there)")
        fits = peak <= a.budget_gib * GIB
        print(f"seq_search: seq {seq}: {a.mem_key} {peak / GIB:.3f} GiB ({peak} bytes) -> "
              f"{'fits' if fits else 'over the budget'}",
              flush=True)
        self.trials.append({"seq": seq, "peak": peak, "fits": fits, "config": self.config,
                            "tokens_per_sec": summary["tokens_per_sec"]})
        return fits

    def bracketed(self):
        """With --bracket LO,HI: LO must fit and HI must not (else the search widens that end by
        doubling the distance), so that a predicted boundary is checked in a few trials instead of
        doubling from --start (a trial at twice the boundary is what the doubling costs)."""
        a = self.args
        low, high = a.bracket
        while low > 0 and not self.fits(low):
            high, low = low, max(0, low - 2 * (high - low))
        if low == 0:
            return 0, high
        if not self.fits(high):
            return low, high
        while high <= a.max:
            low, high = high, high + 2 * (high - low)
            if not self.fits(high):
                return low, high
        return high, None

    def largest(self):
        a = self.args
        if a.bracket:
            fit, miss = self.bracketed()
        else:
            fit, miss = 0, None  # largest fitting seq (0: none yet), smallest seq over the budget
            seq = a.start
            while seq <= a.max:
                if not self.fits(seq):
                    miss = seq
                    break
                fit = seq
                seq *= 2
        if miss is None:
            return fit, True
        while miss - fit > a.granularity:
            middle = fit + max(1, (miss - fit) // 2 // a.granularity) * a.granularity
            if self.fits(middle):
                fit = middle
            else:
                miss = middle
        return fit, False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-data", required=True, help="the make_bench_data executable")
    parser.add_argument("--work", required=True, help="directory for the trials' data, runs and logs")
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--budget-gib", type=float, required=True)
    parser.add_argument("--config", required=True, help="DeepSpeed JSON tried first")
    parser.add_argument("--fallback-config", help="DeepSpeed JSON when zerotune refuses --config's offload_param")
    parser.add_argument("--mem-key", default="mem_device_peak", choices=["mem_device_peak", "mem_host_peak"])
    parser.add_argument("--start", type=int, default=2048)
    parser.add_argument("--max", type=int, default=65536)
    parser.add_argument("--granularity", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--bracket", help="LO,HI: start from this bracket (LO expected to fit, HI not), e.g. "
                                          "a predicted boundary and one granularity above it")
    parser.add_argument("--out", required=True, help="JSON file for the result")
    parser.add_argument("train_command", nargs=argparse.REMAINDER, help="-- ZEROTUNE train ...")
    args = parser.parse_args()
    train_command = args.train_command[1:] if args.train_command[:1] == ["--"] else args.train_command
    if not train_command:
        parser.error("the zerotune train command goes after --")
    if args.bracket:
        try:
            args.bracket = [int(v) for v in args.bracket.split(",")]
        except ValueError:
            parser.error(f"--bracket takes LO,HI (two token counts), not '{args.bracket}'")
        if len(args.bracket) != 2 or not 0 < args.bracket[0] < args.bracket[1]:
            parser.error(f"--bracket needs 0 < LO < HI, not {args.bracket}")
    elif args.start <= 0 or args.start % args.granularity or args.max < args.start:
        parser.error("--start must be a positive multiple of --granularity and at most --max")
    os.makedirs(args.work, exist_ok=True)

    search = Search(args, train_command)
    largest, capped = search.largest()
    result = {
        "largest_fitting_seq": largest or None,
        "capped": capped,
        "budget_gib": args.budget_gib,
        "mem_key": args.mem_key,
        "config": search.config,
        "offload_param": offloads_parameters(search.config),
        "fallback_reason": search.fallback_reason,
        "setup": f"{os.path.basename(search.config)}, micro-batch 1, {args.steps} steps, "
                 f"{shlex.join(train_command[1:])}",
        "trials": search.trials,
        "commands": search.commands,
    }
    with open(args.out, "w") as stream:
        json.dump(result, stream, indent=2)
    print(f"seq_search: largest seq within {args.budget_gib} GiB: "
          f"{'>= ' if capped else ''}{largest or 'none'} ({search.config})", flush=True)


if __name__ == "__main__":
    main()

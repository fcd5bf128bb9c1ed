"""Figures of bench/gpu_llama7b.sh: what a zerotune run measured, and the final table.

  bench_results.py summarize RUN_DIR --label TEXT [--all-steps]
      one JSON object from RUN_DIR/metrics.jsonl (stdout): tokens/s, TFLOPS, MFU and FLOPs per
      token over the steps after the first (the warm-up; --all-steps keeps it), peak device and
      host memory over all steps. seq_search.py imports summarize_run.
  bench_results.py report --parts DIR --commands FILE --out DIR
      merges DIR/*.json (settings.json from the driver, one file per measured part) and the
      commands the driver ran into OUT/results.json and prints the table (also OUT/table.md).

Means are over time, not over steps: tokens/s = tokens / seconds summed over the counted steps.
"""
import argparse
import glob
import json
import os
import sys

GIB = 1024.0 ** 3


def fail(message):
    raise SystemExit(f"bench_results.py: {message}")


def read_step_records(run_dir):
    """The per-step records of RUN_DIR/metrics.jsonl (evaluation records left out)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        fail(f"{path} is missing (did zerotune train run?)")
    with open(path) as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    return [r for r in records if "tokens_per_sec" in r]


def summarize_run(run_dir, skip_first=True):
    steps = read_step_records(run_dir)
    counted = steps[1:] if skip_first else steps
    if not counted:
        fail(f"{run_dir}/metrics.jsonl has {len(steps)} step records; need "
             f"{'2 (the first is a warm-up)' if skip_first else '1'}")
    seconds = sum(r["step_time"] for r in counted)
    tokens = sum(r["tokens"] for r in counted)
    flops = sum(r["tflops_per_rank"] * 1e12 * r["step_time"] for r in counted)  # one rank
    mfus = [r["mfu"] for r in counted]
    device_peaks = [r["mem_device_peak"] for r in steps if r.get("mem_device_peak") is not None]
    return {
        "steps_counted": len(counted),
        "steps_total": len(steps),
        "tokens_per_step": counted[0]["tokens"],
        "step_seconds": [r["step_time"] for r in steps],
        "losses": [r["loss"] for r in steps],
        "tokens_per_sec": tokens / seconds,
        "tflops": flops / seconds / 1e12,
        "flops_per_token": flops / tokens,
        "mfu": None if None in mfus else sum(m * r["step_time"] for m, r in zip(mfus, counted)) / seconds,
        "mem_device_peak": max(device_peaks) if device_peaks else None,
        "mem_host_peak": max(r["mem_host_peak"] for r in steps),
    }


def load_json(path):
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        fail(f"{path}: {error}")


def gib(value):
    return "-" if value is None else f"{value / GIB:.2f} GiB"


def percent(value):
    return "-" if value is None else f"{100.0 * value:.1f}%"


def table_lines(results):
    s = results["settings"]
    parts = results["parts"]
    lines = [f"machine: {s['machine']} | device {s['device']} | {s['date']} | commit {s['commit']}",
             f"model: {s['model']} ({s['model_config']}), seq {s['seq']}, micro-batch {s['batch']}, "
             f"{s['steps']} steps (the first is a warm-up and not counted), activation checkpointing "
             f"{s['activation_checkpointing']}", ""]
    gemm = parts.get("gemm")
    lines.append("GEMM peak: " + (f"{gemm['tflops']:.4g} TFLOPS ({gemm['what']})" if gemm else "not run"))
    lines += ["", "| case | tokens/s | TFLOPS | MFU | peak device memory | peak host RSS |", "|---|---|---|---|---|---|"]
    for key in ("zt_lora", "zt_full", "hf_lora"):
        part = parts.get(key)
        if part is None:
            lines.append(f"| {key}: not run | | | | | |")
            continue
        lines.append(f"| {part['label']} | {part['tokens_per_sec']:.1f} | "
                     f"{'-' if part.get('tflops') is None else format(part['tflops'], '.4g')} | {percent(part.get('mfu'))} | "
                     f"{gib(part.get('mem_device_peak'))} | {gib(part.get('mem_host_peak'))} |")
    if "ratio_lora_zt_over_hf" in results:
        lines.append(f"\nLoRA tokens/s, zerotune / HF+PEFT: {results['ratio_lora_zt_over_hf']:.2f}x")
    search = parts.get("seq_search")
    if search is None:
        lines.append("\nlargest sequence within the memory budget: not run")
    else:
        found = search["largest_fitting_seq"]
        text = "none (even the smallest tried does not fit)" if found is None else str(found)
        if search["capped"]:
            text = f">= {found} (the search stopped at its maximum)"
        where = "parameters offloaded to the CPU" if search["offload_param"] else "parameters on the device"
        lines.append(f"\nlargest sequence within {search['budget_gib']} GiB ({search['mem_key']}): {text} ({where}); "
                     f"{search['setup']}")
        if search.get("fallback_reason"):
            lines.append(f"  offload_param refused, fell back: {search['fallback_reason']}")
        lines.append("  trials: " + ", ".join(f"{t['seq']}:{'-' if t['peak'] is None else format(t['peak'] / GIB, '.3f')} GiB"
                                              f"{'' if t['fits'] else ' (over)'}"
                                              for t in search["trials"]))
    return lines


def report(args):
    settings_path = os.path.join(args.parts, "settings.json")
    results = {"settings": load_json(settings_path), "parts": {}}
    for path in sorted(glob.glob(os.path.join(args.parts, "*.json"))):
        if path != settings_path:
            results["parts"][os.path.splitext(os.path.basename(path))[0]] = load_json(path)
    parts = results["parts"]
    if "hf_lora" in parts and "zt_lora" in parts:
        # HF's MFU with the FLOPs per token zerotune counts for the same step.
        hf, zt = parts["hf_lora"], parts["zt_lora"]
        hf["label"] = f"HF transformers {hf['transformers']} + PEFT {hf['peft']} LoRA ({hf['attn_implementation']} attention)"
        hf["mem_device_peak"] = hf["max_memory_allocated"]
        hf["tflops"] = hf["tokens_per_sec"] * zt["flops_per_token"] / 1e12
        if "gemm" in parts:
            hf["mfu"] = hf["tflops"] / parts["gemm"]["tflops"]
        results["ratio_lora_zt_over_hf"] = zt["tokens_per_sec"] / hf["tokens_per_sec"]
    elif "hf_lora" in parts:
        parts["hf_lora"]["label"] = "HF transformers + PEFT LoRA"
        parts["hf_lora"]["mem_device_peak"] = parts["hf_lora"]["max_memory_allocated"]
    with open(args.commands) as stream:
        results["commands"] = [dict(zip(("part", "command"), line.rstrip("\n").split("\t", 1)))
                               for line in stream if line.strip()]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as stream:
        json.dump(results, stream, indent=2)
        stream.write("\n")
    lines = table_lines(results) + ["", "commands:"] + [f"  [{c['part']}] {c['command']}" for c in results["commands"]]
    with open(os.path.join(args.out, "table.md"), "w") as stream:
        stream.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("summarize")
    one.add_argument("run_dir")
    one.add_argument("--label", required=True)
    one.add_argument("--all-steps", action="store_true")
    rep = sub.add_parser("report")
    rep.add_argument("--parts", required=True)
    rep.add_argument("--commands", required=True)
    rep.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "summarize":
        summary = summarize_run(args.run_dir, skip_first=not args.all_steps)
        summary["label"] = args.label
        json.dump(summary, sys.stdout)
        print()
    else:
        report(args)


if __name__ == "__main__":
    main()

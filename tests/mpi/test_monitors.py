"""DeepSpeed's monitors (issue 35 item 6): a DeepSpeed JSON with "tensorboard" and "csv_monitor"
enabled makes rank 0 write the metrics where DeepSpeed would, output_path/job_name/, read back
here by readers that share nothing with zerotune's writers:
 - the TensorBoard event file through TensorBoard's own EventAccumulator (and, record by record,
   its TFRecord framing: lengths and masked CRC-32C checked with TensorBoard's crc32c, each
   record parsed with TensorBoard's event.proto); every scalar equals metrics.jsonl's figure
   (as float32) at DeepSpeed's x axis, samples consumed = step x train_batch_size;
 - DeepSpeed's CSV layout: one file per metric, header "step,<name>", rows equal to
   metrics.jsonl's (the exact doubles);
 - a resumed run (from the checkpoint at step 2 of 3) leaves each CSV and TensorBoard's view
   with one row per step, the re-run step's; a new run with the same job names leaves that run's
   rows alone (each event file starts with a SessionLog START, TensorBoard's restart marker).
3 steps of the tiny LLaMA on 2 ranks, ZeRO-2, fp16 (so the loss scale is logged, as DeepSpeed
does only then), evaluating every step. An objective's own figures go the same way: 2 steps of
DPO with LoRA on pairs, evaluating every step, log TRL's rewards/* and logps/* under
Train/Samples/ and their eval_ forms under Eval/Samples/. tensorboard and protobuf are PyPI pins of
tests/oracle/requirements.txt: missing, the test fails."""
import csv
import glob
import json
import os
import struct
import subprocess
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from mpi_common import (REPO, Report, main_guard, make_model_and_data, parse_args, run_ranks,
                        temporary_directory, write_ds_config)

TRAIN_BATCH = 8
FIGURES = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")
STEPS = 3
# tag -> metrics.jsonl key, for the step records and the evaluation records
STEP_TAGS = {"Train/Samples/train_loss": "loss", "Train/Samples/lr": "lr", "Train/Samples/grad_norm": "grad_norm",
             "Train/Samples/loss_scale": "loss_scale", "Train/Samples/samples_per_sec": "samples_per_sec",
             "Train/Samples/tokens_per_sec": "tokens_per_sec", "Train/Samples/step_time": "step_time",
             "Train/Samples/mem_host_rss": "mem_host_rss", "Train/Samples/mem_host_peak": "mem_host_peak"}
EVAL_TAGS = {"Eval/Samples/eval_loss": "eval_loss", "Eval/Samples/eval_ppl": "eval_ppl"}


def read_records(out):
    """metrics.jsonl: (step records, evaluation records)."""
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    return [r for r in records if "loss" in r], [r for r in records if "eval_loss" in r]


def expected_series(step_records, eval_records):
    """tag -> [(samples, value)] as metrics.jsonl has them."""
    series = {}
    for tags, records in ((STEP_TAGS, step_records), (EVAL_TAGS, eval_records)):
        for tag, key in tags.items():
            series[tag] = [(r["step"] * TRAIN_BATCH, r[key]) for r in records]
    return series


def check_framing(report, path):
    """Walks the TFRecords of one event file: every length and payload CRC matches, the file ends
    on a record boundary, the first event is the file version. Returns the parsed events."""
    with open(path, "rb") as stream:
        data = stream.read()
    events, offset, bad = [], 0, 0
    while offset < len(data) and offset + 12 <= len(data):
        length_bytes = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
        bad += int(length_crc != masked_crc32c(length_bytes) or payload_crc != masked_crc32c(payload))
        event = event_pb2.Event()
        event.ParseFromString(payload)
        events.append(event)
        offset += 16 + length
    name = os.path.basename(path)
    report.check(offset == len(data) and bad == 0,
                 f"{name}: {len(events)} TFRecords, every masked CRC-32C right ({bad} wrong), no bytes left over")
    report.check(bool(events) and events[0].file_version.startswith("brain.Event:"),
                 f"{name}: starts with the file_version event ({events[0].file_version if events else 'none'!r})")
    return events


def check_tensorboard(report, label, directory, expected, event_files):
    """TensorBoard's reader over the directory sees exactly `expected` (as float32)."""
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    report.check(len(files) == event_files, f"{label}: {len(files)} event file(s) in {directory}, want {event_files}")
    for path in files:
        check_framing(report, path)
    accumulator = EventAccumulator(directory, size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = sorted(accumulator.Tags()["scalars"])
    report.check(tags == sorted(expected), f"{label}: TensorBoard's scalar tags {tags}")
    for tag, want in expected.items():
        if tag not in tags:
            continue
        got = [(event.step, event.value) for event in accumulator.Scalars(tag)]
        want32 = [(step, float(np.float32(value))) for step, value in want]
        report.check(got == want32, f"{label}: TensorBoard {tag} = metrics.jsonl's {want32}" +
                     ("" if got == want32 else f", got {got}"))


def check_csv(report, label, directory, expected):
    """DeepSpeed's layout: Train_Samples_lr.csv with "step,lr" and one row per write."""
    names = sorted(os.listdir(directory))
    want_names = sorted(tag.replace("/", "_") + ".csv" for tag in expected)
    report.check(names == want_names, f"{label}: CSV files {names}")
    for tag, want in expected.items():
        path = os.path.join(directory, tag.replace("/", "_") + ".csv")
        if not os.path.exists(path):
            continue
        with open(path, newline="") as stream:
            rows = list(csv.reader(stream))
        header = ["step", tag.rsplit("/", 1)[1]]
        got = [(int(step), float(value)) for step, value in rows[1:]]
        report.check(rows[:1] == [header] and got == want,
                     f"{label}: {os.path.basename(path)}: header {rows[:1]}, rows = metrics.jsonl's {want}" +
                     ("" if got == want else f", got {got}"))


def check_objective_figures(report, zerotune, workdir, model, ds, config):
    """DPO's step and evaluation figures in TensorBoard and the CSV files, as metrics.jsonl has them."""
    from test_reward_zero import write_pairs
    pairs = os.path.join(workdir, "pairs")
    write_pairs(os.path.join(pairs, "train-00000.h5"), seed=5)
    config = dict(config, tensorboard={"enabled": True, "output_path": "logs/tb", "job_name": "dpo_tensorboard"},
                  csv_monitor={"enabled": True, "output_path": "logs/csv/", "job_name": "dpo_csv"})
    config.pop("fp16")
    dpo_ds = os.path.join(workdir, "dpo.json")
    with open(dpo_ds, "w") as stream:
        json.dump(config, stream)
    out = os.path.join(workdir, "dpo")
    run_ranks(1, [zerotune, "train", "--objective", "dpo", "--lora-r", 4, "--model", model, "--data", pairs,
                  "--eval-data", pairs, "--eval-every", 1, "--out", out, "--deepspeed", dpo_ds, "--max-steps", 2,
                  "--seed", 3])
    with open(os.path.join(out, "metrics.jsonl")) as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_rewards/accuracies" in r]
    # Every tag of an sft run but the loss scale (bf16/fp32: none) and the perplexity, plus the figures.
    step_tags = {tag: key for tag, key in STEP_TAGS.items() if key != "loss_scale"}
    step_tags.update({"Train/Samples/" + key: key for key in steps[0] if "/" in key})
    eval_tags = {"Eval/Samples/" + key: key for key, value in evals[0].items()
                 if key.startswith("eval_") and isinstance(value, float)}  # not the counts
    expected = {tag: [(r["step"] * TRAIN_BATCH, r[key]) for r in records_of]
                for tags, records_of in ((step_tags, steps), (eval_tags, evals)) for tag, key in tags.items()}
    named = {"Train/Samples/" + name for name in FIGURES} | {"Eval/Samples/eval_" + name for name in FIGURES}
    report.check(named <= set(expected), f"dpo: TRL's figures are logged: {sorted(named - set(expected))} missing")
    report.check(len(steps) == 2 and len(evals) == 2, f"dpo: 2 steps and 2 evaluations ({len(steps)}, {len(evals)})")
    check_tensorboard(report, "dpo", os.path.join("logs", "tb", "dpo_tensorboard"), expected, 1)
    check_csv(report, "dpo", os.path.join("logs", "csv", "dpo_csv"), expected)


def main():
    args = parse_args(__doc__)
    args.zerotune = os.path.abspath(args.zerotune)  # the runs start in the work directory
    report = Report("DeepSpeed's tensorboard and csv_monitor: files TensorBoard and DeepSpeed's readers take")
    with temporary_directory(args, "zt-monitors-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=32)
        eval_data = os.path.join(workdir, "eval")
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "oracle", "make_token_shard.py"), "--out", eval_data,
                        "--samples", "8", "--vocab", "256", "--min-len", "16", "--max-len", "48", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        ds = write_ds_config(os.path.join(workdir, "ds.json"), TRAIN_BATCH, 2, {"stage": 2})
        with open(ds) as stream:
            config = json.load(stream)
        logs = os.path.join(workdir, "logs")
        config["fp16"] = {"enabled": True, "initial_scale_power": 8}
        config["tensorboard"] = {"enabled": True, "output_path": "logs/tb", "job_name": "sft_tensorboard"}
        config["csv_monitor"] = {"enabled": True, "output_path": "logs/csv/", "job_name": "sft_csv"}
        config["wandb"] = {"enabled": False, "project": "sft"}
        with open(ds, "w") as stream:
            json.dump(config, stream)
        out = os.path.join(workdir, "out")
        def train(out, steps, *extra):
            return run_ranks(2, [args.zerotune, "train", "--model", model, "--data", data, "--out", out, "--deepspeed",
                                 ds, "--max-steps", steps, "--eval-data", eval_data, "--eval-every", 1, "--seed", 3,
                                 *extra])

        os.chdir(workdir)  # the relative output_paths are under the working directory, as in DeepSpeed
        result, seconds = train(out, STEPS, "--save-every", 2, "--no-save-at-end")
        tb_dir = os.path.join(logs, "tb", "sft_tensorboard")
        csv_dir = os.path.join(logs, "csv", "sft_csv")
        report.check(f"tensorboard: event file {os.path.join('logs/tb', 'sft_tensorboard')}" in result.stdout and
                     f"csv_monitor: one CSV per metric in {os.path.join('logs/csv/', 'sft_csv')}" in result.stdout,
                     f"the log says where the files go ({seconds:.1f} s)")
        steps, evals = read_records(out)
        report.check([r["step"] for r in steps] == [1, 2, 3] and [r["step"] for r in evals] == [1, 2, 3],
                     "metrics.jsonl: 3 steps, 3 evaluations")
        expected = expected_series(steps, evals)
        check_tensorboard(report, "first run", tb_dir, expected, 1)
        check_csv(report, "first run", csv_dir, expected)

        # Resumed from step 2: step 3 runs again; each CSV and TensorBoard's view keep one row per step.
        train(out, STEPS, "--resume", "auto")
        steps, evals = read_records(out)
        report.check([r["step"] for r in steps] == [1, 2, 3], "resumed: metrics.jsonl has steps 1, 2, 3 once each")
        expected = expected_series(steps, evals)
        check_tensorboard(report, "resumed", tb_dir, expected, 2)
        check_csv(report, "resumed", csv_dir, expected)

        # A new run with the same job names (another --out, 1 step): TensorBoard's view and the CSV
        # files hold that run alone, as its metrics.jsonl does.
        new_out = os.path.join(workdir, "out-new")
        train(new_out, 1)
        steps, evals = read_records(new_out)
        expected = expected_series(steps, evals)
        report.check([r["step"] for r in steps] == [1] and all(len(rows) == 1 for rows in expected.values()),
                     "new run: 1 step in its metrics.jsonl")
        check_tensorboard(report, "new run", tb_dir, expected, 3)
        check_csv(report, "new run", csv_dir, expected)
        check_objective_figures(report, args.zerotune, workdir, model, ds, config)
        os.chdir(REPO)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

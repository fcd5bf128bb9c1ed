"""SIGTERM to a plain `mpirun` (issue 17): Open MPI passes it on to the ranks and kills them
odls_base_sigkill_timeout seconds later (1 by default, too soon for a checkpoint). With the
README's line, `mpirun --mca odls_base_sigkill_timeout 600 ...`, every rank finishes its step,
the job saves a checkpoint and the ranks exit 0; `--resume auto` then continues from it."""
import json
import os
import signal
import subprocess
import time

from mpi_common import MPI_ENV, Report, main_guard, make_model_and_data, parse_args, temporary_directory

STEPS = 2000  # far more than run before the signal


def main():
    args = parse_args(__doc__)
    report = Report("SIGTERM to plain mpirun saves a checkpoint when the kill timeout is the README's")
    with temporary_directory(args, "zt-mpirun-term-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=32)
        out = os.path.join(workdir, "out")
        train = [args.zerotune, "train", "--model", model, "--data", data, "--out", out, "--micro-batch-size", "2",
                 "--grad-accum", "1", "--max-steps", str(STEPS), "--zero-stage", "2"]
        command = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "--mca", "odls_base_sigkill_timeout",
                   "600"] + train
        print("mpi: running " + " ".join(command), flush=True)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=dict(os.environ, **MPI_ENV))
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 2:
                break
            time.sleep(0.1)
        report.check(process.poll() is None, "the job is still running after 2 steps")
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            report.fail("the job did not end within 120 s of SIGTERM")
        print(output[-3000:], flush=True)
        latest = os.path.join(out, "checkpoints", "latest")
        tag = open(latest).read().strip() if os.path.exists(latest) else ""
        report.check("stop requested (signal)" in output, "the ranks saw the stop request")
        report.check(tag.startswith("global_step") and
                     os.path.exists(os.path.join(out, "checkpoints", tag, "manifest.json")),
                     f"a complete checkpoint was saved ({tag!r})")
        report.check("Killed" not in output and "SIGKILL" not in output, "no rank was killed")
        if tag:
            saved = int(tag[len("global_step"):])
            resumed = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] +
                                     [a if a != str(STEPS) else str(saved + 1) for a in train] + ["--resume", "auto"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                                     env=dict(os.environ, **MPI_ENV))
            report.check(resumed.returncode == 0 and f"at step {saved}" in resumed.stdout,
                         f"--resume auto continues from step {saved} (exit {resumed.returncode})")
            steps = [json.loads(line)["step"] for line in open(metrics) if line.strip()]
            report.check(steps == list(range(1, saved + 2)), f"metrics steps 1..{saved + 1}: {steps}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

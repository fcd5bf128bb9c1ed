# Which device and communicator a job gets by default (issue 14; label gpu-emu on the emulated
# device): `train` without --device runs on the GPU, and --comm auto tells ranks that share a
# GPU from ranks that each see one GPU through their own CUDA_VISIBLE_DEVICES by the GPUs' PCI
# bus ids; a job whose ranks resolve --device auto differently stops saying which ranks differ.
# And a GPU job fails fast: a rank that throws ends an NCCL job within seconds (its NCCL
# communicators are aborted, not finalized, which would wait out --comm-timeout), a rank that
# hangs ends it after --comm-timeout (rank 0 names the collective and the step), and NCCL older
# than 2.26 (no NCCL_LAUNCH_ORDER_IMPLICIT) runs every collective on one communicator.
# The emulated device has 8 GPUs; a real node may have one: then the cases that need two GPUs
# (two ranks on two GPUs, per-task masks, NCCL's abort, a hanging rank, the old-NCCL path) are
# reported as NOT RUN and the one-GPU cases (ranks sharing the GPU, a rank without a GPU) run; the
# old-NCCL case needs the emulator's ZT_EMU_NCCL_VERSION. CI runs it on the emulated device with 8
# GPUs and with one (ZT_EMU_DEVICES=1: gpu-emu.gpu_device_choice.one-gpu), as on such a node.
import os
import re
import stat
import time

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from device_sizing import EMULATED
from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_run, run_ranks, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("--device auto and --comm auto choose the GPU and NCCL as a cluster job needs")
    with temporary_directory(args, "zt-device-choice-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=16)
        # A launcher wrapper: each rank's CUDA_VISIBLE_DEVICES from VISIBLE_<rank>, else its local rank
        # (what srun --gpu-bind or a per-task mask gives).
        wrapper = os.path.join(workdir, "visible.sh")
        with open(wrapper, "w") as stream:
            stream.write('#!/bin/sh\nrank=$OMPI_COMM_WORLD_RANK\neval "mask=\\${VISIBLE_$rank-$OMPI_COMM_WORLD_LOCAL_RANK}"\n'
                         'export CUDA_VISIBLE_DEVICES="$mask"\nexec "$@"\n')
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)

        def train(name, env=None, extra=(), wrap=True, expect_ok=True, steps=1):
            out = os.path.join(workdir, name)
            command = ([wrapper] if wrap else []) + [args.zerotune, "train", "--model", model, "--data", data, "--out",
                                                     out, "--max-steps", steps, "--micro-batch-size", 2] + list(extra)
            saved = dict(os.environ)
            os.environ.update(env or {})
            try:
                result, _ = run_ranks(2, command, expect_ok=expect_ok)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            return out, result

        out, _ = train("default", wrap=False)
        run = read_run(out)
        visible = re.match(r"auto: (\d+) CUDA devices? visible", run["device_reason"])
        gpus = int(visible.group(1)) if visible else 0
        report.check(run["device"] == "cuda" and gpus >= 1, f"no --device: cuda, because {run['device_reason']!r}")
        if EMULATED:
            emulated_gpus = int(os.environ.get("ZT_EMU_DEVICES", "8"))
            report.check(gpus == emulated_gpus,
                         f"the emulated device shows its {emulated_gpus} GPUs (ZT_EMU_DEVICES): {run['device_reason']!r}")
        need_two = f"needs 2 GPUs, this node has {gpus}"
        if gpus >= 2:
            report.check(run["communicator"] == "nccl",
                         f"two ranks on two GPUs: {run['communicator']} ({run['communicator_reason']})")
            out, _ = train("per-task-mask")
            run = read_run(out)
            report.check(run["device_reason"].startswith("auto: 1 CUDA device visible"),
                         f"per-task mask: {run['device_reason']!r}")
            report.check(run["communicator"] == "nccl" and "own GPU" in run["communicator_reason"],
                         f"each rank sees device 0 of a different GPU: {run['communicator']} ({run['communicator_reason']})")
        else:
            report.check(run["communicator"] != "nccl" and "ranks 0 and 1 share GPU" in run["communicator_reason"],
                         f"two ranks on the one GPU share it: {run['communicator']} ({run['communicator_reason']})")
            report.skip("two ranks on two GPUs choose NCCL", need_two)
            report.skip("per-task CUDA_VISIBLE_DEVICES masks (each rank sees device 0 of a different GPU)", need_two)

        # Both ranks on one GPU (the emulator's device 3, whose PCI bus id is 0000:04:00.0, or its
        # last of fewer; a real node's last GPU).
        shared = str(min(3, gpus - 1))
        out, _ = train("shared", env={"VISIBLE_0": shared, "VISIBLE_1": shared})
        run = read_run(out)
        any_bus_id = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9]"
        bus_id = f"0000:{int(shared) + 1:02x}:00.0" if EMULATED else any_bus_id
        report.check(run["communicator"] != "nccl" and re.search(f"ranks 0 and 1 share GPU {bus_id}", run["communicator_reason"]),
                     f"both ranks on one GPU: {run['communicator']} ({run['communicator_reason']})")

        _, result = train("shared-nccl", env={"VISIBLE_0": shared, "VISIBLE_1": shared}, extra=["--comm", "nccl"],
                          expect_ok=False)
        report.check(result.returncode != 0 and "--comm nccl: ranks 0 and 1 share GPU" in result.stderr,
                     f"--comm nccl on a shared GPU is refused: {result.stderr[-300:]!r}")

        start = time.monotonic()
        out, result = train("throw", env={"ZT_FAULT": "throw:step:1:2"}, wrap=False, expect_ok=False,
                            extra=["--comm-timeout", "60", "--zero-stage", "3"], steps=3)
        seconds = time.monotonic() - start
        communicator = read_run(out)["communicator"] if os.path.exists(os.path.join(out, "run.json")) else "?"
        report.check(result.returncode != 0 and "injected fault" in result.stderr and seconds < 30,
                     f"a rank that throws ends the {communicator} job in {seconds:.1f} s (--comm-timeout 60)")
        if gpus < 2:
            report.skip("a rank that throws ends an NCCL job (its communicators aborted)", need_two)

        # A rank that hangs in step 2 (inside backward, ZeRO-3's reduce-scatters pending): rank 0's
        # collective wait times out after --comm-timeout, names the collective and the step, aborts
        # the NCCL communicators, and the job ends (the watchdog a deferred wait must keep).
        if gpus >= 2:
            start = time.monotonic()
            out, result = train("hang", env={"ZT_FAULT": "hang:step:1:2"}, wrap=False, expect_ok=False,
                                extra=["--comm", "nccl", "--comm-timeout", "5", "--zero-stage", "3"], steps=3)
            seconds = time.monotonic() - start
            timed_out = re.search(r"error \(rank 0\): collective (\w+) did not complete within 5 s on rank 0 \(step 2\) "
                                  r"\(NCCL communicators aborted", result.stderr)
            report.check(result.returncode != 0 and timed_out is not None and seconds < 5 + 30,
                         f"a rank that hangs in step 2 ends the NCCL job in {seconds:.1f} s (--comm-timeout 5), "
                         f"rank 0 naming the collective ({timed_out.group(1) if timed_out else result.stderr[-400:]!r})")
        else:
            report.skip("a rank that hangs ends an NCCL job after --comm-timeout (its communicators aborted)", need_two)

        if EMULATED and gpus >= 2:
            out, result = train("old-nccl", env={"ZT_EMU_NCCL_VERSION": "22505"}, wrap=False, extra=["--zero-stage", "3"])
            report.check("NCCL 2.25.5 is older than 2.26" in result.stderr and read_run(out)["communicator"] == "nccl",
                         f"NCCL 2.25.5: one communicator for every collective, said once: {result.stderr[-300:]!r}")
        else:
            report.skip("NCCL older than 2.26 runs every collective on one communicator",
                        "needs the emulated device's ZT_EMU_NCCL_VERSION and 2 GPUs")

        _, result = train("mixed", env={"VISIBLE_0": "", "VISIBLE_1": "0"}, expect_ok=False)
        report.check(result.returncode != 0 and "resolved differently" in result.stderr and "cpu on rank(s) 0" in result.stderr,
                     f"a rank without a GPU stops the job, named: {result.stderr[-300:]!r}")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

# `zerotune selftest` on the CUDA backend (label gpu-emu: the emulated device, 2 ranks, NCCL):
# every op against the CPU backend in the run's dtypes, GEMM plans, NCCL collectives, pinned
# bandwidth, throughput and memory pass; a kernel that computes a wrong result
# (ZT_SELFTEST_INJECT_FAULT, test-only) fails the run, naming the op, the dtype, the rank and the host.
import json
import os
import re

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, run_ranks, temporary_directory


def main():
    args = parse_args(__doc__)
    report = Report("zerotune selftest on the GPU")
    with temporary_directory(args, "zt-gpu-selftest-") as workdir:
        model, _ = make_model_and_data(args.zerotune, workdir, samples=8)
        ds = os.path.join(workdir, "ds.json")
        with open(ds, "w") as stream:
            json.dump({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 3}}, stream)
        command = [args.zerotune, "selftest", "--model", model, "--deepspeed", ds, "--device", "cuda", "--comm-bytes", "65536",
                   "--gemm-size", "64", "--seq-len", "16"]
        result, _ = run_ranks(2, command)
        out = result.stdout
        report.check("selftest: every check passed (2 ranks)" in out, "every check passed")
        # Two ranks on one GPU cannot use NCCL (it refuses two ranks on one device): zerotune says so
        # and stages through MPI; the emulated device shows 8 GPUs, so there both ranks have their own.
        shared = re.search(r"communicator (\S+) \([^)]*ranks 0 and 1 share GPU", out)
        if shared:
            report.check(shared.group(1) != "nccl", f"two ranks on the one GPU share it: communicator {shared.group(1)}")
            report.skip("the collectives went through NCCL", "needs 2 GPUs, this node has 1")
        else:
            report.check("communicator nccl" in out, "the collectives went through NCCL")
        lines = out.splitlines()
        for check in ("op attention", "op rmsnorm", "op adamw", "gemm 16x64 <- 172", "all_reduce", "all_gather",
                      "pinned host -> device", "gemm 64^3 throughput", "memory: predicted need vs free"):
            report.check(any(line.startswith(check) and " ok " in line for line in lines), f"row '{check}' ok")
        report.check(any(line.startswith("op attention") and " bf16 " in line for line in lines),
                     "ops are checked in the run's dtype (bf16)")

        os.environ["ZT_SELFTEST_INJECT_FAULT"] = "rmsnorm:bf16"
        try:
            result, _ = run_ranks(2, command, expect_ok=False)
        finally:
            del os.environ["ZT_SELFTEST_INJECT_FAULT"]
        out = result.stdout
        report.check(result.returncode != 0, f"a wrong kernel result: exit status {result.returncode}")
        for rank in (0, 1):
            report.check(f"FAILED: op rmsnorm (bf16) on rank {rank} (host " in out, f"rank {rank}'s failure is named")
        report.check(not any(line.startswith("op attention") and "FAILED" in line for line in out.splitlines()),
                     "only the broken op fails")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

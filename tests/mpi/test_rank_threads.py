"""Threads per rank (issue 35 item 4). Two ranks on one node without OMP_NUM_THREADS used to
start a thread per core each (8-15x slower): zerotune now gives each rank its share of the CPUs
it may run on (the affinity mask, divided among the ranks of the node that share it), says so in
the start banner and records what OpenMP and OpenBLAS run with in run.json; an OMP_NUM_THREADS
that makes the ranks oversubscribe the cores is kept, and warned about once per node."""
import json
import os
import subprocess

from mpi_common import MPI_ENV, Report, main_guard, make_model_and_data, mpiexec, parse_args, temporary_directory


def train(zerotune, model, data, out, omp_threads):
    """2 ranks, 1 step; OMP_NUM_THREADS=omp_threads, or unset (with OPENBLAS_NUM_THREADS) when None."""
    env = dict(os.environ, **MPI_ENV)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(name, None)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    command = mpiexec(2, [zerotune, "train", "--model", model, "--data", data, "--out", out, "--max-steps", "1",
                          "--micro-batch-size", "2", "--no-save-at-end"])
    print("mpi: running " + " ".join(command) + f"  with OMP_NUM_THREADS={omp_threads}", flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    print(result.stdout + result.stderr, flush=True)
    with open(os.path.join(out, "run.json")) as stream:
        return result, json.load(stream).get("threads", {})


def main():
    args = parse_args(__doc__)
    report = Report("threads per rank: the CPUs shared among the ranks of a node, oversubscription warned")
    # mpiexec --bind-to none: each rank may run on this process's CPUs.
    cpus = len(os.sched_getaffinity(0))
    expected = max(1, cpus // 2)
    with temporary_directory(args, "zt-threads-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir, samples=8)

        result, threads = train(args.zerotune, model, data, os.path.join(workdir, "unset"), None)
        report.check(result.returncode == 0, f"unset: exit status {result.returncode}")
        banner = [line for line in result.stdout.splitlines() if line.startswith("threads: ")]
        report.check(len(banner) == 1 and banner[0].startswith(f"threads: {expected} OpenMP/OpenBLAS threads per rank ")
                     and "OMP_NUM_THREADS unset" in banner[0] and "shared by 2 of the 2 ranks" in banner[0],
                     f"unset: the banner says {expected} threads per rank ({cpus} CPUs, 2 ranks), once: {banner}")
        report.check(threads.get("openmp") == expected and threads.get("openblas") == expected
                     and threads.get("chosen_by") == "zerotune",
                     f"unset: OpenMP and OpenBLAS run {expected} threads (run.json: {threads})")
        report.check("warning" not in result.stderr, "unset: no warning")

        many = max(2, cpus)  # 2 ranks x `many` threads > `cpus` cores
        result, threads = train(args.zerotune, model, data, os.path.join(workdir, "over"), many)
        report.check(result.returncode == 0, f"OMP_NUM_THREADS={many}: exit status {result.returncode}")
        warnings = [line for line in result.stderr.splitlines() if "warning: OMP_NUM_THREADS=" in line]
        report.check(len(warnings) == 1 and f"OMP_NUM_THREADS={many} with 2 ranks on the same {cpus} CPUs" in warnings[0]
                     and f"to let zerotune choose {expected}" in warnings[0],
                     f"OMP_NUM_THREADS={many} on {cpus} CPUs x 2 ranks: warned once per node ({len(warnings)} lines)")
        report.check(threads.get("openmp") == many and threads.get("oversubscribed"),
                     f"OMP_NUM_THREADS={many}: kept, recorded as oversubscribed (run.json: {threads})")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

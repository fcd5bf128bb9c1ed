# GPU (label gpu; on the emulated device gpu-emu): 1-bit Adam (issue 16) on the CUDA backend with
# both exchanges: comm_backend_name "nccl" (NCCL send/recv all-to-all and all-gathers of the
# packed signs, the packing kernels on the device) and "mpi" (the signs packed in host memory and
# sent over MPI), at ZeRO stages 0 and 1 (with optimizer offload) on 2 ranks. Against the CPU
# backend's run of the same case: the warm-up within float reassociation; after the freeze the
# signs of elements near zero may differ by an ulp between the backends, so the losses are held
# to 1e-3 relative; and the compressed bytes per step are the CPU run's (the same exchange).
# Without a GPU every run fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_onebit_adam import FREEZE, OPTIMIZER, STEPS, compare, train

CASES = ((0, "none"), (1, "cpu"))


def main():
    args = parse_args(__doc__)
    report = Report("1-bit Adam on the CUDA backend: NCCL and MPI exchanges against the CPU backend")
    with temporary_directory(args, "zt-gpu-onebit-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        for stage, offload in CASES:
            cpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"cpu-s{stage}",
                           extra=["--device", "cpu"])
            for backend_name in ("nccl", "mpi"):
                optimizer = dict(OPTIMIZER, params=dict(OPTIMIZER["params"], comm_backend_name=backend_name))
                gpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"gpu-s{stage}-{backend_name}",
                               extra=["--device", "cuda"], optimizer=optimizer)
                label = f"stage {stage} offload {offload}, {backend_name} exchange"
                compare(report, f"{label}: warm-up vs the CPU backend", gpu, cpu, FREEZE, weights=False)
                got, ref = read_metrics(gpu), read_metrics(cpu)
                report.check(len(got) == STEPS, f"{label}: {len(got)} steps")
                for g, r in list(zip(got, ref))[FREEZE:]:
                    report.check(abs(g["loss"] - r["loss"]) <= 1e-3 * abs(r["loss"]),
                                 f"{label}: step {r['step']} loss {g['loss']:.6g} vs CPU {r['loss']:.6g}")
                if backend_name == "nccl":  # the device communicator counts the exchange (MPI's is not the control's)
                    sent = lambda r: r["comm_bytes_sent"]["all_to_all"]  # noqa: E731
                    report.check(all(sent(g) == sent(r) > 0 for g, r in list(zip(got, ref))[FREEZE:]),
                                 f"{label}: the same all-to-all bytes per compressed step as the CPU run")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

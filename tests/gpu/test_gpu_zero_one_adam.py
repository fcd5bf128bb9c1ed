# GPU (label gpu; on the emulated device gpu-emu): 0/1 Adam (issue 16) on the CUDA backend with
# both exchanges: comm_backend_name "nccl" (the compressed gradients and the synchronisations
# through NCCL send/recv and all-gathers, packing and adam_denominator_scale on the device) and
# "mpi" (the exchanges, the replica and the local steps in host memory, sent over MPI), at ZeRO
# stages 0 and 1 (with optimizer offload) on 2 ranks. Against the CPU backend's run of the same
# case: the variance steps within float reassociation; after them the backends' last-bit
# differences (signs of elements near zero in the exchanges) are amplified by the local steps
# (2.6e-3 relative by step 12 on the emulated device, 1e-9 before the local steps), so those
# losses are held to LOCAL_REL; the exchanged bytes per step are the CPU run's, step by step.
# Without a GPU every run fails with zerotune's message (this test never skips).
from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_onebit_adam import compare, train
from test_zero_one_adam import OPTIMIZER, PARAMS, STEPS

CASES = ((0, "none"), (1, "cpu"))
VARIANCE_STEPS = 3  # updates 1-3 reduce the gradients exactly (test_zero_one_adam.py's schedule)
LOCAL_REL = 1e-2


def main():
    args = parse_args(__doc__)
    report = Report("0/1 Adam on the CUDA backend: NCCL and MPI exchanges against the CPU backend")
    with temporary_directory(args, "zt-gpu-zoadam-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        for stage, offload in CASES:
            cpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"cpu-s{stage}",
                           steps=STEPS, extra=["--device", "cpu"], optimizer=OPTIMIZER)
            for backend_name in ("nccl", "mpi"):
                optimizer = dict(OPTIMIZER, params=dict(PARAMS, comm_backend_name=backend_name))
                gpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"gpu-s{stage}-{backend_name}",
                               steps=STEPS, extra=["--device", "cuda"], optimizer=optimizer)
                label = f"stage {stage} offload {offload}, {backend_name} exchange"
                compare(report, f"{label}: variance steps vs the CPU backend", gpu, cpu, VARIANCE_STEPS, weights=False)
                got, ref = read_metrics(gpu), read_metrics(cpu)
                report.check(len(got) == STEPS, f"{label}: {len(got)} steps")
                for g, r in list(zip(got, ref))[VARIANCE_STEPS:]:
                    report.check(abs(g["loss"] - r["loss"]) <= LOCAL_REL * abs(r["loss"]),
                                 f"{label}: step {r['step']} loss {g['loss']:.6g} vs CPU {r['loss']:.6g}")
                if backend_name == "nccl":  # the device communicator counts the exchange (MPI's is not the control's)
                    sent = lambda r: r["comm_bytes_sent"]["all_to_all"]  # noqa: E731
                    report.check(all(sent(g) == sent(r) for g, r in zip(got, ref)) and any(sent(r) > 0 for r in ref),
                                 f"{label}: the same all-to-all bytes per step as the CPU run")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

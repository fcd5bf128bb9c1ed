# GPU (label gpu; on the emulated device gpu-emu): 0/1 Adam (issue 16) on the CUDA backend with
# both exchanges: comm_backend_name "nccl" (the compressed gradients and the synchronisations
# through NCCL send/recv and all-gathers, packing and adam_denominator_scale on the device) and
# "mpi" (the exchanges, the replica and the local steps in host memory, sent over MPI), at ZeRO
# stages 0 and 1 (with optimizer offload) on 2 ranks. Against the CPU backend's run of the same
# case: the variance steps within float reassociation; after them the backends' last-bit
# differences (signs of elements near zero in the exchanges) are amplified by the local steps, so
# those losses are held to LOCAL_REL; the exchanged bytes per step are the CPU run's, step by step.
# The learning rate is the tour's WarmupLR (which sets it: peak 3e-3 after 5 steps) / LR_DIVISOR:
# at the tour's the local steps make the
# gradient norm jump to 28 by step 8 and a last-bit difference grows about 10x per step from there
# (3e-5, 1e-3, 2.5e-3, 4e-3, 1.1e-2 relative at steps 8-12 after the LM head's chunking changed the
# summation order), so whether step 12 passed was luck. The schedule (variance, freeze, local steps,
# synchronisations) counts steps, not lr, so the same paths run. At a quarter of it: 2e-6 relative
# at step 10, 1.3e-4 at step 12, against LOCAL_REL.
# Without a GPU every run fails with zerotune's message (this test never skips).
import json
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, temporary_directory
from test_onebit_adam import compare, train
from test_zero_one_adam import OPTIMIZER, PARAMS, STEPS

CASES = ((0, "none"), (1, "cpu"))
LR_DIVISOR = 4
with open(os.path.join(REPO, "data", "tiny-llama", "ds_config.json")) as _stream:
    SCHEDULER = json.load(_stream)["scheduler"]
SCHEDULER = dict(SCHEDULER, params=dict(SCHEDULER["params"], warmup_max_lr=SCHEDULER["params"]["warmup_max_lr"] / LR_DIVISOR))
GPU_TEST_PARAMS = dict(PARAMS, lr=SCHEDULER["params"]["warmup_max_lr"])
VARIANCE_STEPS = 3  # updates 1-3 reduce the gradients exactly (test_zero_one_adam.py's schedule)
LOCAL_REL = 1e-2


def main():
    args = parse_args(__doc__)
    report = Report("0/1 Adam on the CUDA backend: NCCL and MPI exchanges against the CPU backend")
    with temporary_directory(args, "zt-gpu-zoadam-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        for stage, offload in CASES:
            cpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"cpu-s{stage}",
                           steps=STEPS, extra=["--device", "cpu"], optimizer=dict(OPTIMIZER, params=GPU_TEST_PARAMS),
                           ds_extra={"scheduler": SCHEDULER})
            for backend_name in ("nccl", "mpi"):
                optimizer = dict(OPTIMIZER, params=dict(GPU_TEST_PARAMS, comm_backend_name=backend_name))
                gpu, _ = train(args.zerotune, workdir, model, data, 2, stage, offload, name=f"gpu-s{stage}-{backend_name}",
                               steps=STEPS, extra=["--device", "cuda"], optimizer=optimizer,
                               ds_extra={"scheduler": SCHEDULER})
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

# GPU (label gpu; needs an NVIDIA GPU and a CUDA build): the ZeRO equivalence matrix of
# tests/mpi/test_zero_equivalence.py on the CUDA backend (issue 8): full fine-tuning and LoRA,
# stages 0-3 x offload_optimizer none/cpu (stage 3 also offload_param cpu) x 1 and 2 ranks
# sharing the GPU (MPI through host staging: NCCL refuses two ranks on one device) give the
# losses, gradient norms and final weights of one rank at stage 0 on the GPU, within float
# reassociation, and the counted traffic equals the plan. Offload on/off is part of the matrix.
# ZT_GPU_TEST_WORLD_SIZES (default "1,2") picks the world sizes: the emulated device's run
# (label gpu-emu) uses 2,4, where each rank has its own emulated GPU and the collectives go
# through the emulated NCCL. The whole stage x offload product runs at the first world size, every
# stage (test_zero_equivalence.SPARSE_STAGES_OFFLOADS) at the others.
# A tied head (OPT: the head's unit reads the embedding's, whose gradient it accumulates into)
# runs at stages 2 and 3 on 2 ranks too: on the CUDA backend released gradient and parameter
# ranges are unmapped, so a unit read or gradient commit missing for the tie faults there.
# offload_param alone (its gathers round the device master: on one rank in place, no upload; on two
# into this rank's place in the gathered range, gathered in place) runs in that second set too.
# 2 steps, not the CPU matrix's 4 (an emulated step costs about as much as a run's start-up): a
# schedule whose first update moves the weights (test_zero_equivalence.EARLY_UPDATE_SCHEDULER), so
# step 2's forward and the final weights test the updates as steps 3 and 4 do there.
# Without a GPU every run fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, parse_args, temporary_directory
from test_zero_equivalence import EARLY_UPDATE_SCHEDULER, EARLY_UPDATE_STEPS, check_cases, check_matrix


def main():
    args = parse_args(__doc__)
    report = Report("ZeRO on the CUDA backend: same losses and weights as one rank")
    with temporary_directory(args, "zt-gpu-zero-") as workdir:
        world_sizes = tuple(int(size) for size in os.environ.get("ZT_GPU_TEST_WORLD_SIZES", "1,2").split(","))
        # The whole stage x offload product at the smallest world size, every stage at the larger.
        check_matrix(report, args.zerotune, workdir, "cuda", world_sizes, steps=EARLY_UPDATE_STEPS,
                     sparse_world_sizes=world_sizes[1:], scheduler=EARLY_UPDATE_SCHEDULER)
        check_cases(report, args.zerotune, workdir, "cuda", "opt", EARLY_UPDATE_STEPS,
                    [(2, 2, "none"), (2, 3, "none"), (2, 3, "cpu+param"), (1, 3, "param"), (2, 3, "param")],
                    modes=("full",),
                    scheduler=EARLY_UPDATE_SCHEDULER)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

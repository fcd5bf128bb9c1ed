# data_types.grad_accum_dtype bf16/fp16 on the CUDA backend (issue 18; label gpu-emu on the emulated
# device, gpu on a real one): 2 ranks, micro-batch 4 x gradient accumulation 2, the gradients held in
# 16 bits, accumulated by the backward kernels and cuBLASLt (beta 1 into a 16-bit C: fp32 sum, one
# rounding) and reduced by NCCL's native ncclBfloat16 / ncclFloat16 sums.
#  1. trajectories: bf16 at ZeRO stages 1-3 and fp16 (static loss scale) at stage 0 against
#     the same runs with fp32 gradients, with the tolerances and checks of
#     tests/mpi/test_grad_accum_dtype.py (losses, grad norms, final weights, both runs learn; NCCL's
#     counted reduce bytes exactly half, the all-gathers unchanged; the engine's gradient buffers
#     exactly half);
#  2. memory, measured by the device: at stages 0/1 the flat store's peak (mem_device_store_peak:
#     the parameter + gradient chunks) drops by the store's fp32 gradient bytes halved, up to one
#     virtual-memory chunk per group buffer (measured on the emulator: 262144 B for 247424 expected); the step's device peak
#     moves as the memory model predicts (up to two chunks: at stage 0 it need not drop, see
#     check_store_saving); and the memory model's prediction (run.json) stays within 5% of the
#     measured device peak for the 16-bit-gradient runs.
#     The chunk is the device's (run.json's device_memory): where tiny-llama's gradients are too few
#     chunks of it (a GPU's 2 MiB), the stage 0/1 memory pairs run again on a wider model
#     (device_sizing.py), so that the saving is as many chunks as on the emulator's 64 KiB.
# Without a GPU (label gpu) every run fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from device_sizing import widened_config, width_factor
from mpi_common import REPO, Report, main_guard, make_model_and_data, parse_args, temporary_directory
from test_grad_accum_dtype import check_trajectories, train

PREDICTION_TOLERANCE = 0.05  # as tests/gpu/test_gpu_memory.py
STATIC_FP16 = {"enabled": True, "loss_scale": 1024}  # as check_trajectories: no skipped steps


def check_store_saving(report, label, half, full):
    """The flat store maps its discardable buffers in chunks of the device's granularity; its two
    trainable groups' gradient buffers each round up to one, so the measured saving is half the
    fp32 gradient bytes up to two chunks."""
    (hm, hr, _), (fm, fr, _) = half, full
    chunk = hr["device_memory"]["discard_granularity_bytes"]
    trainable = fr["zero_layout"]["trainable_elements"]
    store_saved = max(r["mem_device_store_peak"] for r in fm) - max(r["mem_device_store_peak"] for r in hm)
    expected = 2 * trainable  # 4 -> 2 bytes per trainable element
    peak = max(r["mem_device_peak"] for r in hm)
    print(f"{label}: store peak saved {store_saved} B, expected {expected} B (trainable {trainable}, chunk {chunk} B); "
          f"device peak {max(r['mem_device_peak'] for r in fm)} -> {peak} B")
    report.check(expected >= 3 * chunk, f"{label}: the model's gradient saving ({expected} B) spans at least 3 chunks of "
                                        f"{chunk} B (else the check below could not fail)")
    report.check(abs(store_saved - expected) <= 2 * chunk and store_saved >= chunk,
                 f"{label}: the store's measured peak drops by {store_saved} B = half its fp32 gradient bytes "
                 f"({expected} B) up to a {chunk} B chunk per group")
    # The step's device peak moves as the memory model predicts. It need not drop: at stage 0 the
    # update converts the whole 16-bit gradient to fp32, so where the update is the peak the 16-bit
    # run's peak is as high or higher (measured on the emulator with 2 MiB chunks and tiny-llama 6x
    # wider: +2 MiB, predicted +2 MiB; with tiny-llama and 64 KiB chunks -80 KB by rounding).
    measured = peak - max(r["mem_device_peak"] for r in fm)
    predicted = hr["memory_predicted"]["device_peak_bytes"] - fr["memory_predicted"]["device_peak_bytes"]
    report.check(abs(measured - predicted) <= 2 * chunk, f"{label}: the device peak moves by {measured} B with 16-bit "
                                                         f"gradients, as predicted ({predicted} B) up to two chunks")


def memory_pairs(args, workdir, runs, factor):
    """{(precision, stage): (half, full)} for the stage 0/1 memory checks: the trajectory runs, or the
    same pairs on tiny-llama `factor` times wider when its gradients are too few of the device's chunks."""
    pairs = {key: value for key, value in runs.items() if key[1] <= 1}
    if factor == 1:
        return pairs
    config = widened_config(os.path.join(REPO, "data", "tiny-llama", "config.json"), factor,
                            os.path.join(workdir, "wide-config.json"))
    model, data = make_model_and_data(args.zerotune, workdir, config=config, tag="-wide")
    print(f"memory pairs on tiny-llama {factor}x wider")
    wide = {}
    for precision, stage in pairs:
        extra = {"fp16": STATIC_FP16} if precision == "fp16" else {}
        go = lambda grad: train(args.zerotune, workdir, model, data, f"wide-{precision}-s{stage}-{grad}",  # noqa: E731
                                stage, precision, grad, device="cuda", **dict(extra))
        wide[(precision, stage)] = (go(precision), go("fp32"))
    return wide


def main():
    args = parse_args(__doc__)
    report = Report("grad_accum_dtype bf16/fp16 on the CUDA backend: 16-bit gradients, half the bytes and memory")
    with temporary_directory(args, "zt-gpu-gad-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        go = lambda *a, **k: train(args.zerotune, workdir, model, data, *a, **k)  # noqa: E731
        # Each stage once and each 16-bit type's NCCL sum: bf16 at stages 1-3 (its all-reduce, reduce-scatter
        # and stage 3's gathers), fp16 at stage 0 (ncclFloat16's all-reduce under a loss scale). The CPU
        # backend's mpi.grad_accum_dtype runs every stage in both types; the memory pairs are stages 0 and 1.
        cases = [("bf16", 1), ("bf16", 2), ("bf16", 3), ("fp16", 0)]
        runs = check_trajectories(report, go, "cuda", cases)
        for (precision, stage), (half, full) in runs.items():
            label = f"cuda {precision} stage {stage}"
            (hm, hr, _), (_, fr, _) = half, full
            report.check(hr["device"] == fr["device"] == "cuda", f"{label}: ran on the CUDA backend")
            peak = max(r["mem_device_peak"] for r in hm)
            predicted = hr["memory_predicted"]["device_peak_bytes"]
            report.scalar(f"{label}: device peak (16-bit gradients) vs the memory model's prediction", peak, predicted,
                          PREDICTION_TOLERANCE)
        granularity = runs[("bf16", 1)][0][1]["device_memory"]["discard_granularity_bytes"]
        for (precision, stage), (half, full) in memory_pairs(args, workdir, runs, width_factor(granularity)).items():
            check_store_saving(report, f"cuda {precision} stage {stage}", half, full)
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

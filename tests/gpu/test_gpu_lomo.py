# GPU (label gpu; on the emulated device gpu-emu): LOMO (issue 16) on the CUDA backend. Stages 2
# and 3 on 2 ranks give one GPU rank's losses and weights with the two-pass schedule
# (tests/mpi/test_lomo_zero.py's checks; the CPU runs both schedules), and
# the device memory shows no full gradient buffer: the peak of ZeRO's flat parameter + gradient
# buffers (metrics' mem_device_store_peak, what the device maps) of a one-rank LOMO run stays
# below SGD's (same model, data and micro-batch, a resident fp32 gradient of every trainable
# parameter) by at least half of the trainable parameters' fp32 bytes. The memory runs use a model
# sized to the device's virtual-memory chunk (device_sizing.py): tiny-llama on the emulator's
# 64 KiB; on a GPU's 2 MiB, where tiny-llama's gradients fit in one chunk and both peaks are 8 MiB,
# tiny-llama 6x wider and 8 blocks deep (with 2 blocks LOMO's one or two blocks in flight are most
# of the gradients: 2 MiB chunks leave no margin, measured 6.3 of 6.9 MB). Without a GPU every run
# fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from device_sizing import widened_config, width_factor
from mpi_common import REPO, Report, main_guard, make_model_and_data, parse_args, read_metrics, read_run, temporary_directory
from test_lomo_zero import CLIP, check_lomo, train

CASES = ((2, 2, "none"), (2, 3, "none"))
SGD = {"type": "SGD", "params": {"lr": 0.05}}
WIDE_LAYERS = 8  # blocks of the model widened for a device with large chunks
MEMORY_STEPS = 2  # steps of the SGD run and of the wide model's LOMO run


def main():
    args = parse_args(__doc__)
    report = Report("LOMO on the CUDA backend: one rank's results, no full gradient buffer on the device")
    with temporary_directory(args, "zt-gpu-lomo-") as workdir:
        model, data = make_model_and_data(args.zerotune, workdir)
        check_lomo(report, args.zerotune, workdir, model, data, CASES, "cuda", clippings=(CLIP,))
        lomo = f"{workdir}/lomo-clip{CLIP}-w1-s0-none-cuda"
        factor = width_factor(read_run(lomo)["device_memory"]["discard_granularity_bytes"])
        if factor > 1:  # tiny-llama is too small for the device's chunks: measure on a wider model
            config = widened_config(os.path.join(REPO, "data", "tiny-llama", "config.json"), factor,
                                    os.path.join(workdir, "wide-config.json"), layers=WIDE_LAYERS)
            model, data = make_model_and_data(args.zerotune, workdir, config=config, tag="-wide")
            print(f"memory runs on tiny-llama {factor}x wider, {WIDE_LAYERS} blocks")
            # Two steps: the store's peak is reached in the first (and the emulator is slow at this size).
            lomo, _ = train(args.zerotune, workdir, model, data, 1, 0, "none", CLIP, "cuda", name="lomo-w1-wide-cuda",
                            steps=MEMORY_STEPS)
        # SGD's store peak (its resident gradient buffer) is reached in its first step: MEMORY_STEPS
        # of it, against the peak of all the LOMO run's steps (test_lomo_zero.STEPS on tiny-llama),
        # is no laxer than as many SGD steps as LOMO's (a peak over fewer steps is no higher).
        sgd, _ = train(args.zerotune, workdir, model, data, 1, 0, "none", CLIP, "cuda", name="sgd-w1-cuda", optimizer=SGD,
                       steps=MEMORY_STEPS)
        lomo_peak = max(record["mem_device_store_peak"] for record in read_metrics(lomo))
        sgd_peak = max(record["mem_device_store_peak"] for record in read_metrics(sgd))
        trainable_bytes = 4 * read_run(lomo)["zero_layout"]["trainable_elements"]
        report.check(lomo_peak <= sgd_peak - trainable_bytes // 2,
                     f"device store peak: LOMO {lomo_peak} B vs SGD {sgd_peak} B, at least half of the "
                     f"{trainable_bytes} B of fp32 gradients less")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

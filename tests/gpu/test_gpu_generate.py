# GPU (label gpu; on the emulated device gpu-emu, with zerotune-emu): generation with a key/value
# cache on the CUDA backend from the command line (issue 35 item 7). On the tiny LLaMA of
# tests/mpi/test_sample_prompts.py (its SentencePiece tokenizer, data and JSONL prompts):
#  - `train --device cuda --sample-prompts` on 2 ranks at ZeRO-3 (the generation forwards gather
#    through the engine's hooks, over NCCL) writes the same samples.jsonl completions as the same
#    run on the CPU backend (fp32 both), its ranks agreeing on every token;
#  - `generate --device cuda --checkpoint` on that run's final checkpoint gives its last samples;
#  - `generate --device cuda --dtype bf16` runs (bf16 activations and cache).
# Without a GPU every run fails with zerotune's message (this test never skips).
import os

from mpi_common_path import add_mpi_path  # noqa: F401 (puts tests/mpi on sys.path)
from mpi_common import Report, main_guard, parse_args, temporary_directory
from test_sample_prompts import NEW_TOKENS, PROMPTS, check_records, generate, make_tour_inputs, train, write_ds_config


def main():
    args = parse_args(__doc__)
    report = Report("generation on the CUDA backend")
    with temporary_directory(args, "zt-gpu-generate-") as work:
        model, data, prompts, texts = make_tour_inputs(args.zerotune, work)
        write_ds_config(work)
        runs = {}
        for device in ("cpu", "cuda"):
            out = os.path.join(work, f"run-{device}")
            records, log = train(args.zerotune, 2, model, data, prompts, out, 3, ["--grad-accum", 1], device=device)
            check_records(report, f"2 ranks ZeRO-3 on {device}", records, texts, log)
            runs[device] = (records, out)
        cpu, (cuda, cuda_out) = runs["cpu"][0], runs["cuda"]
        report.check([r["completion_ids"] for r in cuda] == [r["completion_ids"] for r in cpu],
                     f"the CUDA run's samples {[r['completion_ids'] for r in cuda]} are the CPU run's")
        final = cuda[PROMPTS:]
        trained = [generate(args.zerotune, model, r["prompt"], ["--checkpoint", cuda_out], device="cuda") for r in final]
        report.check([g["completion_ids"] for g in trained] == [r["completion_ids"] for r in final],
                     "generate --device cuda --checkpoint gives the run's last samples")
        bf16 = generate(args.zerotune, model, texts[0], ["--checkpoint", cuda_out, "--dtype", "bf16"], device="cuda")
        report.check(bf16["stop"] == "eos" or len(bf16["completion_ids"]) == NEW_TOKENS,
                     f"generate --device cuda --dtype bf16: {bf16['completion_ids']} ({bf16['stop']})")
    return report.finish()


if __name__ == "__main__":
    main_guard(main)

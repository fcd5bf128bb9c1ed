# The DeepSpeed-Chat step-1 pipeline on an OPT-shaped tiny model, end to end through the job
# script a user runs (job_scripts/deepspeed-chat/step1_sft.sh): a random OPTForCausalLM saved by
# transformers (tied head, learned positions, LayerNorm) with its own byte-level BPE tokenizer
# trained here by `tokenizers` (OPT's layout: vocab.json + merges.txt and tokenizer.json, BOS
# </s>), `zerotune prep` of data/rm-static-sample.jsonl with 16 of its rows as the evaluation split
# (ZT_RM_STATIC_TEST, as rm-static's test split), `zerotune train` on 2 ranks with ZeRO-2 through
# job_scripts/mpirun/train.sh (evaluating before the first step and after the last), and
# `zerotune export --format hf` of the last checkpoint. Then transformers loads the export, and
#   - the prep ids of an rm-static row equal transformers' tokenizer of the model directory
#     (</s> + prompt + chosen + </s>: DeepSpeed-Chat's step-1 layout with OPT's tokenizer);
#   - the exported model's float64 loss over the evaluation split equals the eval_loss zerotune
#     logged after the last update (the same weights: the logits agree), and the tied head is
#     written once (no lm_head.weight in the safetensors, as save_pretrained does);
#   - the evaluation before training (--eval-at-start, added by the script) logged a higher loss;
#   - the training loss went down.
import glob
import json
import os
import sys

import mpi_common as mc

REPO = mc.REPO
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
import oracle_common as oc  # noqa: E402
import make_bpe_tokenizer  # noqa: E402

torch = oc.torch
transformers = oc.transformers
import h5py  # noqa: E402
import safetensors  # noqa: E402

STEPS = 8
VOCAB = 1000


def make_opt_model(model_dir):
    """A random OPT with the tokenizer's vocabulary and OPT's special ids, dropout off (so the
    export's loss is deterministic), saved in fp32 next to the tokenizer files."""
    make_bpe_tokenizer.write_tokenizer("opt", model_dir, vocab_size=VOCAB, files="both")
    torch.manual_seed(3)
    config = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                    num_attention_heads=4, max_position_embeddings=256, dropout=0.0,
                                    pad_token_id=1, bos_token_id=2, eos_token_id=2, init_std=0.05)
    transformers.OPTForCausalLM(config).to(torch.float32).save_pretrained(model_dir, safe_serialization=True)


def shard_samples(data_dir):
    """[(tokens, loss_mask)] of every shard of a prep output, in order."""
    samples = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.h5"))):
        with h5py.File(path, "r") as shard:
            tokens, mask, offsets = shard["tokens"][:], shard["loss_mask"][:], shard["offsets"][:]
        for i in range(len(offsets) - 1):
            samples.append(([int(t) for t in tokens[offsets[i]:offsets[i + 1]]],
                            [int(m) for m in mask[offsets[i]:offsets[i + 1]]]))
    return samples


def export_loss(export_dir, samples):
    """Mean CE of the exported model (float64) over the samples' targets, one sample at a time."""
    torch.set_default_dtype(torch.float64)  # OPT's causal mask in transformers 4.40 uses the default dtype
    model = transformers.AutoModelForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float64)
    model.eval()
    loss_sum, targets = 0.0, 0
    with torch.no_grad():
        for tokens, mask in samples:
            input_ids, labels, _ = oc.micro_batch([(tokens, mask)])
            loss_sum += float(oc.cross_entropy_sum(oc.forward_logits(model, input_ids), labels))
            targets += oc.target_count(labels)
    torch.set_default_dtype(torch.float32)
    return loss_sum / targets


def run(zerotune, work, report):
    model_dir = os.path.join(work, "opt-tiny")
    make_opt_model(model_dir)
    rows = [json.loads(line) for line in open(os.path.join(REPO, "data", "rm-static-sample.jsonl"))]

    # prep's ids against transformers' tokenizer of the model directory (vocab.json + merges.txt).
    eval_rows = os.path.join(work, "eval.jsonl")
    with open(eval_rows, "w") as out:
        for row in rows[:16]:
            out.write(json.dumps(row) + "\n")
    eval_dir = os.path.join(work, "eval")
    mc.run_ranks(1, [zerotune, "prep", "--input", eval_rows, "--tokenizer", model_dir, "--out", eval_dir,
                     "--split", "train", "--max-seq-len", "256"])
    eval_samples = shard_samples(eval_dir)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    expected = hf_tokenizer(rows[0]["prompt"] + rows[0]["chosen"])["input_ids"][:255] + [hf_tokenizer.eos_token_id]
    tokens, mask = eval_samples[0]
    report.check(tokens[:len(expected)] == expected[:len(tokens)] and tokens[0] == 2,
                 f"prep ids of row 0 = transformers' </s> + tokenizer(prompt + chosen) + </s> "
                 f"(zerotune {tokens[:8]}..., transformers {expected[:8]}...)")
    prompt_len = len(hf_tokenizer(rows[0]["prompt"])["input_ids"])
    report.check(mask[:prompt_len] == [0] * prompt_len and all(mask[prompt_len:]),
                 f"loss mask: 0 on </s> + the prompt ({prompt_len} tokens), 1 on the response and </s>")

    ds_config = os.path.join(work, "ds_config.json")
    with open(ds_config, "w") as out:
        json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
                   "steps_per_print": 1, "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000},
                   "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.0}}},
                  out)
    pipeline_dir = os.path.join(work, "pipeline")
    env = dict(os.environ, **mc.MPI_ENV, ZT_BIN=zerotune, ZT_MODEL=model_dir,
               ZT_RM_STATIC=os.path.join(REPO, "data", "rm-static-sample.jsonl"), ZT_WORK=pipeline_dir,
               ZT_RM_STATIC_TEST=eval_rows, ZT_DS_CONFIG=ds_config, ZT_MAX_SEQ_LEN="256", ZT_NP="2",
               ZT_MPIRUN_ARGS="--oversubscribe", ZT_CPU_BIND="none", ZT_OMP_THREADS="1", ZT_PREFLIGHT="0",
               ZT_ARGS=f"--max-steps {STEPS} --save-every {STEPS} --seed 1 --eval-every {STEPS}")
    result = mc.subprocess.run(["bash", os.path.join(REPO, "job_scripts", "deepspeed-chat", "step1_sft.sh")], env=env,
                               capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:])
        raise mc.OracleError(f"step1_sft.sh exited {result.returncode}")

    run_json = json.load(open(os.path.join(pipeline_dir, "run", "run.json")))
    report.check(run_json.get("world_size") == 2, f"trained on 2 ranks (run.json world_size {run_json.get('world_size')})")
    records = [r for r in oc.read_metrics(os.path.join(pipeline_dir, "run")) if "loss" in r]
    with open(os.path.join(pipeline_dir, "run", "metrics.jsonl")) as stream:
        evals = [json.loads(line) for line in stream if '"eval_loss"' in line]
    report.check(len(records) == STEPS, f"{STEPS} training records ({len(records)})")
    if len(records) == STEPS:
        first, last = records[0]["loss"], sum(r["loss"] for r in records[-2:]) / 2
        report.check(last < first, f"the training loss went down: step 1 {first:.4f}, last two {last:.4f}")
    export_dir = os.path.join(pipeline_dir, "export")
    names = set()
    for path in glob.glob(os.path.join(export_dir, "*.safetensors")):
        with safetensors.safe_open(path, "pt") as f:
            names.update(f.keys())
    report.check("lm_head.weight" not in names and "model.decoder.embed_tokens.weight" in names,
                 "the export holds the tied embedding once (no lm_head.weight)")
    report.check(os.path.exists(os.path.join(export_dir, "tokenizer.json")) or os.path.exists(os.path.join(export_dir, "vocab.json")),
                 "the export carries the tokenizer files")
    if report.check([r["step"] for r in evals] == [0, STEPS],
                    f"eval records before the first update and after the last ({[r['step'] for r in evals]})"):
        report.check(evals[1]["eval_loss"] < evals[0]["eval_loss"],
                     f"the eval loss went down: {evals[0]['eval_loss']:.4f} -> {evals[1]['eval_loss']:.4f}")
        report.scalar("exported model's float64 loss over the eval split vs zerotune's eval_loss",
                      export_loss(export_dir, eval_samples), evals[1]["eval_loss"], rel=2e-5)


def main():
    args = oc.parse_args("the DeepSpeed-Chat step-1 pipeline on a tiny OPT: prep -> 2-rank ZeRO-2 -> export -> HF")
    report = oc.Report("OPT pipeline: job_scripts/deepspeed-chat/step1_sft.sh on 2 ranks, export loaded by transformers")
    with oc.temporary_directory(args, "zt_opt_pipeline_") as work:
        oc.run_guarded(report, "pipeline", run, args.zerotune, work, report)
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

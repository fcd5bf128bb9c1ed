# Oracle: `zerotune generate` against HF transformers' greedy generate (and PEFT's, with an
# adapter) on tiny random models in HF layout: LLaMA (GQA 4/2, RoPE at each new token's absolute
# position), OPT (learned positions, offset 2, tied head) and Qwen2 (q/k/v biases). The new token
# ids after a prompt must be HF's exactly (greedy; zerotune computes in fp32 with a key/value
# cache, the reference in float64). EOS: with generation_config.json's eos_token_id set to the
# 4th token HF would generate, both stop before it (HF's output ends with the EOS, zerotune's
# without; zerotune says "stop": "eos"). A missing Python package fails the test (oracle_common).
import json
import os

import oracle_common as oc

torch = oc.torch
transformers = oc.transformers

PROMPT = [oc.BOS_ID, 17, 42, 5, 99, 63]
NEW_TOKENS = 10


def hf_greedy(model, prompt, max_new_tokens, eos_token_id):
    """HF's greedy continuation of `prompt` (new ids only; the EOS included when it stopped)."""
    with torch.no_grad():
        output = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                                eos_token_id=eos_token_id, pad_token_id=oc.PAD_ID, num_beams=1)
    return output[0, len(prompt):].tolist()


def zerotune_generate(args, model_dir, prompt, extra=()):
    result = oc.run_zerotune(args.zerotune, ["generate", "--model", model_dir, "--prompt-ids",
                                             ",".join(str(i) for i in prompt), "--max-new-tokens", NEW_TOKENS,
                                             "--device", "cpu", "--json", *extra], timeout_s=120)
    return json.loads(result.stdout.strip().splitlines()[-1])


def set_eos(model_dir, eos_id):
    """generation_config.json's eos_token_id (what HF's generate and zerotune stop at)."""
    path = os.path.join(model_dir, "generation_config.json")
    config = {}
    if os.path.exists(path):
        with open(path) as stream:
            config = json.load(stream)
    config["eos_token_id"] = eos_id
    with open(path, "w") as stream:
        json.dump(config, stream)


def as_zerotune(hf_ids, eos):
    """What zerotune prints for HF's continuation: the ids without a final EOS, and why it stopped."""
    if hf_ids and hf_ids[-1] == eos and len(hf_ids) <= NEW_TOKENS:
        return hf_ids[:-1], "eos"
    return hf_ids, "length"


def check_case(report, args, label, model_dir, reference, extra=()):
    # The model's own EOS (config.json's, in generation_config.json as save_pretrained writes it).
    expected = hf_greedy(reference, PROMPT, NEW_TOKENS, eos_token_id=oc.EOS_ID)
    ids, stop = as_zerotune(expected, oc.EOS_ID)
    got = zerotune_generate(args, model_dir, PROMPT, extra)
    report.check(got["completion_ids"] == ids and got["stop"] == stop,
                 f"[{label}] greedy ids {got['completion_ids']} (stop {got['stop']}) == HF's {ids} (stop {stop})")
    report.check(len(set(ids)) > 2 and len(ids) >= 4, f"[{label}] HF's continuation {ids} has several tokens (a real test)")
    if len(ids) < 4:
        return
    # Another EOS in generation_config.json: the 4th token HF generated; both stop at its first occurrence.
    eos = ids[3]
    set_eos(model_dir, eos)
    stop_at = ids.index(eos)
    expected_eos = hf_greedy(reference, PROMPT, NEW_TOKENS, eos_token_id=eos)
    got_eos = zerotune_generate(args, model_dir, PROMPT, extra)
    report.check(expected_eos == ids[:stop_at + 1], f"[{label}] oracle: HF stops at EOS {eos} after {stop_at} tokens")
    report.check(got_eos["completion_ids"] == expected_eos[:-1] and got_eos["stop"] == "eos",
                 f"[{label}] with eos_token_id {eos}: {got_eos['completion_ids']} (stop {got_eos['stop']}) == HF's "
                 f"{expected_eos[:-1]} + EOS")
    set_eos(model_dir, oc.EOS_ID)


def main():
    args = oc.parse_args("zerotune generate against HF transformers' greedy generate")
    report = oc.Report("generate vs HF generate")
    with oc.temporary_directory(args, "zt-oracle-generate-") as work:
        llama_dir = os.path.join(work, "llama")
        oc.make_llama(llama_dir, seed=3)
        oc.run_guarded(report, "llama", check_case, report, args, "llama", llama_dir, oc.load_reference_llama(llama_dir))
        for label, seed in (("opt", 8), ("qwen2", 11)):  # seeds whose continuations vary
            config_class, model_class, settings = oc.family_case(label)
            model_dir = os.path.join(work, label)
            oc.make_family_model(model_dir, seed, config_class, model_class, settings)
            oc.run_guarded(report, label, check_case, report, args, label, model_dir,
                           oc.load_reference_family(model_dir, model_class))
        # A PEFT adapter on the LLaMA (q_proj, v_proj), applied by `generate --adapter` and by PEFT.
        base_dir, adapter_dir = os.path.join(work, "llama_base"), os.path.join(work, "adapter")
        oc.make_llama(base_dir, seed=6)
        oc.make_adapter(base_dir, adapter_dir, seed=7, target_modules=["q_proj", "v_proj"], use_rslora=False,
                        dropout=0.0)
        peft_model = oc.load_reference_peft(base_dir, adapter_dir)
        peft_model.eval()
        plain = hf_greedy(oc.load_reference_llama(base_dir), PROMPT, NEW_TOKENS, eos_token_id=oc.EOS_ID)
        with_adapter = hf_greedy(peft_model, PROMPT, NEW_TOKENS, eos_token_id=oc.EOS_ID)
        report.check(plain != with_adapter, "[peft] oracle: the adapter changes HF's continuation (the case can fail)")
        oc.run_guarded(report, "peft", check_case, report, args, "peft", base_dir, peft_model,
                       ["--adapter", adapter_dir])
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)

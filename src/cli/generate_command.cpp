// `zerotune generate`: continues a prompt with a model directory, a checkpoint of a run on it or
// a PEFT adapter (ckpt/trained_model.h), with a key/value cache (model/generation.h), and prints
// the completion decoded by the model's tokenizer: a quick look at what training made, as
// DeepSpeed-Chat's chat.py gives after step 1.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "backend/make_backend.h"
#include "ckpt/checkpoint_location.h"
#include "ckpt/trained_model.h"
#include "cli/commands.h"
#include "cli/parse_options.h"
#include "data/tokenizer.h"
#include "model/generation.h"

namespace zt {

namespace po = boost::program_options;

namespace {

po::options_description generate_options() {
  po::options_description options("zerotune generate options");
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value<std::string>(), "the model directory (HF layout; with --checkpoint: the base the run trained from)")
      ("checkpoint", po::value<std::string>(), "a checkpoint of a run on --model (OUT/checkpoints/global_stepN, OUT, "
       "OUT/checkpoints or its `latest`): its trained weights, LoRA adapters applied")
      ("adapter", po::value<std::string>(), "a PEFT adapter directory to apply to --model (as train --adapter takes it)")
      ("prompt", po::value<std::string>(), "the text to continue (tokenized by the model's tokenizer, BOS first as prep does)")
      ("prompt-ids", po::value<std::string>(), "the prompt as token ids instead, comma-separated (\"1,306,4658\"), used as given")
      ("max-new-tokens", po::value<int64_t>()->default_value(64), "generate at most this many tokens")
      ("temperature", po::value<double>()->default_value(0.0), "0: greedy (the default); > 0: sample from softmax(logits / T)")
      ("top-p", po::value<double>()->default_value(1.0), "sampling: only among the most likely tokens whose probability "
       "reaches P, in (0, 1]")
      ("seed", po::value<uint64_t>()->default_value(0), "sampling's random numbers: the same seed gives the same text")
      ("device", po::value<std::string>()->default_value("auto"), "auto, cpu or cuda")
      ("dtype", po::value<std::string>()->default_value("fp32"), "compute dtype: fp32, bf16 or fp16")
      ("json", po::bool_switch(), "print one JSON object: prompt_ids, completion_ids, completion, stop (eos or length)");
  return options;
}

DType parse_dtype(const std::string& name) {
  ZT_CHECK(name == "fp32" || name == "bf16" || name == "fp16", "--dtype must be fp32, bf16 or fp16, not '", name, "'");
  return name == "bf16" ? DType::BF16 : name == "fp16" ? DType::F16 : DType::F32;
}

// --prompt-ids "1,2,3" as ids, each in [0, vocab).
std::vector<int32_t> parse_prompt_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const std::string& part : split_commas(text)) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(used == part.size() && id >= 0 && id < vocab, "--prompt-ids: '", part, "' is not a token id in [0, ", vocab, ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// The options of the run, checked before anything is loaded.
GenerationOptions generation_options(const po::variables_map& vm) {
  GenerationOptions options;
  options.max_new_tokens = vm["max-new-tokens"].as<int64_t>();
  options.temperature = vm["temperature"].as<double>();
  options.top_p = vm["top-p"].as<double>();
  options.seed = vm["seed"].as<uint64_t>();
  check_generation_options(options);
  return options;
}

void print_generation(const po::variables_map& vm, const std::vector<int32_t>& prompt, const Generation& generation,
                      const Tokenizer* tokenizer) {
  const std::string completion = tokenizer ? decode_continuation(*tokenizer, prompt, generation.tokens) : "";
  if (vm["json"].as<bool>()) {
    nlohmann::json record = {{"prompt_ids", prompt}, {"completion_ids", generation.tokens},
                             {"stop", generation.stopped ? "eos" : "length"}};
    if (tokenizer) record["completion"] = completion;
    // Invalid UTF-8 (a character cut by max-new-tokens, random byte tokens) as U+FFFD, as HF's decode.
    std::printf("%s\n", record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  if (tokenizer) {
    std::printf("%s\n", completion.c_str());
  } else {
    std::string ids;
    for (int32_t id : generation.tokens) ids += cat(ids.empty() ? "" : ",", id);
    std::printf("%s\n", ids.c_str());
  }
}

}  // namespace

int command_generate(const std::vector<std::string>& args) {
  const po::options_description options = generate_options();
  po::variables_map vm;
  if (!parse_command_options(args, options, vm, "generate")) return 0;
  ZT_CHECK(vm.count("model"), "--model is required (see zerotune generate --help)");
  ZT_CHECK(vm.count("prompt") + vm.count("prompt-ids") == 1, vm.count("prompt") ? "give --prompt or --prompt-ids, not both"
           : "--prompt is required: the text to continue (or --prompt-ids, token ids)");
  ZT_CHECK(!vm.count("prompt") || !vm["prompt"].as<std::string>().empty(), "--prompt is empty: give the text to continue");
  const GenerationOptions checked = generation_options(vm);
  const DType dtype = parse_dtype(vm["dtype"].as<std::string>());
  TrainedModelSource source;
  source.model_dir = vm["model"].as<std::string>();
  if (vm.count("checkpoint")) {
    const std::string given = vm["checkpoint"].as<std::string>();
    source.checkpoint_dir = locate_checkpoint(given, "--checkpoint").value_or(given);
  }
  if (vm.count("adapter")) source.adapter_dir = vm["adapter"].as<std::string>();
  // The tokenizer: needed for a text prompt, and to print the completion as text when there is one.
  std::unique_ptr<Tokenizer> tokenizer;
  if (vm.count("prompt") || find_tokenizer_files(source.model_dir)) tokenizer = load_tokenizer(source.model_dir);
  std::unique_ptr<Backend> backend = make_backend(resolve_device(vm["device"].as<std::string>(), 0).device, 0);
  TrainedModel trained = load_trained_model(source, *backend, dtype);
  std::vector<int32_t> prompt;
  if (vm.count("prompt")) {
    if (tokenizer->bos_id() >= 0) prompt.push_back(static_cast<int32_t>(tokenizer->bos_id()));
    const std::vector<int32_t> text = tokenizer->encode(vm["prompt"].as<std::string>());
    prompt.insert(prompt.end(), text.begin(), text.end());
  } else {
    prompt = parse_prompt_ids(vm["prompt-ids"].as<std::string>(), trained.config.vocab_size);
    ZT_CHECK(!prompt.empty(), "--prompt-ids holds no token id");
  }
  GenerationOptions generation = checked;
  generation.stop_ids = stop_token_ids(trained.config, source.model_dir);
  if (generation.stop_ids.empty() && tokenizer && tokenizer->eos_id() >= 0) generation.stop_ids = {tokenizer->eos_id()};
  std::fprintf(stderr, "zerotune generate: %s on %s, %s; %zu prompt tokens\n", trained.described.c_str(),
               backend->name().c_str(), dtype_name(dtype), prompt.size());
  const Generation result = generate(*trained.model, trained.config, *backend, dtype, prompt, generation);
  print_generation(vm, prompt, result, tokenizer.get());
  return 0;
}

}  // namespace zt

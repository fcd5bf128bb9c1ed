// `zerotune export`: a checkpoint as HF safetensors or a PEFT adapter (src/ckpt/export.h).
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "ckpt/checkpoint_location.h"
#include "ckpt/export.h"
#include "cli/commands.h"
#include "cli/parse_options.h"
#include "model/safetensors.h"

namespace zt {

namespace po = boost::program_options;

int command_export(const std::vector<std::string>& args) {
  po::options_description options("zerotune export options");
  options.add_options()
      ("help,h", "show this help")
      ("checkpoint", po::value<std::string>(), "checkpoint directory (OUT/checkpoints/global_stepN), or the run directory OUT, OUT/checkpoints "
       "or OUT/checkpoints/latest (the checkpoint `latest` names)")
      ("model", po::value<std::string>(), "the base model directory the run trained from")
      ("out", po::value<std::string>(), "output directory")
      ("format", po::value<std::string>()->default_value("hf"), "hf (safetensors + config + tokenizer), peft (adapter) or dschat (a reward model as DeepSpeed-Chat saves it: pytorch_model.bin of its RewardModel, read by its step 3)")
      ("merge", po::bool_switch(), "hf, dschat: fold the LoRA adapters into the base weights")
      ("dtype", po::value<std::string>()->default_value("auto"), "stored dtype: auto (the run's compute dtype: an fp16 "
       "run exports fp16, as DeepSpeed-Chat saves it; bf16 -> bf16; fp32 -> fp32), fp32, bf16 or fp16")
      ("max-shard-size", po::value<std::string>(), "hf: shard the weights above this size (default 5GB)");
  po::variables_map vm;
  if (!parse_command_options(args, options, vm, "export")) return 0;
  for (const char* required : {"checkpoint", "model", "out"})
    ZT_CHECK(vm.count(required), "--", required, " is required (see zerotune export --help)");
  ExportOptions export_options;
  // The checkpoint itself, or the run directory, its checkpoints/ or `latest` file leading to one.
  const std::string given = vm["checkpoint"].as<std::string>();
  export_options.checkpoint_dir = locate_checkpoint(given, "--checkpoint").value_or(given);
  export_options.model_dir = vm["model"].as<std::string>();
  export_options.out_dir = vm["out"].as<std::string>();
  export_options.format = vm["format"].as<std::string>();
  export_options.merge = vm["merge"].as<bool>();
  const std::string dtype = vm["dtype"].as<std::string>();
  ZT_CHECK(dtype == "auto" || dtype == "fp32" || dtype == "bf16" || dtype == "fp16",
           "--dtype must be auto, fp32, bf16 or fp16, not '", dtype, "'");
  if (dtype != "auto") export_options.dtype = dtype == "bf16" ? DType::BF16 : dtype == "fp16" ? DType::F16 : DType::F32;
  if (vm.count("max-shard-size")) export_options.max_shard_bytes = parse_max_shard_size(vm["max-shard-size"].as<std::string>());
  std::printf("zerotune export: %s\n", export_checkpoint(export_options).c_str());
  return 0;
}

}  // namespace zt

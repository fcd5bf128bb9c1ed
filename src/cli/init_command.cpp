// `zerotune init --config config.json --out DIR [--seed S] [--dtype fp32|bf16|fp16]
//                [--max-shard-size 5GB] [--force]`:
// writes a randomly initialised model in HF layout (see model/init_model.h).
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/error.h"
#include "model/init_model.h"

namespace zt {

int command_init(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  InitModelOptions options;
  std::string dtype_name_text = "fp32";
  std::string max_shard_size_text = "5GB";
  po::options_description description("zerotune init: write a randomly initialised model in HF layout\noptions");
  description.add_options()
      ("help,h", "print this help")
      ("config", po::value(&options.config_path)->required(), "model config.json (or a directory holding one)")
      ("out", po::value(&options.out_dir)->required(), "output model directory (created if needed)")
      ("seed", po::value(&options.seed)->default_value(42), "random seed")
      ("dtype", po::value(&dtype_name_text)->default_value("fp32"), "stored dtype: fp32, bf16 or fp16")
      ("max-shard-size", po::value(&max_shard_size_text)->default_value("5GB"),
       "shard the weights above this size, as save_pretrained's max_shard_size (5GB, 50KB, 2GiB, bytes)")
      ("force", po::bool_switch(&options.force), "write into a non-empty output directory");

  po::variables_map values;
  if (!parse_command_options(args, description, values, "init")) return 0;
  try {
    options.dtype = parse_compute_dtype(dtype_name_text);
  } catch (const Error& error) {
    fail("--dtype: ", error.what());
  }
  try {
    options.max_shard_bytes = parse_max_shard_size(max_shard_size_text);
  } catch (const Error& error) {
    fail("--max-shard-size: ", error.what());
  }

  // One process writes the model; other ranks of an mpirun launch have nothing to do.
  if (process_rank() != 0) return 0;
  InitModelResult result = init_model(options);
  std::printf("zerotune init: %s model with %lld parameters (%s, seed %llu) written to %s (%zu weight file%s)\n",
              result.config.model_type.c_str(), static_cast<long long>(result.parameter_count),
              dtype_name(options.dtype), static_cast<unsigned long long>(options.seed), options.out_dir.c_str(),
              result.files.size() - 1, result.files.size() == 2 ? "" : "s");
  return 0;
}

}  // namespace zt

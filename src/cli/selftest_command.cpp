// `zerotune selftest`: the preflight of an allocation (train/selftest.h). It takes train's
// options (so a job script passes the same --deepspeed, --device, LoRA and dtype flags it will
// train with), --data and --out being optional, plus its own sizes.
#include <boost/program_options.hpp>

#include "cli/commands.h"
#include "cli/train_options.h"
#include "train/selftest.h"

namespace zt {

int command_selftest(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  SelftestOptions options;
  po::options_description own("zerotune selftest options (besides train's; --data and --out are optional)");
  own.add_options()
      ("seq-len", po::value(&options.seq_len), "tokens per sample for the GEMM shapes and the memory check "
       "(default: the longest sample of --data, else min(512, max_position_embeddings))")
      ("comm-bytes", po::value(&options.comm_bytes), "bytes per collective (default 8 MiB on a GPU, 1 MiB on the CPU)")
      ("gemm-size", po::value(&options.gemm_size), "the square GEMM timed for TFLOP/s (default 4096 on a GPU, 256 on "
       "the CPU)");
  po::variables_map vm;
  ParsedTrainOptions parsed = parse_train_options(args, "selftest", own, {"model"}, vm);
  if (parsed.help) return 0;
  return run_selftest(parsed.config, options);
}

}  // namespace zt

// `zerotune selftest`: the preflight of an allocation, run on every rank with the options the
// training run will get (mpirun/srun zerotune selftest --model DIR --deepspeed ds.json ...):
//   - every backend op against the CPU reference in the run's dtypes (backend/op_checks.h),
//   - a cuBLASLt plan (and one run) for every GEMM shape of the model's linear layers,
//   - all-reduce, reduce-scatter and all-gather through the run's device communicator: exact
//     results on known values, and the bus bandwidth as nccl-tests reports it,
//   - pinned host <-> device bandwidth, the compute dtype's GEMM TFLOP/s,
//   - the device memory the memory model predicts for the run against what is free.
// Rank 0 prints one table from every rank's results; any failure names the check, the dtype,
// the rank and the host, and every rank exits non-zero.
#pragma once
#include <cstdint>

#include "train/train_config.h"

namespace zt {

struct SelftestOptions {
  int64_t seq_len = 0;     // tokens per sample of the GEMM shapes and the memory check (0: the data's
                           // longest sample with --data, else min(512, max_position_embeddings))
  int64_t comm_bytes = 0;  // per collective (0: 8 MiB on a GPU, 1 MiB on the CPU)
  int64_t gemm_size = 0;   // the square GEMM timed (0: 4096 on a GPU, 256 on the CPU)
};

// Returns the process exit status: 0 when every check passed on every rank.
int run_selftest(TrainConfig config, const SelftestOptions& options);

}  // namespace zt

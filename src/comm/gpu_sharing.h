// Whether ranks share a GPU, from what each rank's GPU is (its host and PCI bus id), not from
// how many GPUs a rank sees: under per-task CUDA_VISIBLE_DEVICES or srun --gpu-bind every rank
// sees one device, yet each has its own. NCCL needs one GPU per rank; ranks that share one go
// through host-staged MPI (communicator "mpi").
#pragma once
#include <string>
#include <vector>

namespace zt {

struct GpuSharing {
  bool shared = false;  // some GPU is driven by more than one rank
  std::string reason;   // "every rank has its own GPU (4 GPUs on 2 hosts)" / "ranks 0 and 1 share GPU 0000:41:00.0 on node7"
};

// `placements[r]` = "host|pci-bus-id" of rank r's GPU.
GpuSharing gpu_sharing(const std::vector<std::string>& placements);

}  // namespace zt

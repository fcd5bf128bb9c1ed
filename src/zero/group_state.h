// ZeroEngine::GroupState: one parameter group's buffers on this rank, shared by the engine's
// source files (zero_engine.cpp: partitions, gathers, gradients; zero_update.cpp: the update).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/buffer.h"
#include "zero/zero_engine.h"

namespace zt {

// One parameter group's share on this rank. P = group numel / W for stage >= 1, the whole
// group for stage 0.
struct ZeroEngine::GroupState {
  ParamGroup group = ParamGroup::Frozen;
  int64_t partition_numel = 0;  // P
  Buffer master;                // fp32 [P] trainable groups (host when offloaded)
  std::vector<Buffer> state;    // fp32 [P] each: the optimizer's state_names() (host when offloaded)
  Buffer host_grad;             // grad dtype [P] offload: the gradient partition copied to the host
  Buffer host_compute;          // param dtype [P] offload to a GPU with 16-bit compute: the updated
                                // master rounded on the host, then uploaded (half of fp32's bytes);
                                // with offload_param (the compute partition is host memory) only
                                // under DPU: the partition's twin, which the background update
                                // rounds into and which then becomes the partition (swapped)
  // DPU (--delayed-param-update): the second copy of each of the two host buffers the background
  // update touches, so that the next step never waits for it: the backward copies its gradients
  // into host_grad bucket by bucket while the update in flight reads the other copy, and the update
  // rounds into host_compute while the previous update's values are uploaded from the other one.
  // Swapped with their twins when an update is delayed (zero_update.cpp); empty without DPU.
  Buffer host_grad_spare;       // grad dtype [P]
  Buffer host_compute_spare;    // param dtype [P], where host_compute is
  Buffer compute_partition;     // param dtype [P] device: the master in the compute dtype (what stages 1-3
                                // all-gather from), or stage 3's frozen slices
};

}  // namespace zt

// ZeroEngine::GroupState: one parameter group's buffers on this rank, shared by the engine's
// source files (zero_engine.cpp: partitions, gathers, gradients; zero_update.cpp: the update).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/buffer.h"
#include "core/error.h"
#include "zero/zero_engine.h"

namespace zt {

// One parameter group's share on this rank. P = group numel / W for stage >= 1, the whole
// group for stage 0.
//
// offload_optimizer.ratio < 1 (partial offload, ZeRO-Offload++'s Twin-Flow; stage 3): the partition's
// first K = resident_numel elements, the slices of the group's first resident_units units, keep
// their master and optimizer state on the device (resident_master, resident_state) and are
// updated there; the offloaded buffers below (master, state, host_grad, host_compute) then hold
// only the rest, elements [K, P). K = 0 otherwise, and those buffers hold all of [0, P).
struct ZeroEngine::GroupState {
  ParamGroup group = ParamGroup::Frozen;
  int64_t partition_numel = 0;  // P
  int64_t resident_numel = 0;   // K
  size_t resident_units = 0;    // the group's first units (store order) whose slices make up [0, K)
  Buffer resident_master;       // fp32 [K] device
  std::vector<Buffer> resident_state;  // fp32 [K] each, device
  Buffer resident_grad_copy;    // grad dtype [K] device, DPU only: the delayed update's gradients of the
                                // resident part (the next step's backward rewrites the reduced ones)
  Buffer master;                // fp32 [P - K] trainable groups (host when offloaded)
  std::vector<Buffer> state;    // fp32 [P - K] each: the optimizer's state_names() (host when offloaded)
  Buffer host_grad;             // grad dtype [P - K] offload: the gradient partition copied to the host
  Buffer host_compute;          // param dtype [P - K] offload to a GPU with 16-bit compute: the updated
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

  bool resident(int64_t begin) const { return begin < resident_numel; }  // element `begin` is updated on the device
  int64_t offloaded_numel() const { return partition_numel - resident_numel; }
  // fp32 [numel]: elements [begin, begin + numel) of the master / of state k, from the part that
  // holds them (a range must not cross K: pieces are whole units' slices).
  Tensor master_rows(int64_t begin, int64_t numel) const { return part_rows(resident_master, master, begin, numel); }
  Tensor state_rows(size_t k, int64_t begin, int64_t numel) const {
    static const Buffer kNone;  // no resident part
    return part_rows(k < resident_state.size() ? resident_state[k] : kNone, state[k], begin, numel);
  }
  // [numel] of an offloaded buffer ([P - K] of `dtype`) at partition element `begin` >= K.
  Tensor offloaded_rows(const Buffer& buffer, DType dtype, int64_t begin, int64_t numel) const {
    ZT_CHECK(begin >= resident_numel && begin + numel <= partition_numel, "ZeRO: elements [", begin, ", ",
             begin + numel, ") are not in the offloaded part [", resident_numel, ", ", partition_numel, ")");
    return buffer.view(dtype, {offloaded_numel()}).rows(begin - resident_numel, numel);
  }

 private:
  Tensor part_rows(const Buffer& resident_part, const Buffer& offloaded_part, int64_t begin, int64_t numel) const {
    if (begin >= resident_numel) return offloaded_rows(offloaded_part, DType::F32, begin, numel);
    ZT_CHECK(begin + numel <= resident_numel, "ZeRO: elements [", begin, ", ", begin + numel,
             ") cross the end of the device-resident part (", resident_numel, ", offload_optimizer.ratio)");
    return resident_part.view(DType::F32, {resident_numel}).rows(begin, numel);
  }
};

}  // namespace zt

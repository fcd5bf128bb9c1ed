// A Communicator for device buffers over a host communicator (MPI): each collective copies
// its device data to host staging buffers, runs the host collective and copies the result
// back. Slow (two PCIe copies and no overlap) but correct: multi-rank training on the CUDA
// backend before, or without, the NCCL communicator. Host tensors pass straight through.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace zt {

// `host` and `device` must outlive the result. Traffic counters, the timeout and the context
// of error messages are the host communicator's: set and read them there.
std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Backend& device);

}  // namespace zt

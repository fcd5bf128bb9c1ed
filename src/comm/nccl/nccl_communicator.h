// The NCCL implementation of the Communicator, for device buffers of the CUDA backend: one
// NCCL communicator per process (one GPU per rank), its unique id broadcast over the bootstrap
// (MPI) communicator, collectives issued on a communication stream of its own that waits for
// the compute stream's queued work, and a watchdog in wait(): a collective that does not
// finish within the timeout aborts the NCCL communicator (ncclCommAbort) and throws a
// zt::Error naming the collective, the rank and the context; the top-level handler then calls
// MPI_Abort. Host tensors, scalars, strings and barriers go to the bootstrap communicator.
//
// Free of CUDA and NCCL headers, like cuda_backend.h. Present only when the build found NCCL
// (ZT_WITH_NCCL=1, which implies ZT_WITH_CUDA=1).
#pragma once
#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "comm/communicator.h"

namespace zt {

// `bootstrap` (MPI) gives the ranks, carries the ncclUniqueId from rank 0 and runs the host
// collectives; `device` gives the GPU and the compute stream. Both must outlive the result,
// and the result must outlive every Pending it returns.
//
// Collective rules (each message names the collective and the argument otherwise):
// - all_reduce_sum_async, all_gather_async: device tensors of fp32, bf16 or fp16 (out and in
//   one dtype); reduce_scatter_sum_async: fp32. broadcast: device tensors of any dtype.
// - Host tensors (Device::CPU, all arguments) go to the bootstrap; host and device mixed in
//   one call is an error.
// - wait() makes the compute stream wait for the collective and polls it until it completes
//   (at most timeout() seconds): what the compute stream queues afterwards sees the result.
// - The timeout and context of the delegated host calls are this communicator's (they are
//   copied to the bootstrap before each call), and their traffic appears in stats() too.
//
// Construction is collective (every rank of `bootstrap` calls it). It throws, before touching
// NCCL, when two ranks of one node use the same GPU (NCCL refuses that): use the host-staged
// MPI communicator (make_staged_communicator) there. NCCL's own initialisation is bounded by
// bootstrap.timeout() as well (a rank that never joins).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, CudaBackend& device);

}  // namespace zt

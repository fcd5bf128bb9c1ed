// The NCCL implementation of the Communicator, for device buffers of the CUDA backend (one GPU
// per rank). Two NCCL communicators over the same ranks, their unique ids broadcast over the
// bootstrap (MPI) communicator, each with a stream of its own: all-gathers run on one, all-
// reduce, reduce-scatter and broadcast on the other, so a stage-3 parameter prefetch is not
// queued behind a gradient reduction nor the other way round (one communicator cannot run two
// collectives concurrently: NCCL needs one issue order per communicator). Each collective's
// stream waits for the compute stream's queued work. A watchdog in wait(): a collective that
// does not finish within the timeout aborts both NCCL communicators (ncclCommAbort) and
// throws a zt::Error naming the collective, the rank and the context; the top-level handler
// then calls MPI_Abort. Host tensors, scalars, strings and barriers go to the bootstrap.
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
// - An all-gather does not wait for reductions issued before it (nor they for it): a
//   collective that touches a buffer of another one still in flight must be issued after
//   that one's wait() (the ZeRO engine's gathers and reductions use separate buffers).
// - The timeout and context of the delegated host calls are this communicator's (they are
//   copied to the bootstrap before each call), and their traffic appears in stats() too.
//
// Construction is collective (every rank of `bootstrap` calls it). It throws, before touching
// NCCL, when two ranks of one node use the same GPU (NCCL refuses that): use the host-staged
// MPI communicator (make_staged_communicator) there. NCCL's own initialisation is bounded by
// bootstrap.timeout() as well (a rank that never joins). It sets NCCL_LAUNCH_ORDER_IMPLICIT=1
// unless the environment has it (the two communicators' kernels launch in host order, the
// same on every rank, so that they cannot deadlock each other).
// `device` must be the CUDA backend (its stream orders the collectives); anything else is an error.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& device);

}  // namespace zt

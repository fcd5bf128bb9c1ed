// The MPI implementation of the Communicator: nonblocking MPI-3 collectives on host buffers,
// completed by polling with a deadline so that a collective that never completes (a rank died
// or hangs) ends the job with a message instead of hanging it. Also the CPU-side reductions of
// offloaded optimizer shards on the GPU path.
#pragma once
#include <mpi.h>

#include <memory>

#include "comm/communicator.h"

namespace zt {

// Wraps `comm` (usually MPI_COMM_WORLD; not freed). Sets MPI_ERRORS_RETURN on it so that MPI
// failures become zt::Errors with the call's name.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

}  // namespace zt

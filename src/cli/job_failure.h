// How a failed command ends a job of N ranks. When every rank fails (a configuration error:
// each rank read the same flags and files), rank 0 prints the message once (and any rank whose
// message differs), and every rank exits 1 without MPI_Abort's noise. When only some ranks fail,
// the others are inside a collective that would wait forever: the failing ranks print their
// message and MPI_Abort the job, as before.
#pragma once
#include <mpi.h>

#include <string>

namespace zt {

// A communicator for the failure agreement only (duplicated from MPI_COMM_WORLD at start-up,
// so its barrier never matches a collective of the program's own communicators).
MPI_Comm make_failure_comm();

// Prints "zerotune COMMAND: error (rank R): MESSAGE" as decided above; returns only when the
// process should exit 1 normally (otherwise it has called MPI_Abort). A command that did not
// start MPI (mpi_started false) prints with the launcher's rank and returns.
void end_failed_job(const std::string& command, const std::string& message, bool mpi_started,
                    MPI_Comm failure_comm);

}  // namespace zt

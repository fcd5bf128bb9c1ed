// The failure agreement of end_failed_job: a non-blocking barrier on a private communicator,
// waited for a few seconds; then the messages are gathered so that rank 0 prints each distinct
// one once.
#include "cli/job_failure.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {

// How long a failed rank waits for the others to fail too. Ranks that read the same bad input
// fail within milliseconds of each other; a rank still computing after this is not failing (and
// the wait delays the end of a job whose other ranks hang, so it stays short).
constexpr std::chrono::milliseconds kAgreementWait{1000};

void print(const std::string& command, int rank, const std::string& message) {
  std::fprintf(stderr, "zerotune %s: error (rank %d): %s\n", command.c_str(), rank, message.c_str());
  std::fflush(stderr);
}

}  // namespace

MPI_Comm make_failure_comm() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return comm;
}

void end_failed_job(const std::string& command, const std::string& message, bool mpi_started,
                    MPI_Comm failure_comm) {
  if (!mpi_started) {
    print(command, process_rank(), message);
    return;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1 || failure_comm == MPI_COMM_NULL) {
    print(command, rank, message);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  int all_failed = 0;
  if (MPI_Ibarrier(failure_comm, &request) == MPI_SUCCESS) {
    const auto deadline = std::chrono::steady_clock::now() + kAgreementWait;
    while (!all_failed && std::chrono::steady_clock::now() < deadline) {
      MPI_Test(&request, &all_failed, MPI_STATUS_IGNORE);
      if (!all_failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (!all_failed) {  // some rank goes on (and may wait in a collective): end the job
    print(command, rank, message);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  // Every rank failed: rank 0 prints its message and each different one once.
  int length = static_cast<int>(message.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size), 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, failure_comm);
  for (size_t r = 1; r < offsets.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(rank == 0 ? static_cast<size_t>(offsets.back() + lengths.back()) : 0, '\0');
  MPI_Gatherv(message.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, failure_comm);
  if (rank != 0) return;
  std::vector<std::string> printed;
  for (int r = 0; r < size; ++r) {
    std::string text = all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                  static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    bool seen = false;
    for (const std::string& earlier : printed) seen = seen || earlier == text;
    if (seen) continue;
    print(command, r, text);
    printed.push_back(std::move(text));
  }
  if (printed.size() == 1) {
    std::fprintf(stderr, "zerotune %s: every one of the %d ranks failed with this error\n", command.c_str(), size);
    std::fflush(stderr);
  }
}

}  // namespace zt

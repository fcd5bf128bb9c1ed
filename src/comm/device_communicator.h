// The communicator a run's device buffers go through, and the checks that pick it: the same on
// every command that runs collectives on the device (train, selftest).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "comm/communicator.h"

namespace zt {

std::string this_host();  // gethostname, for messages naming a rank's machine

// Every rank resolved --device the same way, or the job stops naming who differs (a job with
// CPU and GPU ranks would hang in its first collective). A collective over `host`.
void check_same_device(Communicator& host, const DeviceChoice& choice);

// NCCL (one GPU per rank) or MPI through host staging; none (nullptr) on the CPU backend, where
// MPI works on host buffers directly. --comm auto picks NCCL when the build has it and no two
// ranks drive the same GPU, told by the GPUs' PCI bus ids (gpu_sharing.h), whatever each rank
// sees through CUDA_VISIBLE_DEVICES. `reason` says why, for the banner and run.json.
std::unique_ptr<Communicator> make_device_communicator(const std::string& choice, Communicator& host,
                                                       Backend& backend, std::string& reason);

// What a command that computes runs on: --device resolved (and checked the same on every rank),
// its backend, and the device communicator with the reason it was chosen.
struct RunDevice {
  DeviceChoice choice;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;  // nullptr on the CPU backend: use the host communicator
  std::string comm_reason;
  // Where the timeout, the error context and the traffic counters live: NCCL keeps its own (and
  // passes them to MPI for its host calls); host staging and the CPU leave them to the host
  // communicator. Points to `comm` or to set_up_run_device's `host`.
  Communicator* control = nullptr;
};
RunDevice set_up_run_device(const std::string& device, const std::string& comm, Communicator& host);

}  // namespace zt

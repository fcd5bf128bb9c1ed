// The device communicator and its checks (see device_communicator.h).
#include "comm/device_communicator.h"

#include <unistd.h>

#include <vector>

#include "comm/gpu_sharing.h"
#include "comm/staged_communicator.h"
#include "core/error.h"
#if ZT_WITH_NCCL
#include "backend/cuda/cuda_backend.h"
#include "comm/nccl/nccl_communicator.h"
#endif

namespace zt {

std::string this_host() {
  char host[256] = {};
  ZT_CHECK(gethostname(host, sizeof(host) - 1) == 0, "gethostname failed on rank ", process_rank());
  return host;
}

void check_same_device(Communicator& host, const DeviceChoice& choice) {
  const std::vector<std::string> devices = host.all_gather_strings(choice.device + "|" + this_host());
  std::string cpu, cuda;
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    const size_t bar = devices[rank].find('|');
    std::string& list = devices[rank].substr(0, bar) == "cpu" ? cpu : cuda;
    list += cat(list.empty() ? "" : ", ", rank, " (", devices[rank].substr(bar + 1), ")");
  }
  ZT_CHECK(cpu.empty() || cuda.empty(), "--device auto resolved differently on the job's ranks: cpu on rank(s) ", cpu,
           ", cuda on rank(s) ", cuda, ". Give every rank a GPU (the job script's GPU request, CUDA_VISIBLE_DEVICES), "
           "or pass --device cpu");
}

std::unique_ptr<Communicator> make_device_communicator(const std::string& choice, Communicator& host,
                                                       Backend& backend, std::string& reason) {
  ZT_CHECK(choice == "auto" || choice == "nccl" || choice == "mpi", "--comm must be auto, nccl or mpi, not '", choice,
           "'");
  if (backend.device() == Device::CPU) {  // MPI works on host buffers directly
    reason = "MPI on host memory (cpu backend)";
    return nullptr;
  }
  const GpuSharing sharing = gpu_sharing(host.all_gather_strings(this_host() + "|" + backend.pci_bus_id()));
#if ZT_WITH_NCCL
  ZT_CHECK(!(choice == "nccl" && sharing.shared), "--comm nccl: ", sharing.reason,
           ", and NCCL needs one GPU per rank: give each rank its own GPU or use --comm mpi");
  if (backend.device() == Device::CUDA && (choice == "nccl" || (choice == "auto" && !sharing.shared))) {
    reason = cat(choice == "auto" ? "auto: " : "--comm nccl: ", sharing.reason);
    return make_nccl_communicator(host, backend);
  }
  reason = choice == "mpi" ? std::string("--comm mpi: MPI through host staging")
                           : cat("auto: ", sharing.reason, ": MPI through host staging (NCCL needs one GPU per rank)");
#else
  ZT_CHECK(choice != "nccl", "--comm nccl: this zerotune was built without NCCL");
  reason = cat(choice == "auto" ? "auto: this zerotune was built without NCCL" : "--comm mpi",
               ": MPI through host staging");
#endif
  return make_staged_communicator(host, backend);
}

RunDevice set_up_run_device(const std::string& device, const std::string& comm, Communicator& host) {
  RunDevice run;
  run.choice = resolve_device(device, host.local_rank());
  check_same_device(host, run.choice);
  run.backend = make_backend(run.choice.device, host.local_rank());
  run.comm = make_device_communicator(comm, host, *run.backend, run.comm_reason);
  run.control = run.comm && run.comm->keeps_control() ? run.comm.get() : &host;
  return run;
}

}  // namespace zt

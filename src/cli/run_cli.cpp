// Subcommand dispatch and the top-level error handler: a zt::Error (or any exception) is
// printed with the rank, and the job ends non-zero on every rank (once per job and without
// MPI_Abort when every rank fails alike, else MPI_Abort so no rank waits forever in a
// collective: cli/job_failure.h).
#include <hdf5.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/job_failure.h"
#include "core/error.h"
#include "core/rank_threads.h"

namespace zt {

namespace {

using Command = int (*)(const std::vector<std::string>&);

// Whether a command starts MPI. init, prep, inspect and report work on files on rank 0 alone
// and never communicate, so they skip MPI's start-up (most of their run time on small inputs:
// about 0.26 s of `zerotune init`'s 0.38); under a launcher every other rank reads its rank
// from the launcher's environment and returns.
enum class Mpi { Started, Skipped };

struct CommandEntry {
  Command run;
  Mpi mpi;
};

const std::map<std::string, CommandEntry>& commands() {
  static const std::map<std::string, CommandEntry> table = {
      {"init", {command_init, Mpi::Skipped}},
      {"train", {command_train, Mpi::Started}},
      {"prep", {command_prep, Mpi::Skipped}},
      {"inspect", {command_inspect, Mpi::Skipped}},
      {"estimate", {command_estimate, Mpi::Started}},
      {"export", {command_export, Mpi::Started}},
      {"report", {command_report, Mpi::Skipped}},
      {"selftest", {command_selftest, Mpi::Started}},
      {"autotune", {command_autotune, Mpi::Started}},
      {"generate", {command_generate, Mpi::Started}},
  };
  return table;
}

// This process's rank as the launcher set it (Open MPI, PMIx, MPICH/Intel MPI's PMI, srun;
// 0 outside a launcher), for the commands that skip MPI.
int rank_from_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    ZT_CHECK(*end == '\0' && rank >= 0, "the launcher's ", name, "=", value, " is not a rank");
    return static_cast<int>(rank);
  }
  return 0;
}

void print_usage(std::FILE* stream) {
  std::fprintf(stream,
               "usage: zerotune <command> [options]\n\n"
               "commands:\n"
               "  init    write a randomly initialised model in HF layout\n"
               "  train   fine-tune a model (full or LoRA) on a tokenized dataset\n"
               "  prep    tokenize JSONL/JSON prompt/response rows into HDF5 token shards\n"
               "  inspect show what a data directory holds (shards, lengths, a decoded sample)\n"
               "  estimate memory per GPU/CPU for each ZeRO stage and offload choice\n"
               "  export  a checkpoint as an HF model directory or a PEFT adapter\n"
               "  generate continue a prompt with a model, a checkpoint of it or a PEFT adapter (greedy or\n"
               "          top-p sampling, a key/value cache; a quick look at what training made)\n"
               "  report  write OUT/report.html (curves and summary) from a training run's OUT/metrics.jsonl\n"
               "  selftest preflight on every rank of an allocation: kernels vs the CPU, GEMM plans, collectives,\n"
               "          bandwidths, memory (takes train's options)\n"
               "  autotune the fastest ZeRO stage, offload, micro-batch and activation checkpointing that fit: a few\n"
               "          steps of each (takes train's options); writes ds_config_optimal.json\n\n"
               "`zerotune <command> --help` lists a command's options.\n");
}

// MPI stays up for the whole process; a singleton MPI_Init works without mpirun. A command
// that skips MPI gets its rank from the launcher and no failure communicator.
struct MpiSession {
  MpiSession(int& argc, char**& argv, Mpi mpi) {
    if (mpi == Mpi::Skipped) {
      rank = rank_from_launcher();
      process_rank() = rank;
      return;
    }
    started = true;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    process_rank() = rank;
    if (size > 1) failure_comm = make_failure_comm();
  }
  ~MpiSession() {
    if (!started) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (failure_comm != MPI_COMM_NULL) MPI_Comm_free(&failure_comm);
      MPI_Finalize();
    }
  }
  bool started = false;
  int rank = 0;
  int size = 1;
  MPI_Comm failure_comm = MPI_COMM_NULL;
};

}  // namespace

int run_cli(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  auto found = commands().find(name);
  if (found == commands().end()) {
    std::fprintf(stderr, "zerotune: unknown command '%s'\n\n", name.c_str());
    print_usage(stderr);
    return 2;
  }
  // HDF5's exit handler closes files still open; after a failed write (a full disk) it crashes
  // in H5F__close_cb. Our handles close what they open, so the library is left to the OS.
  H5dont_atexit();
  std::vector<std::string> args(argv + 2, argv + argc);
  std::string message;
  try {
    MpiSession mpi(argc, argv, found->second.mpi);
    try {
      // Before any command's first parallel region starts OpenMP's thread pool (a command
      // without MPI runs on rank 0 alone: OpenMP's default, every core it may use).
      if (mpi.started) set_rank_threads(MPI_COMM_WORLD);
      return found->second.run(args);
    } catch (const Error& error) {
      message = error.what();
    } catch (const std::exception& error) {
      message = cat("internal error: ", error.what());
    }
    end_failed_job(name, message, mpi.started, mpi.failure_comm);  // once per job when every rank fails alike
    return 1;
  } catch (const Error& error) {  // the launcher's rank variable
    message = error.what();
  }
  end_failed_job(name, message, false, MPI_COMM_NULL);
  return 1;
}

}  // namespace zt

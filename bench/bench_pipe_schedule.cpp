// Benchmark (issue 32, item 8): the pipeline schedules' bubble and live activations, measured
// from their instruction streams (pipe/pipe_simulation.h: every rank's instructions run against
// the others, forward 1, backward 2 time units per chunk, V chunks splitting a stage's time V
// ways), against theory: (P - 1) / (M + P - 1) for GPipe and 1F1B, (P - 1) / (V M + P - 1)
// interleaved. Each schedule in both of its forms (pipe_schedule.h): posted ahead on MPI (the
// Posted transport: receives posted one computation ahead, sends waited for before their buffer
// is reused) and grouped on NCCL (the Grouped transport: each run of messages one group,
// completed before the next computation). No GPU and no model: it measures the schedules, not an
// engine.
//   bench_pipe_schedule [--latency L]   (L: a message's latency in forward-time units, default 0)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "pipe/pipe_schedule.h"
#include "pipe/pipe_simulation.h"

namespace {

void row(zt::PipeScheduleKind kind, int ranks, int chunks, int micro_batches, double latency) {
  zt::PipeScheduleShape shape;
  shape.ranks = ranks;
  shape.chunks = chunks;
  shape.micro_batches = micro_batches;
  const zt::PipeCosts grouped{1.0 / chunks, 2.0 / chunks, latency, zt::PipeTransport::Grouped};
  const zt::PipeSimulation nccl = zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape, grouped);
  shape.post_ahead = true;
  const zt::PipeCosts posted{1.0 / chunks, 2.0 / chunks, latency, zt::PipeTransport::Posted};
  const zt::PipeSimulation mpi = zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape, posted);
  std::printf("| %s | %d | %d | %d | %.4f | %.4f | %.4f | %.2f | %d |\n", zt::pipe_schedule_name(kind).c_str(), ranks,
              chunks, micro_batches, mpi.bubble_fraction, nccl.bubble_fraction,
              zt::theoretical_bubble_fraction(kind, shape), mpi.step_time, mpi.peak_in_flight.front());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double latency = 0.0;
    if (argc == 3 && std::strcmp(argv[1], "--latency") == 0) latency = std::atof(argv[2]);
    std::printf("| schedule | P | V | M | bubble, MPI (posted ahead) | bubble, NCCL (grouped) | bubble (theory) | "
                "step time (MPI) | activations alive on rank 0 (chunks) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int ranks : {2, 4, 8})
      for (int micro_batches : {8, 32}) {
        row(zt::PipeScheduleKind::GPipe, ranks, 1, micro_batches, latency);
        row(zt::PipeScheduleKind::OneFOneB, ranks, 1, micro_batches, latency);
        row(zt::PipeScheduleKind::Interleaved, ranks, 2, micro_batches, latency);
        row(zt::PipeScheduleKind::Interleaved, ranks, 4, micro_batches, latency);
      }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_pipe_schedule: %s\n", error.what());
    return 1;
  }
}

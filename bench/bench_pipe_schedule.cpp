// Benchmark (issue 32, item 8): the pipeline schedules' bubble and live activations, measured
// from their instruction streams (pipe/pipe_simulation.h: every rank's instructions run against
// the others, forward 1, backward 2 time units per chunk, V chunks splitting a stage's time V
// ways), against theory: (P - 1) / (M + P - 1) for GPipe and 1F1B, (P - 1) / (V M + P - 1)
// interleaved. Each schedule in its forms (pipe_schedule.h): posted ahead on MPI (the Posted
// transport: receives posted one computation ahead, sends waited for before their buffer is
// reused), grouped (the Grouped transport: each run of messages one group, completed before the
// next computation: NCCL's form for GPipe and 1F1B) and, interleaved, overlapped on NCCL (the
// Stream transport: a forward's and a backward's group posted after their computation on the
// rank's one stream, waited for before the computation that needs their receive). No GPU and no
// model: it measures the schedules, not an engine.
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
  auto bubble = [&](zt::PipeExchangeForm form, zt::PipeTransport transport) {
    shape.form = form;
    const zt::PipeCosts costs{1.0 / chunks, 2.0 / chunks, latency, transport};
    return zt::simulate_pipe_schedule(zt::make_pipe_schedule(kind, shape), shape, costs);
  };
  const zt::PipeSimulation grouped = bubble(zt::PipeExchangeForm::Grouped, zt::PipeTransport::Grouped);
  const zt::PipeSimulation mpi = bubble(zt::PipeExchangeForm::PostedAhead, zt::PipeTransport::Posted);
  char overlapped[32] = "(grouped)";  // 1F1B runs grouped on NCCL (docs/pipeline.md)
  if (kind != zt::PipeScheduleKind::OneFOneB)
    std::snprintf(overlapped, sizeof overlapped, "%.4f",
                  bubble(zt::PipeExchangeForm::Overlapped, zt::PipeTransport::Stream).bubble_fraction);
  std::printf("| %s | %d | %d | %d | %.4f | %.4f | %s | %.4f | %.2f | %d |\n", zt::pipe_schedule_name(kind).c_str(),
              ranks, chunks, micro_batches, mpi.bubble_fraction, grouped.bubble_fraction, overlapped,
              zt::theoretical_bubble_fraction(kind, shape), mpi.step_time, mpi.peak_in_flight.front());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double latency = 0.0;
    if (argc == 3 && std::strcmp(argv[1], "--latency") == 0) latency = std::atof(argv[2]);
    std::printf("| schedule | P | V | M | bubble, MPI (posted ahead) | bubble, grouped | bubble, NCCL (overlapped) | "
                "bubble (theory) | step time (MPI) | activations alive on rank 0 (chunks) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
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

// Runs the schedules of all pipeline ranks against each other on a model of time, as an engine
// would run them: a rank executes its instructions in order; a receive waits until the matching
// send was posted (plus the link's latency); how long a send waits is the transport's
// (PipeTransport: MPI's buffered sends never wait; NCCL's wait for the peer's receive unless
// grouped with it); the step-level instructions (ReduceTiedGrads, ReduceGrads, OptimizerStep) wait for every rank
// (one loss scale and one gradient norm over all stages). It checks that the schedules are
// complete and consistent and measures what theory predicts:
//   - every (micro-batch, virtual stage) has exactly one forward and one backward, on the rank
//     that holds the virtual stage, the backward after the forward; every message is sent once
//     and received once, by the neighbouring virtual stage, and the messages from one rank to
//     another are received in the order they were sent (NCCL's send/recv have no tags: they
//     match in issue order); nothing deadlocks (else a zt::Error naming each rank's blocked
//     instruction);
//   - the step's time, and the bubble: the fraction of the P ranks' time spent idle before the
//     step-level instructions, (P - 1) / (M + P - 1) for GPipe and 1F1B with uniform stage times
//     and no latency, (P - 1) / (V M + P - 1) interleaved;
//   - the activations alive per rank: forwards whose backward has not run yet (micro-batch
//     chunks), at most M for GPipe, P - rank for 1F1B;
//   - the messages, per kind.
#pragma once
#include <vector>

#include "pipe/pipe_schedule.h"

namespace zt {

// How sends and receives complete:
//   Buffered: a send completes when posted (MPI_Isend, then the engine keeps the buffer);
//   Grouped:  each run of consecutive Send/Recv instructions of a rank is one group (one
//             exchange_async: one NCCL group) that completes when every send in it met its
//             receive and every receive its send; a rank waits at its group;
//   Blocking: every Send/Recv alone, a send waiting for its receive (NCCL sends issued one by
//             one, or blocking torch.distributed send/recv): what the engine must not do, since
//             1F1B's steady state (rank s sends an activation while rank s+1 sends a gradient)
//             deadlocks under it;
//   Posted:   the posted-ahead lists (PipeExchangeForm::PostedAhead) on MPI: a Send/Recv posts its
//             message (MPI_Isend / MPI_Irecv) and never waits; its Wait waits until the message
//             arrived: the later of its send's and its receive's posting, plus the latency (for
//             the send as for the receive: the sender's buffer is free once the bytes are over).
//             A send goes from the rank's send buffer of its kind (the engine copies the output or
//             gradient there): posting one while the previous send of its kind is not waited for,
//             a Wait for a message not posted and a message still not waited for at the
//             step-level instructions are errors (the engine would overwrite a buffer in flight
//             or leave a request behind).
//   Stream:   the overlapped lists (PipeExchangeForm::Overlapped) on NCCL: each run of consecutive
//             Send/Recv instructions is one group, posted without waiting on the rank's one
//             stream, where it starts once the rank's previous group completed (and not before
//             its posting); it completes once every partner group (the one holding the other end
//             of each of its messages) started, plus the latency; a Wait waits until the group
//             holding its message completed, and is where that group's receives become usable.
//             The send-buffer rules of Posted hold (a Wait frees its group's send buffers).
// Wait instructions are no-ops under Buffered, Grouped and Blocking (which complete messages themselves).
enum class PipeTransport { Buffered, Grouped, Blocking, Posted, Stream };

struct PipeCosts {
  double forward = 1.0;   // one chunk's forward of one micro-batch
  double backward = 2.0;  // its backward (about twice the forward: two GEMMs per forward GEMM)
  double latency = 0.0;   // from a send's posting (and its receive's) to its arrival
  PipeTransport transport = PipeTransport::Buffered;
};

struct PipeSimulation {
  double step_time = 0.0;            // when the last rank reaches the step-level instructions
  double bubble_fraction = 0.0;      // 1 - (busy time of all ranks) / (P * step_time)
  std::vector<double> busy;          // per rank: time spent in Forward and Backward
  std::vector<int> peak_in_flight;   // per rank: most forwards alive (not yet backward) at once
  int activation_messages = 0;       // SendActivation count (= RecvActivation)
  int gradient_messages = 0;         // SendGrad count (= RecvGrad)
};

PipeSimulation simulate_pipe_schedule(const std::vector<std::vector<PipeInstruction>>& schedules,
                                      const PipeScheduleShape& shape, const PipeCosts& costs = {});

// The bubble fraction theory gives for `kind` (uniform stage times, no latency).
double theoretical_bubble_fraction(PipeScheduleKind kind, const PipeScheduleShape& shape);

}  // namespace zt

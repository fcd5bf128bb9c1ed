// Stop requests from the batch system: Slurm (`--signal`) and PBS send SIGUSR1 or SIGTERM
// before a time limit or a preemption. The handler only sets a flag; the trainer checks it
// once per step on every rank (all-reduced), saves a checkpoint and exits 0.
#pragma once

namespace zt {

// Installs the SIGTERM and SIGUSR1 handlers (idempotent).
void install_stop_signal_handlers();
// The signal received since installation, or 0.
int stop_signal_received();

}  // namespace zt

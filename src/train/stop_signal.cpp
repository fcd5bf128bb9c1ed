// SIGTERM / SIGUSR1 -> a flag the step loop reads.
#include "train/stop_signal.h"

#include <csignal>

namespace zt {

namespace {
volatile std::sig_atomic_t received_signal = 0;
extern "C" void remember_stop_signal(int signal_number) { received_signal = signal_number; }
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = remember_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress (file writes) continue
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int stop_signal_received() { return received_signal; }

}  // namespace zt

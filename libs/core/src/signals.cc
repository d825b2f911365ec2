#include "colibri/core/signals.h"

#include <pthread.h>
#include <signal.h>

namespace colibri {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A client that disconnects mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
}

int WaitForShutdownSignal() {
  sigset_t set = ShutdownSet();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

int WaitForShutdownSignalFor(std::chrono::milliseconds timeout) {
  sigset_t set = ShutdownSet();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec pause{static_cast<time_t>(seconds.count()),
                       static_cast<long>((timeout - seconds).count() * 1000000)};
  const int sig = sigtimedwait(&set, nullptr, &pause);
  return sig > 0 ? sig : 0;
}

}  // namespace colibri

// Graceful shutdown: block SIGINT/SIGTERM in every thread (call first thing in main, before
// any thread starts), then wait for one of them on the main thread.
#pragma once

#include <chrono>

namespace colibri {

void BlockShutdownSignals();
// Returns the signal number received (SIGINT or SIGTERM).
int WaitForShutdownSignal();
// Waits at most `timeout` for SIGINT or SIGTERM (blocked by BlockShutdownSignals): the signal
// number, or 0 when none came in time.
int WaitForShutdownSignalFor(std::chrono::milliseconds timeout);

}  // namespace colibri

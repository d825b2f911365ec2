// Graceful shutdown: block SIGINT/SIGTERM in every thread (call first thing in main, before
// any thread starts), then wait for one of them on the main thread.
#pragma once

namespace colibri {

void BlockShutdownSignals();
// Returns the signal number received (SIGINT or SIGTERM).
int WaitForShutdownSignal();

}  // namespace colibri

// Waiting in tests on a state only observable from outside (stats, a flag another thread sets):
// yields until it holds or a deadline passes, so a test never sleeps for a fixed time and a
// regression fails at the deadline instead of hanging.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace colibri::testing {

// True once `done()` holds; false when `limit` passed first.
inline bool WaitUntil(const std::function<bool()>& done,
                      std::chrono::steady_clock::duration limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace colibri::testing

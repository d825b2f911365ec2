// The CPU backend: the reference implementation of every op and the fallback without a GPU.
// Ops run in parallel on an internal thread pool of `threads` workers.
#pragma once

#include <memory>

#include "colibri/backend/backend.h"

namespace colibri::backend {

struct CpuBackendOptions {
  int threads = 0;  // 0: the cores this process may use (core/thread_pool.h UsableCoreCount)
  // Every parallel op on all `threads`. Off (the default): forward passes of a size where that
  // measures faster (other processes busy on the cores) run their small ops on one thread
  // (cpu/thread_choice.h).
  bool fixed_threads = false;
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace colibri::backend

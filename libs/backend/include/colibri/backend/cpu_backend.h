// The CPU backend: the reference implementation of every op and the fallback without a GPU.
// Ops run in parallel on an internal thread pool of `threads` workers.
#pragma once

#include <memory>

#include "colibri/backend/backend.h"

namespace colibri::backend {

struct CpuBackendOptions {
  int threads = 0;  // 0: the cores this process may use (core/thread_pool.h UsableCoreCount)
  // Every parallel op on all `threads`. Off (the default): each class of op runs on one thread
  // where that measures faster, as on a machine whose other cores are busy (cpu/thread_choice.h).
  bool fixed_threads = false;
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace colibri::backend

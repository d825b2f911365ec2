// What backends that compute in host memory (the CPU backend) count beyond the Backend
// interface, for tests and benches (dynamic_cast<HostOps*>); the engine never needs it.
#pragma once

#include <cstdint>

#include "colibri/backend/backend.h"

namespace colibri::backend {

class HostOps {
 public:
  virtual ~HostOps() = default;
  // Parallel regions run so far (each ends in a synchronisation of the worker threads).
  virtual uint64_t parallel_regions() const = 0;
  // Parallelisable ops so far that ran on one thread (the passes measuring that arm included).
  virtual uint64_t single_threaded_calls() const = 0;
};

}  // namespace colibri::backend

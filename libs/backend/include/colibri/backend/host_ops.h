// Ops of backends that compute in host memory (the CPU backend), beyond the Backend interface.
// The engine finds them with dynamic_cast<HostOps*>(backend) and keeps its op-by-op path on
// backends without them (CUDA, the device-like test backend).
#pragma once

#include <cstdint>
#include <span>

#include "colibri/backend/backend.h"

namespace colibri::backend {

// One expert of an MoE layer and the rows of the layer input it applies to.
struct GroupedExpert {
  WeightRef gate, up, down;          // [ffn, hidden], [ffn, hidden], [hidden, ffn]; host memory
  const float* gate_bias = nullptr;  // [ffn] or nullptr (gpt-oss has biases)
  const float* up_bias = nullptr;    // [ffn] or nullptr
  const float* down_bias = nullptr;  // [hidden] or nullptr
  const int32_t* rows = nullptr;     // rows of x (host), distinct
  const float* scales = nullptr;     // routing weight of each row
  int64_t m = 0;
};

// out[rows[i], :] += scales[i] * down(act(gate · x[rows[i]], up · x[rows[i]])) for every expert,
// experts in the given order, act = SiLU(g) * u, or with swiglu_limit > 0 the clamped SwiGLU
// of gpt-oss (see Backend::ClampedSwiGlu).
struct GroupedExpertsArgs {
  const float* x = nullptr;  // [n, hidden]
  int64_t n = 0, hidden = 0, ffn = 0;
  std::span<const GroupedExpert> experts;
  float* out = nullptr;  // [n, hidden], accumulated into
  float swiglu_alpha = 0, swiglu_limit = 0;
  // False for the first group of experts applied to this x: x is quantized then, and the later
  // groups of the layer (experts that landed late) reuse it.
  bool input_prepared = false;
};

class HostOps {
 public:
  virtual ~HostOps() = default;
  // Every expert of a group in one parallel operation (two synchronisations): gate and up
  // fused, each task a tile of one expert's FFN rows for all its rows of x; then down, each task
  // a tile of hidden rows for every expert in order. The same bits as applying the experts one
  // by one with MatMul, SiluMul (ClampedSwiGlu), AddBias and ScatterAddRows.
  virtual void ApplyExperts(const GroupedExpertsArgs& args) = 0;
  // ys[i] = x · ws[i]ᵀ (Backend::MatMul for each): with one width and activation type (q, k
  // and v; gate and up) x is quantized once and every row goes in one parallel region.
  virtual void MatMuls(std::span<const WeightRef> ws, const float* x, int64_t n,
                       std::span<float* const> ys) = 0;
  // Parallel regions run so far (each ends in a synchronisation of the worker threads).
  virtual uint64_t parallel_regions() const = 0;
  // A forward pass of `rows` rows of model `model` (a caller's tag: the models sharing this
  // backend, a target and its drafter, are measured apart) begins / ends. Between the two, the
  // backend may run its small ops on the calling thread alone where that measures faster for
  // such passes (other processes busy on the cores: cpu/thread_choice.h); never a change of
  // results. `excluded_seconds`: time in the pass spent waiting on something else (expert
  // reads), left out of the measure; `completed` false (the pass failed part way): not
  // measured. Passes may nest (the inner one is part of the outer).
  virtual void BeginPass(uint32_t model, int64_t rows) = 0;
  virtual void EndPass(double excluded_seconds, bool completed) = 0;
  // Parallelisable ops so far that ran on one thread (the passes measuring that arm included).
  virtual uint64_t single_threaded_calls() const = 0;
};

}  // namespace colibri::backend

// Backend: where the numbers are computed. The CPU backend is the reference and the fallback;
// a CUDA backend implements the same interface with device memory.
//
// Memory model. Every pointer an op takes ("backend memory") was obtained from this backend:
// activations and KV from Allocate(), weights from ImportWeight(). For the CPU backend that is
// host memory; for a GPU backend it is device memory and the engine never dereferences it: it
// moves data with Upload()/Download() only. Routing decisions (top-k) are made on the host from
// downloaded router logits because they decide which expert blocks to fetch.
//
// Shapes. Activations are F32 row-major [n, dim] (n tokens). Weight matrices are [rows, cols]
// in a GGML quant format with `cols` contiguous per row (rows = output features); MatMul computes
// y[n, rows] = x[n, cols] · Wᵀ, quantizing x to the weight type's vec-dot format the way GGML
// does, so results track llama.cpp.
//
// Threading. A Backend is used by one thread at a time (the engine's executor); ops may run
// internally parallel. Ops are ordered and may be queued (CUDA): Synchronize() waits for all
// queued work and returns the first device error since the last call (ops themselves return
// nothing; a failed op leaves the backend in error until Synchronize reports it, and later ops
// are skipped). The device-tier calls (TransferIn, RecordFence, memory_info) are thread-safe:
// cache tiers call them from their reader threads while the engine runs ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "colibri/quant/dtype.h"

namespace colibri::backend {

// A weight matrix in backend memory.
struct WeightRef {
  quant::DType dtype = quant::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// An owned allocation of backend memory.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
  float* f32() { return static_cast<float*>(data()); }
};

enum class RopeStyle { kHalfSplit, kInterleaved };

// How RoPE rotates one head: `n_rot` dims starting at `offset` (partial rotary; MLA's rope part
// after the no-position dims), paired half-split (offset + i, offset + i + n_rot/2) or
// interleaved (offset + 2i, offset + 2i + 1); pair i turns by position · inv_freq[i], and cos and
// sin are multiplied by `mscale` (YaRN's attention factor).
struct RopeParams {
  int64_t n_rot = 0;
  int64_t offset = 0;
  RopeStyle style = RopeStyle::kHalfSplit;
  const double* inv_freq = nullptr;  // host memory, n_rot / 2 entries
  float mscale = 1.0f;
};

// Causal attention of n query rows over a KV cache. A query at position p attends to the keys
// of positions 0..p, or with a sliding window to (p - window, p]. Optional sinks (gpt-oss): a
// learned logit per head that joins each softmax denominator and contributes no value.
struct AttentionArgs {
  const float* q = nullptr;            // [n, n_heads * head_dim]
  const float* k_cache = nullptr;      // [capacity, n_kv_heads * head_dim], positions 0..pos
  const float* v_cache = nullptr;      // same layout
  const int32_t* positions = nullptr;  // host memory: position of each query row
  int64_t n = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  float* out = nullptr;  // [n, n_heads * head_dim]
  int64_t window = 0;    // > 0: sliding window of this many positions (the query's own included)
  int64_t ring = 0;      // > 0: the caches are rings of this many rows, position j in row j % ring
  const float* sinks = nullptr;  // [n_heads] (backend memory) or nullptr
};

// One expert of an MoE layer and the rows of the layer input it applies to.
struct GroupedExpert {
  WeightRef gate, up, down;          // [ffn, hidden], [ffn, hidden], [hidden, ffn]; backend memory
  const float* gate_bias = nullptr;  // [ffn] or nullptr (gpt-oss has biases)
  const float* up_bias = nullptr;    // [ffn] or nullptr
  const float* down_bias = nullptr;  // [hidden] or nullptr
  const int32_t* rows = nullptr;     // rows of x (host), distinct
  const float* scales = nullptr;     // routing weight of each row (host)
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
  // False for the first group of experts applied to this x: a backend may prepare x then (the
  // CPU quantizes it) and reuse that for the later groups of the layer (experts that landed late).
  bool input_prepared = false;
  // Backend memory a backend applying the experts op by op works in: rows_in and rows_out
  // [max_m, hidden], gate and up [max_m, ffn], max_m the largest m of the experts.
  float* rows_in = nullptr;
  float* gate = nullptr;
  float* up = nullptr;
  float* rows_out = nullptr;
};

// The ops of the interface, for Backend::SupportsOp.
enum class Op {
  kGetRows,
  kMatMul,  // and MatMuls
  kAddBias,
  kRmsNorm,
  kRope,
  kStoreKv,
  kAttention,
  kSiluMul,
  kClampedSwiGlu,
  kAdd,
  kGatherRows,
  kCopyStrided,
  kScatterAddRows,
  kApplyExperts,
};
std::string_view OpName(Op op);

// An op as a model will ask for it: the weight type (GetRows, MatMul, ApplyExperts; kF32 for the
// others) and, for attention, the head dimension.
struct OpSpec {
  Op op = Op::kMatMul;
  quant::DType dtype = quant::DType::kF32;
  int64_t head_dim = 0;
};

// A point in a backend's op queue (see Backend::RecordFence).
class Fence {
 public:
  virtual ~Fence() = default;
  // Blocks until every op queued before the fence was recorded has finished.
  virtual absl::Status Wait() = 0;
};

// Backend memory in bytes (both 0 when the backend computes in host memory and does not track it).
struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // OK when this backend runs the op as specified; otherwise Unimplemented naming the op, the
  // backend and what it lacks. A model checks every op it will use at load, so an unsupported
  // one fails there, never at the first token.
  virtual absl::Status SupportsOp(const OpSpec& spec) const = 0;

  // Memory --------------------------------------------------------------------------------------
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;
  virtual void Upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void Download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(void* dst, size_t bytes) = 0;
  // Makes a host weight usable by ops. `host_data` must outlive the returned ref when
  // `zero_copy()` is true (the CPU backend reads it in place); otherwise the backend copies it
  // into `storage`, which the caller keeps alive.
  virtual bool zero_copy() const = 0;
  virtual absl::StatusOr<WeightRef> ImportWeight(quant::DType dtype, int64_t rows, int64_t cols,
                                                 const void* host_data,
                                                 std::unique_ptr<Buffer>* storage) = 0;

  // Ops -----------------------------------------------------------------------------------------
  // out[i, :] = dequantized row ids[i] of `table` (host ids).
  virtual void GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y = x · Wᵀ (accumulate: y += x · Wᵀ).
  virtual void MatMul(const WeightRef& w, const float* x, int64_t n, float* y,
                      bool accumulate = false) = 0;
  // x[i, :] += bias for each of n rows of dim.
  virtual void AddBias(float* x, const float* bias, int64_t n, int64_t dim) = 0;
  // y[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight, rows of `dim`. In place allowed.
  virtual void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* y) = 0;
  // Rotates each head of x[n, n_heads * head_dim] in place by its row's position.
  virtual void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, const RopeParams& rope) = 0;
  // Writes k/v rows [n, kv_dim] into the caches at rows positions[i].
  virtual void StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n,
                       int64_t kv_dim, float* k_cache, float* v_cache) = 0;
  virtual void Attention(const AttentionArgs& args) = 0;
  // gate[i] = silu(gate[i]) * up[i] over n elements.
  virtual void SiluMul(float* gate, const float* up, int64_t n) = 0;
  // The clamped SwiGLU of gpt-oss over n elements: with g = min(gate[i], limit) and
  // u = clamp(up[i], -limit, limit), gate[i] = (u + 1) * g * sigmoid(alpha * g).
  virtual void ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) = 0;
  // x += y over n elements.
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // dst[i, :] = src[rows[i], :]  (host row indices).
  virtual void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim,
                          float* dst) = 0;
  // dst[i * dst_stride + j] = src[i * src_stride + j] for i < rows, j < cols: a column slice
  // of one row-major matrix into another (regions must not overlap).
  virtual void CopyStrided(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                           int64_t rows, int64_t cols) = 0;
  // dst[rows[i], :] += scales[i] * src[i, :]  (host indices and scales; rows distinct).
  virtual void ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                              int64_t dim, float* dst) = 0;
  // ys[i] = x · ws[i]ᵀ (MatMul for each). The CPU quantizes x once for matrices of one width and
  // activation type (q, k and v; gate and up) and runs every row in one parallel region.
  virtual void MatMuls(std::span<const WeightRef> ws, const float* x, int64_t n,
                       std::span<float* const> ys) = 0;
  // The grouped-experts op: every expert of a group, the same results as applying them one by
  // one with GatherRows, MatMul, AddBias, SiluMul (ClampedSwiGlu), MatMul, AddBias and
  // ScatterAddRows (ApplyExpertsByOps does exactly that; the CPU runs the group in two parallel
  // regions with the same bits).
  virtual void ApplyExperts(const GroupedExpertsArgs& args) = 0;

  // Advisory: a forward pass of `rows` rows of model `model` (a caller's tag: the models sharing
  // this backend, a target and its drafter, are measured apart) begins / ends. A backend may
  // choose how to run small ops from such measures (the CPU: on the calling thread alone where
  // that measures faster, cpu/thread_choice.h); never a change of results.
  // `excluded_seconds`: time in the pass spent waiting on something else (expert reads), left
  // out of the measure; `completed` false (the pass failed part way): not measured. Passes may
  // nest (the inner one is part of the outer).
  virtual void BeginPass(uint32_t model, int64_t rows) {}
  virtual void EndPass(double excluded_seconds, bool completed) {}

  // Waits for every queued op; the first error since the last call (device errors; OK on CPU).
  virtual absl::Status Synchronize() = 0;

  // Device tiers (thread-safe) ---------------------------------------------------------------------
  // Copies host bytes into backend memory obtained from Allocate(), on a transfer queue of its own
  // so the copy overlaps queued ops (CUDA: its own stream, through pinned staging unless the
  // source is pinned); returns once the bytes have landed. Errors are returned, not kept.
  virtual absl::Status TransferIn(void* dst, const void* host_src, size_t bytes) = 0;
  // A fence after every op queued so far (from any thread): memory those ops read may be reused
  // once Wait() returns. On the CPU ops are synchronous and the fence is already passed.
  virtual std::unique_ptr<Fence> RecordFence() = 0;
  virtual MemoryInfo memory_info() const = 0;
};

// MatMuls and ApplyExperts op by op, for backends without a fused form of their own.
void MatMulsByOps(Backend& be, std::span<const WeightRef> ws, const float* x, int64_t n,
                  std::span<float* const> ys);
void ApplyExpertsByOps(Backend& be, const GroupedExpertsArgs& args);

}  // namespace colibri::backend

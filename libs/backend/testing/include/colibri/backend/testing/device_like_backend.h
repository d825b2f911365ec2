// A test backend that behaves like a device backend without a GPU: ops run on an inner CPU
// backend, but memory is its own (zero_copy() is false, ImportWeight copies into `storage`,
// TransferIn copies), every byte allocated is counted, and an optional cap turns allocations
// past it into ResourceExhausted, as a full GPU would. memory_info() reports the cap.
// It lets the device paths (the VRAM tier, the engine's non-zero-copy expert path, start-up
// memory checks) run and be checked on any machine. Thread-safe like Backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "colibri/backend/backend.h"

namespace colibri::backend {

struct DeviceLikeCounters {
  std::atomic<uint64_t> bytes_allocated{0};  // live now
  std::atomic<uint64_t> peak_bytes{0};
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> failed_allocations{0};
  std::atomic<uint64_t> imports{0};  // ImportWeight calls (each a copy)
  std::atomic<uint64_t> bytes_imported{0};
  std::atomic<uint64_t> transfers{0};  // TransferIn calls
  std::atomic<uint64_t> bytes_transferred{0};
  std::atomic<uint64_t> fences{0};
};

class DeviceLikeBackend final : public Backend {
 public:
  // `memory_cap`: bytes that may be allocated at once (0: no cap).
  explicit DeviceLikeBackend(uint64_t memory_cap = 0, int threads = 2);
  ~DeviceLikeBackend() override;

  const DeviceLikeCounters& counters() const { return *counters_; }

  std::string_view name() const override { return "device-like"; }
  // Every op, unless refused below (as a device backend lacking a kernel would).
  absl::Status SupportsOp(const OpSpec& spec) const override;
  // From now on SupportsOp refuses `op` with `dtype` weights (any weight type: nullopt), or
  // attention above `max_head_dim`. Call before the backend is shared.
  void RefuseOp(Op op, std::optional<quant::DType> dtype = std::nullopt);
  void LimitHeadDim(int64_t max_head_dim) { max_head_dim_ = max_head_dim; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override;
  void Upload(void* dst, const void* host_src, size_t bytes) override;
  void Download(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Zero(void* dst, size_t bytes) override;
  bool zero_copy() const override { return false; }
  absl::StatusOr<WeightRef> ImportWeight(quant::DType dtype, int64_t rows, int64_t cols,
                                         const void* host_data,
                                         std::unique_ptr<Buffer>* storage) override;

  void GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override;
  void MatMul(const WeightRef& w, const float* x, int64_t n, float* y, bool accumulate) override;
  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) override;
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override;
  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& rope) override;
  void StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n, int64_t kv_dim,
               float* k_cache, float* v_cache) override;
  void Attention(const AttentionArgs& args) override;
  void SiluMul(float* gate, const float* up, int64_t n) override;
  void ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) override;
  void Add(float* x, const float* y, int64_t n) override;
  void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim,
                  float* dst) override;
  void CopyStrided(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                   int64_t rows, int64_t cols) override;
  void ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                      int64_t dim, float* dst) override;
  // Op by op, as a device backend without fused forms runs them (each op counted).
  void MatMuls(std::span<const WeightRef> ws, const float* x, int64_t n,
               std::span<float* const> ys) override {
    MatMulsByOps(*this, ws, x, n, ys);
  }
  void ApplyExperts(const GroupedExpertsArgs& args) override { ApplyExpertsByOps(*this, args); }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status TransferIn(void* dst, const void* host_src, size_t bytes) override;
  std::unique_ptr<Fence> RecordFence() override;
  MemoryInfo memory_info() const override;

 private:
  const uint64_t cap_;
  std::unique_ptr<Backend> cpu_;
  std::shared_ptr<DeviceLikeCounters> counters_;  // shared with the buffers, which may outlive us
  std::vector<std::pair<Op, std::optional<quant::DType>>> refused_;
  int64_t max_head_dim_ = 0;  // 0: any
};

}  // namespace colibri::backend

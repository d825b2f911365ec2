#include "colibri/backend/testing/device_like_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/core/file_util.h"
#include "colibri/core/units.h"

namespace colibri::backend {
namespace {

class CountedBuffer final : public Buffer {
 public:
  CountedBuffer(AlignedBytes bytes, size_t size, std::shared_ptr<DeviceLikeCounters> counters)
      : bytes_(std::move(bytes)), size_(size), counters_(std::move(counters)) {}
  ~CountedBuffer() override { counters_->bytes_allocated -= size_; }
  void* data() override { return bytes_.get(); }
  size_t size() const override { return size_; }

 private:
  AlignedBytes bytes_;
  size_t size_;
  std::shared_ptr<DeviceLikeCounters> counters_;
};

class PassedFence final : public Fence {
 public:
  absl::Status Wait() override { return absl::OkStatus(); }
};

}  // namespace

DeviceLikeBackend::DeviceLikeBackend(uint64_t memory_cap, int threads)
    : cap_(memory_cap),
      cpu_(CreateCpuBackend({.threads = threads})),
      counters_(std::make_shared<DeviceLikeCounters>()) {}

DeviceLikeBackend::~DeviceLikeBackend() = default;

absl::Status DeviceLikeBackend::SupportsOp(const OpSpec& spec) const {
  if (spec.op == Op::kAttention && max_head_dim_ > 0 && spec.head_dim > max_head_dim_) {
    return absl::UnimplementedError(absl::StrCat("backend 'device-like' does not support op ",
                                                 std::string(OpName(spec.op)), " with head_dim ",
                                                 spec.head_dim, " (at most ", max_head_dim_, ")"));
  }
  for (const auto& [op, dtype] : refused_) {
    if (op != spec.op || (dtype && *dtype != spec.dtype)) continue;
    return absl::UnimplementedError(
        absl::StrCat("backend 'device-like' does not support op ", std::string(OpName(spec.op)),
                     " with ", std::string(quant::DTypeName(spec.dtype)), " weights"));
  }
  return absl::OkStatus();
}

void DeviceLikeBackend::RefuseOp(Op op, std::optional<quant::DType> dtype) {
  refused_.emplace_back(op, dtype);
}

absl::StatusOr<std::unique_ptr<Buffer>> DeviceLikeBackend::Allocate(size_t bytes) {
  // Reserve first, so concurrent allocations never pass the cap together.
  const uint64_t now = counters_->bytes_allocated.fetch_add(bytes) + bytes;
  if (cap_ > 0 && now > cap_) {
    counters_->bytes_allocated -= bytes;
    counters_->failed_allocations++;
    return absl::ResourceExhaustedError(
        absl::StrCat("device-like backend: cannot allocate ", FormatSize(bytes), " (",
                     FormatSize(now - bytes), " of ", FormatSize(cap_), " in use)"));
  }
  auto mem = AllocateAligned(std::max<size_t>(bytes, 1), 256);
  if (!mem.ok()) {
    counters_->bytes_allocated -= bytes;
    return mem.status();
  }
  counters_->allocations++;
  uint64_t peak = counters_->peak_bytes.load();
  while (now > peak && !counters_->peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return std::unique_ptr<Buffer>(new CountedBuffer(std::move(*mem), bytes, counters_));
}

void DeviceLikeBackend::Upload(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void DeviceLikeBackend::Download(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void DeviceLikeBackend::Copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}
void DeviceLikeBackend::Zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

absl::StatusOr<WeightRef> DeviceLikeBackend::ImportWeight(quant::DType dtype, int64_t rows,
                                                          int64_t cols, const void* host_data,
                                                          std::unique_ptr<Buffer>* storage) {
  auto row_bytes = quant::CheckedRowBytes(dtype, cols);
  if (!row_bytes.ok()) return row_bytes.status();
  const size_t bytes = *row_bytes * static_cast<size_t>(rows);
  auto buf = Allocate(bytes);
  if (!buf.ok()) return buf.status();
  std::memcpy((*buf)->data(), host_data, bytes);
  counters_->imports++;
  counters_->bytes_imported += bytes;
  WeightRef ref{dtype, rows, cols, (*buf)->data()};
  *storage = std::move(*buf);
  return ref;
}

void DeviceLikeBackend::GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) {
  cpu_->GetRows(table, ids, n, out);
}
void DeviceLikeBackend::MatMul(const WeightRef& w, const float* x, int64_t n, float* y,
                               bool accumulate) {
  cpu_->MatMul(w, x, n, y, accumulate);
}
void DeviceLikeBackend::AddBias(float* x, const float* bias, int64_t n, int64_t dim) {
  cpu_->AddBias(x, bias, n, dim);
}
void DeviceLikeBackend::RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim,
                                float eps, float* y) {
  cpu_->RmsNorm(x, weight, n, dim, eps, y);
}
void DeviceLikeBackend::Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                             const int32_t* positions, const RopeParams& rope) {
  cpu_->Rope(x, n, n_heads, head_dim, positions, rope);
}
void DeviceLikeBackend::StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n,
                                int64_t kv_dim, float* k_cache, float* v_cache) {
  cpu_->StoreKv(k, v, positions, n, kv_dim, k_cache, v_cache);
}
void DeviceLikeBackend::Attention(const AttentionArgs& args) { cpu_->Attention(args); }
void DeviceLikeBackend::SiluMul(float* gate, const float* up, int64_t n) {
  cpu_->SiluMul(gate, up, n);
}
void DeviceLikeBackend::ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha,
                                      float limit) {
  cpu_->ClampedSwiGlu(gate, up, n, alpha, limit);
}
void DeviceLikeBackend::Add(float* x, const float* y, int64_t n) { cpu_->Add(x, y, n); }
void DeviceLikeBackend::GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim,
                                   float* dst) {
  cpu_->GatherRows(src, rows, n, dim, dst);
}
void DeviceLikeBackend::CopyStrided(float* dst, int64_t dst_stride, const float* src,
                                    int64_t src_stride, int64_t rows, int64_t cols) {
  cpu_->CopyStrided(dst, dst_stride, src, src_stride, rows, cols);
}
void DeviceLikeBackend::ScatterAddRows(const float* src, const int32_t* rows, const float* scales,
                                       int64_t n, int64_t dim, float* dst) {
  cpu_->ScatterAddRows(src, rows, scales, n, dim, dst);
}

absl::Status DeviceLikeBackend::TransferIn(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
  counters_->transfers++;
  counters_->bytes_transferred += bytes;
  return absl::OkStatus();
}

std::unique_ptr<Fence> DeviceLikeBackend::RecordFence() {
  counters_->fences++;
  return std::make_unique<PassedFence>();
}

MemoryInfo DeviceLikeBackend::memory_info() const {
  if (cap_ == 0) return {};
  const uint64_t used = counters_->bytes_allocated.load();
  return {cap_ > used ? cap_ - used : 0, cap_};
}

}  // namespace colibri::backend

// Model::SnapshotKv / RestoreKv: KV caches in and out of backend memory, for the KV store
// (host-RAM offload, persistence across restarts).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/engine/model.h"
#include "colibri/quant/quantize.h"

namespace colibri::engine {

absl::StatusOr<KvSnapshot> Model::SnapshotKv(const KvCache& cache, std::vector<int32_t> tokens,
                                             std::string session_id, quant::DType dtype) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > cache.n_past_) {
    return absl::InvalidArgumentError(absl::StrCat("KV snapshot of ", n, " positions from a cache holding ",
                                                   cache.n_past_));
  }
  if (dtype != quant::DType::kF32 && !(dtype == quant::DType::kQ8_0 && cache.kv_dim_ % 32 == 0)) {
    return absl::InvalidArgumentError("KV snapshots are F32, or Q8_0 when kv_dim is a multiple of 32");
  }
  // Sliding layers hold only their ring: the snapshot keeps the window before position n (what
  // the next token attends to); older rows of those layers are written as zeros, never read.
  const int64_t held_from = std::max(cache.ring_lo_, cache.n_past_ - cache.ring_);
  if (cache.window_ > 0 && held_from > std::max<int64_t>(0, n - cache.window_ + 1)) {
    return absl::FailedPreconditionError(absl::StrCat("KV snapshot of ", n, " positions: the sliding layers hold "
                                                      "positions from ", held_from, " only"));
  }
  KvSnapshot s;
  s.tokens = std::move(tokens);
  s.session_id = std::move(session_id);
  s.dtype = dtype;
  s.n_layers = config_.n_layers;
  s.kv_dim = cache.kv_dim_;
  s.rows.resize(static_cast<size_t>(s.n_layers) * 2 * static_cast<size_t>(n) * s.RowBytes());
  const size_t f32_bytes = static_cast<size_t>(n * cache.kv_dim_) * sizeof(float);
  std::vector<float> host(dtype == quant::DType::kF32 ? 0 : static_cast<size_t>(n * cache.kv_dim_));
  for (int64_t l = 0; l < s.n_layers; ++l) {
    for (int side = 0; side < 2; ++side) {
      const auto& buf = (side == 0 ? cache.k_ : cache.v_)[static_cast<size_t>(l)];
      if (n == 0) continue;
      float* dst = dtype == quant::DType::kF32 ? reinterpret_cast<float*>(s.Row(l, side, 0)) : host.data();
      if (cache.Sliding(static_cast<size_t>(l))) {
        DownloadRing(cache, *buf, n, dst);
      } else {
        backend_->Download(dst, buf->data(), f32_bytes);
      }
      if (dtype == quant::DType::kF32) continue;
      for (int64_t t = 0; t < n; ++t) {
        quant::QuantizeRow(dtype, host.data() + t * cache.kv_dim_, s.Row(l, side, t), cache.kv_dim_);
      }
    }
  }
  return s;
}

absl::StatusOr<std::unique_ptr<KvCache>> Model::RestoreKv(const KvSnapshot& s) {
  const int64_t kv_dim = config_.n_kv_heads * config_.head_dim;
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  if (s.n_layers != config_.n_layers || s.kv_dim != kv_dim ||
      s.rows.size() != static_cast<size_t>(s.n_layers) * 2 * static_cast<size_t>(n) * s.RowBytes()) {
    return absl::FailedPreconditionError(absl::StrCat("KV snapshot of shape (", s.n_layers, " layers, kv_dim ",
                                                      s.kv_dim, ") does not fit this model (", config_.n_layers,
                                                      ", ", kv_dim, ")"));
  }
  auto cache = NewCache();
  RETURN_IF_ERROR(EnsureCapacity(cache.get(), n, 1));
  std::vector<float> host(s.dtype == quant::DType::kF32 ? 0 : static_cast<size_t>(n * kv_dim));
  for (int64_t l = 0; l < s.n_layers; ++l) {
    for (int side = 0; side < 2; ++side) {
      auto& buf = (side == 0 ? cache->k_ : cache->v_)[static_cast<size_t>(l)];
      if (n == 0) continue;
      const float* src = reinterpret_cast<const float*>(s.Row(l, side, 0));
      if (s.dtype != quant::DType::kF32) {
        for (int64_t t = 0; t < n; ++t) {
          quant::DequantizeRow(s.dtype, s.Row(l, side, t), host.data() + t * kv_dim, kv_dim);
        }
        src = host.data();
      }
      if (cache->Sliding(static_cast<size_t>(l))) {
        // The last ring-full of positions, each to its row (the window before n is among them).
        for (int64_t t = std::max<int64_t>(0, n - cache->ring_); t < n; ++t) {
          backend_->Upload(buf->f32() + (t % cache->ring_) * kv_dim, src + t * kv_dim, sizeof(float) * kv_dim);
        }
      } else {
        backend_->Upload(buf->data(), src, static_cast<size_t>(n * kv_dim) * sizeof(float));
      }
    }
  }
  cache->n_past_ = n;
  cache->ring_lo_ = cache->window_ > 0 ? std::max<int64_t>(0, n - cache->window_ + 1) : 0;
  return cache;
}

void Model::DownloadRing(const KvCache& cache, backend::Buffer& ring, int64_t n, float* dst) const {
  const int64_t kv_dim = cache.kv_dim_;
  const int64_t held_from = std::max(cache.ring_lo_, cache.n_past_ - cache.ring_);
  std::fill(dst, dst + n * kv_dim, 0.0f);
  for (int64_t t = std::max<int64_t>(0, held_from); t < n; ++t) {
    backend_->Download(dst + t * kv_dim, ring.f32() + (t % cache.ring_) * kv_dim, sizeof(float) * kv_dim);
  }
}

}  // namespace colibri::engine

// Model::SnapshotKv / RestoreKv: KV caches in and out of backend memory, for the KV store
// (host-RAM offload, persistence across restarts).
//
// With latent attention a cache holds one row [kv_lora_rank + qk_rope_head_dim] per token and
// layer; a snapshot keeps its (K, V) shape by holding the first half of each latent row as
// side 0 and the second half as side 1 (kv_dim = half the latent row).
//
// Sliding-window layers hold only their ring: a snapshot keeps the window before its last position.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/model.h"
#include "colibri/quant/quantize.h"

namespace colibri::engine {
namespace {

// Host rows [n, kv_dim] of both snapshot sides of one layer's cache buffers.
void DownloadSides(backend::Backend& be, const KvCache::LayerBuffers& b, int64_t n, int64_t kv_dim,
                   std::vector<float> (&sides)[2]) {
  for (auto& s : sides) s.resize(static_cast<size_t>(n * kv_dim));
  if (b.v == nullptr) {
    std::vector<float> latent(static_cast<size_t>(n * 2 * kv_dim));
    be.Download(latent.data(), b.k, latent.size() * sizeof(float));
    for (int64_t t = 0; t < n; ++t) {
      for (int side = 0; side < 2; ++side) {
        std::memcpy(sides[side].data() + t * kv_dim, latent.data() + (t * 2 + side) * kv_dim,
                    kv_dim * sizeof(float));
      }
    }
    return;
  }
  be.Download(sides[0].data(), b.k, sides[0].size() * sizeof(float));
  be.Download(sides[1].data(), b.v, sides[1].size() * sizeof(float));
}

void UploadSides(backend::Backend& be, const KvCache::LayerBuffers& b, int64_t n, int64_t kv_dim,
                 const std::vector<float> (&sides)[2]) {
  if (b.v == nullptr) {
    std::vector<float> latent(static_cast<size_t>(n * 2 * kv_dim));
    for (int64_t t = 0; t < n; ++t) {
      for (int side = 0; side < 2; ++side) {
        std::memcpy(latent.data() + (t * 2 + side) * kv_dim, sides[side].data() + t * kv_dim,
                    kv_dim * sizeof(float));
      }
    }
    be.Upload(b.k, latent.data(), latent.size() * sizeof(float));
    return;
  }
  be.Upload(b.k, sides[0].data(), sides[0].size() * sizeof(float));
  be.Upload(b.v, sides[1].data(), sides[1].size() * sizeof(float));
}

}  // namespace

absl::StatusOr<KvSnapshot> Model::SnapshotKv(const KvCache& cache, std::vector<int32_t> tokens,
                                             std::string session_id, quant::DType dtype) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t kv_dim = KvSnapshotDim(config_);
  if (n > cache.n_past_) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV snapshot of ", n, " positions from a cache holding ", cache.n_past_));
  }
  if (dtype != quant::DType::kF32 && !(dtype == quant::DType::kQ8_0 && kv_dim % 32 == 0)) {
    return absl::InvalidArgumentError(
        "KV snapshots are F32, or Q8_0 when kv_dim is a multiple of 32");
  }
  // Sliding layers hold only their ring: the snapshot keeps the window before position n (what
  // the next token attends to); older rows of those layers are written as zeros, never read.
  const int64_t held_from = std::max(cache.ring_lo_, cache.n_past_ - cache.ring_);
  if (cache.window_ > 0 && held_from > std::max<int64_t>(0, n - cache.window_ + 1)) {
    return absl::FailedPreconditionError(absl::StrCat("KV snapshot of ", n,
                                                      " positions: the sliding layers hold "
                                                      "positions from ",
                                                      held_from, " only"));
  }
  KvSnapshot s;
  s.tokens = std::move(tokens);
  s.session_id = std::move(session_id);
  s.dtype = dtype;
  s.n_layers = config_.n_layers;
  s.kv_dim = kv_dim;
  s.rows.resize(static_cast<size_t>(s.n_layers) * 2 * static_cast<size_t>(n) * s.RowBytes());
  if (n == 0) return s;
  std::vector<float> sides[2];
  for (int64_t l = 0; l < s.n_layers; ++l) {
    if (cache.Sliding(static_cast<size_t>(l))) {
      for (int side = 0; side < 2; ++side) {
        sides[side].resize(static_cast<size_t>(n * kv_dim));
        DownloadRing(cache, *(side == 0 ? cache.k_ : cache.v_)[static_cast<size_t>(l)], n,
                     sides[side].data());
      }
    } else {
      DownloadSides(*backend_, cache.Buffers(l), n, kv_dim, sides);
    }
    for (int side = 0; side < 2; ++side) {
      if (dtype == quant::DType::kF32) {
        std::memcpy(s.Row(l, side, 0), sides[side].data(), sides[side].size() * sizeof(float));
        continue;
      }
      for (int64_t t = 0; t < n; ++t)
        quant::QuantizeRow(dtype, sides[side].data() + t * kv_dim, s.Row(l, side, t), kv_dim);
    }
  }
  return s;
}

absl::StatusOr<std::unique_ptr<KvCache>> Model::RestoreKv(const KvSnapshot& s) {
  const int64_t kv_dim = KvSnapshotDim(config_);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  if (s.n_layers != config_.n_layers || s.kv_dim != kv_dim ||
      s.rows.size() !=
          static_cast<size_t>(s.n_layers) * 2 * static_cast<size_t>(n) * s.RowBytes()) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV snapshot of shape (", s.n_layers, " layers, kv_dim ", s.kv_dim,
                     ") does not fit this model (", config_.n_layers, ", ", kv_dim, ")"));
  }
  auto cache = NewCache();
  RETURN_IF_ERROR(EnsureCapacity(cache.get(), n, 1));
  std::vector<float> sides[2];
  for (int64_t l = 0; n > 0 && l < s.n_layers; ++l) {
    for (int side = 0; side < 2; ++side) {
      sides[side].resize(static_cast<size_t>(n * kv_dim));
      if (s.dtype == quant::DType::kF32) {
        std::memcpy(sides[side].data(), s.Row(l, side, 0), sides[side].size() * sizeof(float));
        continue;
      }
      for (int64_t t = 0; t < n; ++t) {
        quant::DequantizeRow(s.dtype, s.Row(l, side, t), sides[side].data() + t * kv_dim, kv_dim);
      }
    }
    if (cache->Sliding(static_cast<size_t>(l))) {
      // The last ring-full of positions, each to its row (the window before n is among them).
      for (int side = 0; side < 2; ++side) {
        float* ring = (side == 0 ? cache->k_ : cache->v_)[static_cast<size_t>(l)]->f32();
        for (int64_t t = std::max<int64_t>(0, n - cache->ring_); t < n; ++t) {
          backend_->Upload(ring + (t % cache->ring_) * kv_dim, sides[side].data() + t * kv_dim,
                           sizeof(float) * kv_dim);
        }
      }
    } else {
      UploadSides(*backend_, cache->Buffers(l), n, kv_dim, sides);
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
    backend_->Download(dst + t * kv_dim, ring.f32() + (t % cache.ring_) * kv_dim,
                       sizeof(float) * kv_dim);
  }
}

}  // namespace colibri::engine

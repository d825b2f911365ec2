#include "colibri/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/thread_pool.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::backend {
namespace {

// y += a * x and y *= a over n floats: the attention's inner loops. GCC builds one copy per
// target and picks the best for the CPU at load time (ifunc), so the generic build still gets
// AVX-512 / AVX2 here.
__attribute__((target_clones("avx512f", "avx2", "default"))) void AxpyF32(float a, const float* __restrict x,
                                                                          float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void ScaleF32(float a, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

class HostBuffer final : public Buffer {
 public:
  HostBuffer(AlignedBytes bytes, size_t size) : bytes_(std::move(bytes)), size_(size) {}
  void* data() override { return bytes_.get(); }
  size_t size() const override { return size_; }

 private:
  AlignedBytes bytes_;
  size_t size_;
};

class PassedFence final : public Fence {
 public:
  absl::Status Wait() override { return absl::OkStatus(); }
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  std::string_view name() const override { return "cpu"; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    auto mem = AllocateAligned(bytes, 64);
    if (!mem.ok()) return mem.status();
    return std::unique_ptr<Buffer>(new HostBuffer(std::move(*mem), bytes));
  }
  void Upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void Zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  bool zero_copy() const override { return true; }
  absl::StatusOr<WeightRef> ImportWeight(quant::DType dtype, int64_t rows, int64_t cols, const void* host_data,
                                         std::unique_ptr<Buffer>* storage) override {
    return WeightRef{dtype, rows, cols, host_data};
  }

  void GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override {
    const size_t row_bytes = quant::RowBytes(table.dtype, table.cols);
    for (int64_t i = 0; i < n; ++i) {
      const auto* row = static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[i]) * row_bytes;
      quant::DequantizeRow(table.dtype, row, out + i * table.cols, table.cols);
    }
  }

  void MatMul(const WeightRef& w, const float* x, int64_t n, float* y, bool accumulate) override {
    const quant::DType act_type = quant::Traits(w.dtype).vec_dot_type;
    const size_t act_row_bytes = quant::RowBytes(act_type, w.cols);
    const size_t w_row_bytes = quant::RowBytes(w.dtype, w.cols);
    if (act_scratch_.size() < act_row_bytes * static_cast<size_t>(n)) {
      act_scratch_.resize(act_row_bytes * static_cast<size_t>(n));
    }
    uint8_t* act = act_scratch_.data();
    pool_.ParallelFor(n, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        quant::QuantizeActivations(act_type, x + t * w.cols, act + static_cast<size_t>(t) * act_row_bytes, w.cols);
      }
    });
    const auto* wdata = static_cast<const uint8_t*>(w.data);
    const int64_t rows = w.rows;
    // Each task takes a range of rows, in tiles small enough to stay in L2 while every token
    // is dotted with them: decode (n small) streams each weight byte from memory once;
    // prefill reuses the tile across tokens. quant::MatVec runs the kernel set's fastest
    // multi-row kernel (the AVX-512 Q4_K one reorders the activations once per call).
    constexpr int64_t kRowTile = 64;
    pool_.ParallelFor(rows, 8, [&](int64_t r0, int64_t r1) {
      float tile_out[kRowTile];
      for (int64_t a = r0; a < r1; a += kRowTile) {
        const int64_t b = std::min(r1, a + kRowTile);
        for (int64_t t = 0; t < n; ++t) {
          quant::MatVec(w.dtype, wdata + static_cast<size_t>(a) * w_row_bytes, w_row_bytes, b - a,
                        act + static_cast<size_t>(t) * act_row_bytes, w.cols, tile_out);
          float* out = y + t * rows + a;
          if (accumulate) {
            for (int64_t r = 0; r < b - a; ++r) out[r] += tile_out[r];
          } else {
            std::memcpy(out, tile_out, sizeof(float) * static_cast<size_t>(b - a));
          }
        }
      }
    });
  }

  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) override {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) x[i * dim + j] += bias[j];
    }
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* y) override {
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * dim;
      float* yi = y + i * dim;
      double ss = 0;  // double accumulation: dims are up to ~8k and this is cheap
      for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xi[j]) * xi[j];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
      for (int64_t j = 0; j < dim; ++j) yi[j] = xi[j] * scale * weight[j];
    }
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& p) override {
    const int64_t half = p.n_rot / 2;
    const bool split = p.style == RopeStyle::kHalfSplit;
    for (int64_t t = 0; t < n; ++t) {
      const double pos = positions[t];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * p.inv_freq[i];
        const float c = static_cast<float>(std::cos(angle) * p.mscale);
        const float s = static_cast<float>(std::sin(angle) * p.mscale);
        for (int64_t h = 0; h < n_heads; ++h) {
          float* rot = x + (t * n_heads + h) * head_dim + p.offset;
          float* a = split ? rot + i : rot + 2 * i;
          float* b = split ? rot + i + half : rot + 2 * i + 1;
          const float x0 = *a, x1 = *b;
          *a = x0 * c - x1 * s;
          *b = x0 * s + x1 * c;
        }
      }
    }
  }

  void StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n, int64_t kv_dim, float* k_cache,
               float* v_cache) override {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(k_cache + static_cast<int64_t>(positions[i]) * kv_dim, k + i * kv_dim, sizeof(float) * kv_dim);
      std::memcpy(v_cache + static_cast<int64_t>(positions[i]) * kv_dim, v + i * kv_dim, sizeof(float) * kv_dim);
    }
  }

  void Attention(const AttentionArgs& a) override {
    const int64_t group = a.n_heads / a.n_kv_heads;
    const int64_t kv_dim = a.n_kv_heads * a.head_dim;
    const int64_t q_dim = a.n_heads * a.head_dim;
    // One task per (row, head). Online softmax over blocks of keys: memory stays
    // O(head_dim + block) per task whatever the context length. Scores of a block come from
    // the SIMD F32 dot product; the running max and sum are rescaled once per block. A sink
    // starts the running softmax as one more logit with a zero value row.
    constexpr int64_t kKeyBlock = 64;
    pool_.ParallelFor(a.n * a.n_heads, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc(static_cast<size_t>(a.head_dim));
      float scores[kKeyBlock];
      for (int64_t task = b; task < e; ++task) {
        const int64_t t = task / a.n_heads, h = task % a.n_heads;
        const int64_t kvh = h / group;
        const float* q = a.q + t * q_dim + h * a.head_dim;
        std::fill(acc.begin(), acc.end(), 0.0f);
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        if (a.sinks != nullptr) {
          m = a.sinks[h];
          l = 1.0f;
        }
        const int64_t keys = static_cast<int64_t>(a.positions[t]) + 1;
        const int64_t first = a.window > 0 ? std::max<int64_t>(0, keys - a.window) : 0;
        for (int64_t j0 = first; j0 < keys;) {
          int64_t j1 = std::min(keys, j0 + kKeyBlock);
          // A block never wraps around a ring: its rows are contiguous.
          if (a.ring > 0) j1 = std::min(j1, (j0 / a.ring + 1) * a.ring);
          const int64_t row0 = a.ring > 0 ? j0 % a.ring : j0;
          // The block's keys are rows kv_dim apart: one F32 matrix-vector product scores them.
          quant::MatVec(quant::DType::kF32, a.k_cache + row0 * kv_dim + kvh * a.head_dim,
                        static_cast<size_t>(kv_dim) * sizeof(float), j1 - j0, q, a.head_dim, scores);
          float block_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < j1 - j0; ++j) {
            scores[j] *= a.scale;
            block_max = std::max(block_max, scores[j]);
          }
          if (block_max > m) {
            const float corr = std::exp(m - block_max);
            l *= corr;
            ScaleF32(corr, acc.data(), a.head_dim);
            m = block_max;
          }
          for (int64_t j = 0; j < j1 - j0; ++j) {
            const float p = std::exp(scores[j] - m);
            l += p;
            AxpyF32(p, a.v_cache + (row0 + j) * kv_dim + kvh * a.head_dim, acc.data(), a.head_dim);
          }
          j0 = j1;
        }
        float* out = a.out + t * q_dim + h * a.head_dim;
        const float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int64_t d = 0; d < a.head_dim; ++d) out[d] = acc[static_cast<size_t>(d)] * inv;
      }
    });
  }

  void SiluMul(float* gate, const float* up, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }

  void ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) override {
    for (int64_t i = 0; i < n; ++i) {
      const float g = std::min(gate[i], limit);
      const float u = std::clamp(up[i], -limit, limit);
      gate[i] = (u + 1.0f) * g / (1.0f + std::exp(-alpha * g));
    }
  }

  void Add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dim, src + rows[i] * dim, sizeof(float) * dim);
  }

  void CopyStrided(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                   int64_t cols) override {
    for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * dst_stride, src + i * src_stride, sizeof(float) * cols);
  }

  void ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n, int64_t dim,
                      float* dst) override {
    for (int64_t i = 0; i < n; ++i) {
      float* d = dst + static_cast<int64_t>(rows[i]) * dim;
      const float* s = src + i * dim;
      for (int64_t j = 0; j < dim; ++j) d[j] += scales[i] * s[j];
    }
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status TransferIn(void* dst, const void* host_src, size_t bytes) override {
    std::memcpy(dst, host_src, bytes);
    return absl::OkStatus();
  }
  // Ops run to completion before they return, so every fence is already passed.
  std::unique_ptr<Fence> RecordFence() override { return std::make_unique<PassedFence>(); }
  MemoryInfo memory_info() const override { return {}; }

 private:
  ThreadPool pool_;
  std::vector<uint8_t> act_scratch_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options) {
  int threads = options.threads > 0 ? options.threads : PhysicalCoreCount();
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace colibri::backend

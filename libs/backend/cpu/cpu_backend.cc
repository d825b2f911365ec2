#include "colibri/backend/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention_scores.h"
#include "attention_values.h"
#include "colibri/backend/host_ops.h"
#include "colibri/core/file_util.h"
#include "colibri/core/thread_pool.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"
#include "thread_choice.h"

namespace colibri::backend {
namespace {

// The attention's rescale of an accumulator, y *= a. GCC builds one copy per target and picks the
// best for the CPU at load time (ifunc), so the generic build still gets AVX-512 / AVX2 here.
__attribute__((target_clones("avx512f", "avx2", "default"))) void ScaleF32(float a,
                                                                           float* __restrict y,
                                                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

// The gated activations of the FFN: gate[i] = silu(gate[i]) * up[i], or gpt-oss's clamped SwiGLU.
void SiluMulF32(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void ClampedSwiGluF32(float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = (u + 1.0f) * g / (1.0f + std::exp(-alpha * g));
  }
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

class CpuBackend final : public Backend, public HostOps {
 public:
  CpuBackend(int threads, bool fixed_threads)
      : pool_(threads), fixed_threads_(fixed_threads || pool_.size() == 1) {}

  std::string_view name() const override { return "cpu"; }
  // Every op, every weight type the quant library knows, any head dimension.
  absl::Status SupportsOp(const OpSpec& spec) const override { return absl::OkStatus(); }

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
  absl::StatusOr<WeightRef> ImportWeight(quant::DType dtype, int64_t rows, int64_t cols,
                                         const void* host_data,
                                         std::unique_ptr<Buffer>* storage) override {
    return WeightRef{dtype, rows, cols, host_data};
  }

  void GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override {
    const size_t row_bytes = quant::RowBytes(table.dtype, table.cols);
    for (int64_t i = 0; i < n; ++i) {
      const auto* row =
          static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[i]) * row_bytes;
      quant::DequantizeRow(table.dtype, row, out + i * table.cols, table.cols);
    }
  }

  void MatMul(const WeightRef& w, const float* x, int64_t n, float* y, bool accumulate) override {
    MatMulShared(&w, &y, 1, x, n, accumulate);
  }

  void MatMuls(std::span<const WeightRef> ws, const float* x, int64_t n,
               std::span<float* const> ys) override {
    const bool shared = std::all_of(ws.begin(), ws.end(), [&](const WeightRef& w) {
      return w.cols == ws[0].cols &&
             quant::Traits(w.dtype).vec_dot_type == quant::Traits(ws[0].dtype).vec_dot_type;
    });
    if (shared) {
      MatMulShared(ws.data(), ys.data(), ws.size(), x, n, /*accumulate=*/false);
      return;
    }
    for (size_t i = 0; i < ws.size(); ++i)
      MatMulShared(&ws[i], &ys[i], 1, x, n, /*accumulate=*/false);
  }

  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) override {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) x[i * dim + j] += bias[j];
    }
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
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

  void StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n, int64_t kv_dim,
               float* k_cache, float* v_cache) override {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(k_cache + static_cast<int64_t>(positions[i]) * kv_dim, k + i * kv_dim,
                  sizeof(float) * kv_dim);
      std::memcpy(v_cache + static_cast<int64_t>(positions[i]) * kv_dim, v + i * kv_dim,
                  sizeof(float) * kv_dim);
    }
  }

  void Attention(const AttentionArgs& a) override {
    if (a.n <= 0) return;
    const int64_t group = a.n_heads / a.n_kv_heads;
    const int64_t kv_dim = a.n_kv_heads * a.head_dim;
    const int64_t q_dim = a.n_heads * a.head_dim;
    // One task per (row, KV head, chunk of that KV head's query heads): each block of keys is
    // scored against all heads of the chunk at once, so a key row is read once per chunk. The
    // chunks are whole groups unless that leaves fewer than two tasks per thread (decode with
    // few KV heads). Online softmax per head over blocks of keys: memory stays
    // O(chunk * (head_dim + block)) per task whatever the context length; the running max and
    // sum are rescaled once per block. A sink starts the running softmax as one more logit with
    // a zero value row.
    constexpr int64_t kKeyBlock = 64;
    const int64_t groups = a.n * a.n_kv_heads;
    const int64_t want_tasks = 2 * static_cast<int64_t>(pool_.size());
    const int64_t split = std::clamp<int64_t>((want_tasks + groups - 1) / groups, 1, group);
    const int64_t chunk = (group + split - 1) / split;
    const int64_t chunks = (group + chunk - 1) / chunk;
    const internal::ScoreKeysFn score_keys = internal::ScoreKeysKernel();
    const internal::AccumulateRowsFn accumulate_rows = internal::AccumulateRowsKernel();
    // The cost (Parallel): the first row's keys and values, read once per query row.
    int64_t keys = static_cast<int64_t>(a.positions[0]) + 1;
    if (a.window > 0) keys = std::min(keys, a.window);
    const int64_t kv_rows = a.k_cache == a.v_cache ? 1 : 2;  // latent attention: one cache
    const int64_t cost = a.n * keys * kv_dim * kv_rows * int64_t{sizeof(float)};
    Parallel(cost, groups * chunks, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc_buf(static_cast<size_t>(chunk * a.head_dim));
      std::vector<float> scores_buf(static_cast<size_t>(chunk * kKeyBlock));
      std::vector<float> ml_buf(static_cast<size_t>(2 * chunk));
      float* const acc = acc_buf.data();        // [chunk, head_dim]
      float* const scores = scores_buf.data();  // [chunk, kKeyBlock]
      float* const m = ml_buf.data();           // [chunk] running max
      float* const l = m + chunk;               // [chunk] running sum
      for (int64_t task = b; task < e; ++task) {
        const int64_t t = task / (a.n_kv_heads * chunks);
        const int64_t kvh = task / chunks % a.n_kv_heads;
        const int64_t h0 = kvh * group + task % chunks * chunk;
        const int64_t hn = std::min(chunk, (kvh + 1) * group - h0);
        const float* q = a.q + t * q_dim + h0 * a.head_dim;  // hn heads, head_dim apart
        std::fill_n(acc, hn * a.head_dim, 0.0f);
        for (int64_t c = 0; c < hn; ++c) {
          m[c] = a.sinks != nullptr ? a.sinks[h0 + c] : -std::numeric_limits<float>::infinity();
          l[c] = a.sinks != nullptr ? 1.0f : 0.0f;
        }
        const int64_t keys = static_cast<int64_t>(a.positions[t]) + 1;
        const int64_t first = a.window > 0 ? std::max<int64_t>(0, keys - a.window) : 0;
        for (int64_t j0 = first; j0 < keys;) {
          int64_t j1 = std::min(keys, j0 + kKeyBlock);
          // A block never wraps around a ring: its rows are contiguous.
          if (a.ring > 0) j1 = std::min(j1, (j0 / a.ring + 1) * a.ring);
          const int64_t row0 = a.ring > 0 ? j0 % a.ring : j0;
          const float* k_rows = a.k_cache + row0 * kv_dim + kvh * a.head_dim;
          const float* v_rows = a.v_cache + row0 * kv_dim + kvh * a.head_dim;
          score_keys(q, hn, k_rows, kv_dim, j1 - j0, a.head_dim, scores, kKeyBlock);
          for (int64_t c = 0; c < hn; ++c) {
            float* s = scores + c * kKeyBlock;
            float* acc_c = acc + c * a.head_dim;
            float block_max = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < j1 - j0; ++j) {
              s[j] *= a.scale;
              block_max = std::max(block_max, s[j]);
            }
            if (block_max > m[c]) {
              const float corr = std::exp(m[c] - block_max);
              l[c] *= corr;
              ScaleF32(corr, acc_c, a.head_dim);
              m[c] = block_max;
            }
            for (int64_t j = 0; j < j1 - j0; ++j) {
              s[j] = std::exp(s[j] - m[c]);  // now the block's probabilities
              l[c] += s[j];
            }
          }
          // The block's value rows, weighted, into every head's accumulator (each row loaded
          // once for up to 4 heads).
          accumulate_rows(scores, kKeyBlock, hn, v_rows, kv_dim, j1 - j0, acc, a.head_dim,
                          a.head_dim);
          j0 = j1;
        }
        for (int64_t c = 0; c < hn; ++c) {
          float* out = a.out + t * q_dim + (h0 + c) * a.head_dim;
          const float inv = l[c] > 0 ? 1.0f / l[c] : 0.0f;
          for (int64_t d = 0; d < a.head_dim; ++d) out[d] = acc[c * a.head_dim + d] * inv;
        }
      }
    });
  }

  void SiluMul(float* gate, const float* up, int64_t n) override { SiluMulF32(gate, up, n); }

  void ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) override {
    ClampedSwiGluF32(gate, up, n, alpha, limit);
  }

  void Add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim,
                  float* dst) override {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + i * dim, src + rows[i] * dim, sizeof(float) * dim);
  }

  void CopyStrided(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                   int64_t rows, int64_t cols) override {
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(dst + i * dst_stride, src + i * src_stride, sizeof(float) * cols);
  }

  void ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                      int64_t dim, float* dst) override {
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

  void ApplyExperts(const GroupedExpertsArgs& a) override;
  uint64_t parallel_regions() const override { return regions_; }
  uint64_t single_threaded_calls() const override { return single_threaded_; }

  void BeginPass(uint32_t model, int64_t rows) override {
    if (pass_depth_++ > 0 || fixed_threads_) return;
    pass_key_ = internal::ThreadChoice::Key(static_cast<int>(model & 0xff), rows);
    pass_rows_ = rows;
    small_single_ = choice_.Pick(pass_key_) == 1;
    pass_start_ = std::chrono::steady_clock::now();
  }
  void EndPass(double excluded_seconds, bool completed) override {
    if (--pass_depth_ > 0 || fixed_threads_) return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start_).count();
    if (completed) {
      choice_.Record(pass_key_, small_single_ ? 1 : 0, std::max(0.0, seconds - excluded_seconds),
                     pass_rows_);
    }
    small_single_ = false;
  }

 private:
  // An op whose cost is under this many bytes is small: in a pass where small ops run on one
  // thread (thread_choice.h), it runs on the caller alone. The cost is the bytes read times the
  // rows that read them (a product's weights times its rows, the keys and values times the
  // query rows): 2 MiB is ~100 us on one core, a small-q8 layer's q/k/v and o products and a
  // decode step's attention, not the experts' products nor any prefill chunk's products.
  static constexpr int64_t kSmallOpBytes = 2 << 20;
  // pool_.ParallelFor over `n` tasks, on this thread alone when the op is small (`cost`, as
  // above) and this pass runs small ops so, counting the calls that run on several threads.
  void Parallel(int64_t cost, int64_t n, int64_t grain,
                const std::function<void(int64_t, int64_t)>& fn) {
    if (pool_.size() == 1 || n <= std::max<int64_t>(1, grain)) {
      pool_.ParallelFor(n, grain, fn);
      return;
    }
    if (small_single_ && cost < kSmallOpBytes) {
      single_threaded_++;
      pool_.ParallelFor(n, grain, fn, /*max_threads=*/1);
      return;
    }
    regions_++;
    pool_.ParallelFor(n, grain, fn);
  }
  // y_i = x · W_iᵀ for `count` weights of one width and activation type: x is quantized once and
  // the rows of all of them are split over the threads in one parallel region.
  void MatMulShared(const WeightRef* ws, float* const* ys, size_t count, const float* x, int64_t n,
                    bool accumulate);
  // x quantized to `type` (kept across the groups of one layer: see input_prepared).
  const uint8_t* QuantizedInput(const GroupedExpertsArgs& a, quant::DType type);

  ThreadPool pool_;
  const bool fixed_threads_;
  // The pass in progress (BeginPass .. EndPass; nested passes are part of the outer one).
  internal::ThreadChoice choice_;
  int pass_depth_ = 0;
  uint32_t pass_key_ = 0;
  int64_t pass_rows_ = 0;
  bool small_single_ = false;
  std::chrono::steady_clock::time_point pass_start_;
  std::vector<uint8_t> act_scratch_;
  uint64_t regions_ = 0, single_threaded_ = 0;
  // ApplyExperts: the layer input in up to two vec-dot types, and the experts' gated FFN
  // activations in their down matrices' vec-dot types.
  struct InputCopy {
    quant::DType type = quant::DType::kF32;
    bool valid = false;
    std::vector<uint8_t> bytes;
  };
  InputCopy inputs_[2];
  std::vector<uint8_t> ffn_act_;
};

// Activation rows per multi-row matmul call (quant::MatVecMulti): each weight block of a tile is
// decoded once for this many tokens (the kernels take four at a time).
constexpr int64_t kActRows = 8;

void CpuBackend::MatMulShared(const WeightRef* ws, float* const* ys, size_t count, const float* x,
                              int64_t n, bool accumulate) {
  const int64_t cols = ws[0].cols;
  const quant::DType act_type = quant::Traits(ws[0].dtype).vec_dot_type;
  const size_t act_row_bytes = quant::RowBytes(act_type, cols);
  if (act_scratch_.size() < act_row_bytes * static_cast<size_t>(n)) {
    act_scratch_.resize(act_row_bytes * static_cast<size_t>(n));
  }
  uint8_t* act = act_scratch_.data();
  Parallel(n * cols * int64_t{sizeof(float)}, n, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      quant::QuantizeActivations(act_type, x + t * cols,
                                 act + static_cast<size_t>(t) * act_row_bytes, cols);
    }
  });
  int64_t total = 0, bytes = 0;
  for (size_t k = 0; k < count; ++k) {
    total += ws[k].rows;
    bytes += ws[k].rows * static_cast<int64_t>(quant::RowBytes(ws[k].dtype, cols));
  }
  // Each task takes a range of rows (of the weights one after another), in tiles small enough to
  // stay in L2 while every token is dotted with them: decode (n small) streams each weight byte
  // from memory once; prefill reuses the tile across tokens. quant::MatVec runs the kernel set's
  // fastest multi-row kernel (the AVX-512 Q4_K one reorders the activations once per call).
  constexpr int64_t kRowTile = 64;
  Parallel(bytes * n, total, 8, [&](int64_t g0, int64_t g1) {
    float tile_out[kActRows][kRowTile];
    int64_t offset = 0;
    for (size_t k = 0; k < count; offset += ws[k].rows, ++k) {
      const WeightRef& w = ws[k];
      const int64_t r0 = std::max<int64_t>(g0 - offset, 0),
                    r1 = std::min<int64_t>(g1 - offset, w.rows);
      const auto* wdata = static_cast<const uint8_t*>(w.data);
      const size_t w_row_bytes = quant::RowBytes(w.dtype, cols);
      for (int64_t a = r0; a < r1; a += kRowTile) {
        const int64_t b = std::min(r1, a + kRowTile);
        // Several tokens per call: each weight block is decoded once for all of them.
        for (int64_t t0 = 0; t0 < n; t0 += kActRows) {
          const int64_t cnt = std::min<int64_t>(kActRows, n - t0);
          const void* acts[kActRows];
          float* outs[kActRows];
          for (int64_t j = 0; j < cnt; ++j) {
            acts[j] = act + static_cast<size_t>(t0 + j) * act_row_bytes;
            outs[j] = tile_out[j];
          }
          quant::MatVecMulti(w.dtype, wdata + static_cast<size_t>(a) * w_row_bytes, w_row_bytes,
                             b - a, {acts, static_cast<size_t>(cnt)}, cols,
                             {outs, static_cast<size_t>(cnt)});
          for (int64_t j = 0; j < cnt; ++j) {
            float* out = ys[k] + (t0 + j) * w.rows + a;
            if (accumulate) {
              for (int64_t r = 0; r < b - a; ++r) out[r] += tile_out[j][r];
            } else {
              std::memcpy(out, tile_out[j], sizeof(float) * static_cast<size_t>(b - a));
            }
          }
        }
      }
    }
  });
}

const uint8_t* CpuBackend::QuantizedInput(const GroupedExpertsArgs& a, quant::DType type) {
  InputCopy* slot = nullptr;
  for (InputCopy& c : inputs_) {
    if (c.valid && c.type == type) return c.bytes.data();
    if (!c.valid && slot == nullptr) slot = &c;
  }
  if (slot == nullptr) slot = &inputs_[1];  // a third type in one layer: not seen in practice
  const size_t row_bytes = quant::RowBytes(type, a.hidden);
  slot->bytes.resize(row_bytes * static_cast<size_t>(a.n));
  slot->type = type;
  slot->valid = true;
  uint8_t* dst = slot->bytes.data();
  auto quantize = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      quant::QuantizeActivations(type, a.x + t * a.hidden, dst + static_cast<size_t>(t) * row_bytes,
                                 a.hidden);
    }
  };
  // A decode step's few rows take microseconds: a parallel region would cost more.
  if (a.n <= 16) {
    quantize(0, a.n);
  } else {
    Parallel(a.n * a.hidden * int64_t{sizeof(float)}, a.n, 16, quantize);
  }
  return dst;
}

void CpuBackend::ApplyExperts(const GroupedExpertsArgs& a) {
  if (a.experts.empty()) return;
  if (!a.input_prepared) {
    for (InputCopy& c : inputs_) c.valid = false;
  }
  const int64_t G = static_cast<int64_t>(a.experts.size()), H = a.hidden, F = a.ffn;
  // Where each expert's gated activations go: rows of F in its down matrix's vec-dot type.
  std::vector<size_t> act_offset(static_cast<size_t>(G) + 1, 0);
  std::vector<const uint8_t*> gate_in(static_cast<size_t>(G)), up_in(static_cast<size_t>(G));
  for (int64_t e = 0; e < G; ++e) {
    const GroupedExpert& x = a.experts[static_cast<size_t>(e)];
    const quant::DType down_act = quant::Traits(x.down.dtype).vec_dot_type;
    act_offset[static_cast<size_t>(e) + 1] =
        act_offset[static_cast<size_t>(e)] +
        quant::RowBytes(down_act, F) * static_cast<size_t>(x.m);
    gate_in[static_cast<size_t>(e)] = QuantizedInput(a, quant::Traits(x.gate.dtype).vec_dot_type);
    up_in[static_cast<size_t>(e)] = QuantizedInput(a, quant::Traits(x.up.dtype).vec_dot_type);
  }
  if (ffn_act_.size() < act_offset.back()) ffn_act_.resize(act_offset.back());

  // Gate and up: a task is a tile of kFfnTile FFN rows of one expert, for every row of x routed
  // to it (sub-tiles of kSubTile weight rows stay in L2 while every row is dotted with them).
  // The tile is a whole number of vec-dot blocks (256 = one Q8_K block, eight Q8_0 blocks), so
  // the task quantizes its slice of the activations for down itself.
  constexpr int64_t kFfnTile = 256, kSubTile = 64;
  const int64_t tiles = (F + kFfnTile - 1) / kFfnTile;
  int64_t gate_up_cost = 0, down_cost = 0;  // weight bytes times their rows (Parallel)
  for (const GroupedExpert& x : a.experts) {
    gate_up_cost +=
        static_cast<int64_t>(quant::RowBytes(x.gate.dtype, H) + quant::RowBytes(x.up.dtype, H)) *
        F * x.m;
    down_cost += static_cast<int64_t>(quant::RowBytes(x.down.dtype, F)) * H * x.m;
  }
  Parallel(gate_up_cost, G * tiles, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> g, u;
    for (int64_t task = t0; task < t1; ++task) {
      const GroupedExpert& x = a.experts[static_cast<size_t>(task / tiles)];
      const int64_t f0 = (task % tiles) * kFfnTile, len = std::min(F, f0 + kFfnTile) - f0;
      if (x.m == 0) continue;
      g.resize(static_cast<size_t>(x.m * kFfnTile));
      u.resize(static_cast<size_t>(x.m * kFfnTile));
      const size_t gate_row = quant::RowBytes(x.gate.dtype, H),
                   up_row = quant::RowBytes(x.up.dtype, H);
      const quant::DType gate_act = quant::Traits(x.gate.dtype).vec_dot_type;
      const quant::DType up_act = quant::Traits(x.up.dtype).vec_dot_type;
      const size_t gate_act_row = quant::RowBytes(gate_act, H),
                   up_act_row = quant::RowBytes(up_act, H);
      const uint8_t* gin = gate_in[static_cast<size_t>(task / tiles)];
      const uint8_t* uin = up_in[static_cast<size_t>(task / tiles)];
      for (int64_t s0 = 0; s0 < len; s0 += kSubTile) {
        const int64_t sl = std::min(len, s0 + kSubTile) - s0;
        const auto* gw =
            static_cast<const uint8_t*>(x.gate.data) + static_cast<size_t>(f0 + s0) * gate_row;
        const auto* uw =
            static_cast<const uint8_t*>(x.up.data) + static_cast<size_t>(f0 + s0) * up_row;
        for (int64_t i0 = 0; i0 < x.m; i0 += kActRows) {
          const int64_t cnt = std::min<int64_t>(kActRows, x.m - i0);
          const void *ga[kActRows], *ua[kActRows];
          float *go[kActRows], *uo[kActRows];
          for (int64_t j = 0; j < cnt; ++j) {
            const size_t r = static_cast<size_t>(x.rows[i0 + j]);
            ga[j] = gin + r * gate_act_row;
            ua[j] = uin + r * up_act_row;
            go[j] = g.data() + (i0 + j) * kFfnTile + s0;
            uo[j] = u.data() + (i0 + j) * kFfnTile + s0;
          }
          const size_t c = static_cast<size_t>(cnt);
          quant::MatVecMulti(x.gate.dtype, gw, gate_row, sl, {ga, c}, H, {go, c});
          quant::MatVecMulti(x.up.dtype, uw, up_row, sl, {ua, c}, H, {uo, c});
        }
      }
      const quant::DType down_act = quant::Traits(x.down.dtype).vec_dot_type;
      const size_t act_row = quant::RowBytes(down_act, F);
      const size_t slice = quant::RowBytes(down_act, f0);  // bytes of the blocks before f0
      uint8_t* out = ffn_act_.data() + act_offset[static_cast<size_t>(task / tiles)];
      for (int64_t i = 0; i < x.m; ++i) {
        float* gi = g.data() + i * kFfnTile;
        float* ui = u.data() + i * kFfnTile;
        for (int64_t j = 0; j < len; ++j) {
          if (x.gate_bias) gi[j] += x.gate_bias[f0 + j];
          if (x.up_bias) ui[j] += x.up_bias[f0 + j];
        }
        if (a.swiglu_limit > 0) {
          ClampedSwiGluF32(gi, ui, len, a.swiglu_alpha, a.swiglu_limit);
        } else {
          SiluMulF32(gi, ui, len);
        }
        quant::QuantizeActivations(down_act, gi, out + static_cast<size_t>(i) * act_row + slice,
                                   len);
      }
    }
  });

  // Down: a task is a tile of hidden rows for every expert in order, so each output element
  // takes its experts' contributions in the order the op-by-op path adds them.
  constexpr int64_t kHiddenTile = 64;
  Parallel(down_cost, (H + kHiddenTile - 1) / kHiddenTile, 1, [&](int64_t t0, int64_t t1) {
    float tile[kActRows][kHiddenTile];
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h0 = task * kHiddenTile, hl = std::min(H, h0 + kHiddenTile) - h0;
      for (int64_t e = 0; e < G; ++e) {
        const GroupedExpert& x = a.experts[static_cast<size_t>(e)];
        const size_t w_row = quant::RowBytes(x.down.dtype, F);
        const size_t act_row = quant::RowBytes(quant::Traits(x.down.dtype).vec_dot_type, F);
        const auto* w = static_cast<const uint8_t*>(x.down.data) + static_cast<size_t>(h0) * w_row;
        const uint8_t* act = ffn_act_.data() + act_offset[static_cast<size_t>(e)];
        for (int64_t i0 = 0; i0 < x.m; i0 += kActRows) {
          const int64_t cnt = std::min<int64_t>(kActRows, x.m - i0);
          const void* acts[kActRows];
          float* outs[kActRows];
          for (int64_t j = 0; j < cnt; ++j) {
            acts[j] = act + static_cast<size_t>(i0 + j) * act_row;
            outs[j] = tile[j];
          }
          const size_t c = static_cast<size_t>(cnt);
          quant::MatVecMulti(x.down.dtype, w, w_row, hl, {acts, c}, F, {outs, c});
          for (int64_t j = 0; j < cnt; ++j) {
            const int64_t i = i0 + j;
            float* o = a.out + static_cast<int64_t>(x.rows[i]) * H + h0;
            const float scale = x.scales[i];
            for (int64_t r = 0; r < hl; ++r) {
              float v = tile[j][r];
              if (x.down_bias) v += x.down_bias[h0 + r];
              o[r] += scale * v;
            }
          }
        }
      }
    }
  });
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options) {
  int threads = options.threads > 0 ? options.threads : UsableCoreCount();
  return std::make_unique<CpuBackend>(threads, options.fixed_threads);
}

}  // namespace colibri::backend

// Every op of backend.h on every backend this machine has, against a float64 reference computed
// here from the same inputs: the CPU at each kernel set it can run (scalar, AVX2, AVX-512), the
// device-like backend (memory of its own, the fused ops composed op by op), and CUDA where a
// device is present (skipped elsewhere, as in CI). Inputs go in with Upload / ImportWeight and
// results come back with Download, so one test body serves every backend. Errors are normalized
// mean squared errors, sum((got - want)^2) / sum(want^2), against a bound per op and weight type:
// float ops are exact to float rounding; quantized matrices carry their activations' 8-bit
// quantization (the GGML vec-dot formats), 16-bit float weights their 16-bit activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/backend/backend.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/cuda_backend.h"
#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/backend/testing/test_data.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::backend {
namespace {

using quant::DType;

// Every weight type a model may carry.
const DType kWeightTypes[] = {
    DType::kF32,   DType::kF16,     DType::kBF16,   DType::kQ4_0,   DType::kQ4_1,    DType::kQ5_0,
    DType::kQ5_1,  DType::kQ8_0,    DType::kQ2_K,   DType::kQ3_K,   DType::kQ4_K,    DType::kQ5_K,
    DType::kQ6_K,  DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S,  DType::kIQ3_XXS, DType::kIQ3_S,
    DType::kIQ1_S, DType::kIQ1_M,   DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

double Nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  return norm > 0 ? err / norm : err;
}

// The bound on MatMul's error for a weight type: its activations' format decides it.
double MatMulBound(DType type) {
  switch (quant::Traits(type).vec_dot_type) {
    case DType::kF32: return 1e-10;
    case DType::kF16: return 2e-6;
    case DType::kBF16: return 5e-5;
    default: return 5e-4;  // Q8_0 / Q8_1 / Q8_K activations
  }
}

std::vector<double> Dequantize(DType type, const std::vector<uint8_t>& bytes, int64_t rows,
                               int64_t cols) {
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<double> out;
  const size_t row_bytes = quant::RowBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    quant::DequantizeRowReference(type, bytes.data() + static_cast<size_t>(r) * row_bytes,
                                  row.data(), cols);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// y[n, rows] = x[n, cols] · Wᵀ in double.
std::vector<double> Product(const std::vector<double>& w, int64_t rows, int64_t cols,
                            const std::vector<float>& x, int64_t n) {
  std::vector<double> y(static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < cols; ++k)
        s += static_cast<double>(x[static_cast<size_t>(i * cols + k)]) *
             w[static_cast<size_t>(r * cols + k)];
      y[static_cast<size_t>(i * rows + r)] = s;
    }
  }
  return y;
}

double Silu(double g) { return g / (1 + std::exp(-g)); }

struct Variant {
  const char* name;
  const char* isa;  // CPU kernel set, or nullptr
};

class BackendOpsTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const Variant v = GetParam();
    const std::string name = v.name;
    if (v.isa != nullptr) {
      const auto isas = quant::SupportedIsas();
      if (std::find(isas.begin(), isas.end(), std::string_view(v.isa)) == isas.end())
        GTEST_SKIP() << "this CPU cannot run the " << v.isa << " kernels";
      ASSERT_TRUE(quant::SetKernelIsaCap(v.isa));
      be_ = CreateCpuBackend({.threads = 2});
    } else if (name == "device_like") {
      be_ = std::make_unique<DeviceLikeBackend>();
    } else {
      if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
      auto cuda = CreateCudaBackend({});
      ASSERT_TRUE(cuda.ok()) << cuda.status();
      be_ = std::move(*cuda);
    }
  }
  void TearDown() override {
    if (GetParam().isa != nullptr) quant::SetKernelIsaCap("avx512");  // the best again
  }

  // Backend memory holding `v` (kept until the test ends).
  float* Put(const std::vector<float>& v) {
    auto buf = be_->Allocate(std::max<size_t>(v.size(), 1) * sizeof(float));
    EXPECT_TRUE(buf.ok()) << buf.status();
    be_->Upload((*buf)->data(), v.data(), v.size() * sizeof(float));
    float* p = (*buf)->f32();
    keep_.push_back(std::move(*buf));
    return p;
  }
  float* Scratch(size_t n) { return Put(std::vector<float>(n, 0.0f)); }
  std::vector<float> Get(const float* p, size_t n) {
    std::vector<float> out(n);
    be_->Download(out.data(), p, n * sizeof(float));
    EXPECT_TRUE(be_->Synchronize().ok());
    return out;
  }
  // The weight in backend memory; its host bytes are kept (a zero-copy backend reads them).
  WeightRef Import(DType type, int64_t rows, int64_t cols, const std::vector<uint8_t>& bytes) {
    weights_.push_back(bytes);
    std::unique_ptr<Buffer> storage;
    auto ref = be_->ImportWeight(type, rows, cols, weights_.back().data(), &storage);
    EXPECT_TRUE(ref.ok()) << ref.status();
    if (storage) keep_.push_back(std::move(storage));
    return *ref;
  }
  void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double bound,
                   const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const double e = Nmse(got, want);
    EXPECT_LE(e, bound) << what << " on " << be_->name() << ": NMSE " << e;
  }

  std::unique_ptr<Backend> be_;
  std::vector<std::unique_ptr<Buffer>> keep_;
  std::deque<std::vector<float>> scales_;  // host arrays the ops read
  std::deque<std::vector<uint8_t>> weights_;
};

TEST_P(BackendOpsTest, EveryOpIsSupported) {
  // The backends here run every op of a model in this test's shapes.
  for (DType t : kWeightTypes) {
    for (Op op : {Op::kGetRows, Op::kMatMul, Op::kApplyExperts})
      EXPECT_TRUE(be_->SupportsOp({.op = op, .dtype = t}).ok()) << OpName(op);
  }
  EXPECT_TRUE(be_->SupportsOp({.op = Op::kAttention, .head_dim = 128}).ok());
}

TEST_P(BackendOpsTest, GetRowsEveryType) {
  const int64_t rows = 16, cols = 512;
  const std::vector<int32_t> ids = {3, 0, 15, 3, 7};
  for (DType t : kWeightTypes) {
    const auto bytes = RandomQuantizedRows(t, rows, cols, 11);
    const WeightRef w = Import(t, rows, cols, bytes);
    float* out = Scratch(ids.size() * cols);
    be_->GetRows(w, ids.data(), static_cast<int64_t>(ids.size()), out);
    const std::vector<double> deq = Dequantize(t, bytes, rows, cols);
    std::vector<double> want;
    for (int32_t id : ids)
      want.insert(want.end(), deq.begin() + id * cols, deq.begin() + (id + 1) * cols);
    ExpectClose(Get(out, want.size()), want, 1e-12, std::string(quant::DTypeName(t)));
  }
}

TEST_P(BackendOpsTest, MatMulEveryTypeAtDecodeBatchAndPrefillRows) {
  const int64_t rows = 48, cols = 512;
  for (DType t : kWeightTypes) {
    const auto bytes = RandomQuantizedRows(t, rows, cols, 21);
    const std::vector<double> deq = Dequantize(t, bytes, rows, cols);
    const WeightRef w = Import(t, rows, cols, bytes);
    for (int64_t n : {1, 3, 8, 40}) {  // matrix-vector, multi-row kernels, GEMM (CUDA >= 16)
      const std::vector<float> x = RandomNormal(static_cast<size_t>(n * cols), 22);
      const std::vector<float> y0 = RandomNormal(static_cast<size_t>(n * rows), 23);
      std::vector<double> want = Product(deq, rows, cols, x, n);
      float* dx = Put(x);
      float* y = Put(y0);
      be_->MatMul(w, dx, n, y, /*accumulate=*/true);
      for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
      const std::string what = absl::StrCat(std::string(quant::DTypeName(t)), " n=", n);
      ExpectClose(Get(y, want.size()), want, MatMulBound(t), what);
      // MatMuls: the same matrix twice beside another type, no accumulation.
      const auto other = RandomQuantizedRows(DType::kQ8_0, 16, cols, 24);
      const WeightRef w2 = Import(DType::kQ8_0, 16, cols, other);
      float* ya = Scratch(static_cast<size_t>(n * rows));
      float* yb = Scratch(static_cast<size_t>(n * 16));
      const WeightRef ws[] = {w, w2};
      float* const ys[] = {ya, yb};
      be_->MatMuls(ws, dx, n, ys);
      ExpectClose(Get(ya, static_cast<size_t>(n * rows)), Product(deq, rows, cols, x, n),
                  MatMulBound(t), "MatMuls " + what);
      ExpectClose(Get(yb, static_cast<size_t>(n * 16)),
                  Product(Dequantize(DType::kQ8_0, other, 16, cols), 16, cols, x, n),
                  MatMulBound(DType::kQ8_0), "MatMuls q8_0 beside " + what);
    }
  }
}

TEST_P(BackendOpsTest, ElementwiseOps) {
  const int64_t n = 5, dim = 96;
  const size_t size = static_cast<size_t>(n * dim);
  const std::vector<float> a = RandomNormal(size, 31), b = RandomNormal(size, 32, 2.0f);
  const std::vector<float> bias = RandomNormal(static_cast<size_t>(dim), 33);
  const std::vector<float> weight = RandomNormal(static_cast<size_t>(dim), 34);
  {
    float* x = Put(a);
    be_->AddBias(x, Put(bias), n, dim);
    std::vector<double> want(size);
    for (size_t i = 0; i < size; ++i) want[i] = double{a[i]} + bias[i % dim];
    ExpectClose(Get(x, size), want, 1e-12, "AddBias");
  }
  {
    float* x = Put(a);
    be_->Add(x, Put(b), static_cast<int64_t>(size));
    std::vector<double> want(size);
    for (size_t i = 0; i < size; ++i) want[i] = double{a[i]} + b[i];
    ExpectClose(Get(x, size), want, 1e-12, "Add");
  }
  {
    float* g = Put(b);
    be_->SiluMul(g, Put(a), static_cast<int64_t>(size));
    std::vector<double> want(size);
    for (size_t i = 0; i < size; ++i) want[i] = Silu(b[i]) * a[i];
    ExpectClose(Get(g, size), want, 1e-10, "SiluMul");
  }
  {
    const float alpha = 1.702f, limit = 1.5f;
    float* g = Put(b);
    be_->ClampedSwiGlu(g, Put(a), static_cast<int64_t>(size), alpha, limit);
    std::vector<double> want(size);
    for (size_t i = 0; i < size; ++i) {
      const double gc = std::min<double>(b[i], limit);
      const double uc = std::clamp<double>(a[i], -limit, limit);
      want[i] = (uc + 1) * gc / (1 + std::exp(-alpha * gc));
    }
    ExpectClose(Get(g, size), want, 1e-10, "ClampedSwiGlu");
  }
  {
    const float eps = 1e-5f;
    float* y = Scratch(size);
    be_->RmsNorm(Put(b), Put(weight), n, dim, eps, y);
    std::vector<double> want(size);
    for (int64_t i = 0; i < n; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < dim; ++j) ss += double{b[i * dim + j]} * b[i * dim + j];
      const double inv = 1 / std::sqrt(ss / dim + eps);
      for (int64_t j = 0; j < dim; ++j)
        want[static_cast<size_t>(i * dim + j)] = b[i * dim + j] * inv * weight[j];
    }
    ExpectClose(Get(y, size), want, 1e-10, "RmsNorm");
  }
  {
    const std::vector<int32_t> rows = {4, 1, 1, 3};
    float* dst = Scratch(rows.size() * dim);
    be_->GatherRows(Put(a), rows.data(), static_cast<int64_t>(rows.size()), dim, dst);
    std::vector<double> want;
    for (int32_t r : rows) want.insert(want.end(), a.begin() + r * dim, a.begin() + (r + 1) * dim);
    ExpectClose(Get(dst, want.size()), want, 0, "GatherRows");
    // ScatterAddRows: distinct rows, scaled.
    const std::vector<int32_t> to = {2, 0, 4};
    const std::vector<float> scales = {0.5f, -2.0f, 1.25f};
    float* out = Put(b);
    be_->ScatterAddRows(Put(a), to.data(), scales.data(), 3, dim, out);
    std::vector<double> sum(b.begin(), b.end());
    for (size_t i = 0; i < to.size(); ++i) {
      for (int64_t j = 0; j < dim; ++j)
        sum[static_cast<size_t>(to[i] * dim + j)] += double{scales[i]} * a[i * dim + j];
    }
    ExpectClose(Get(out, size), sum, 1e-12, "ScatterAddRows");
  }
  {
    // CopyStrided: columns [10, 40) of a [n, dim] matrix into columns [3, 33) of a [n, 50] one.
    float* dst = Put(std::vector<float>(static_cast<size_t>(n * 50), 7.0f));
    be_->CopyStrided(dst + 3, 50, Put(a) + 10, dim, n, 30);
    std::vector<double> want(static_cast<size_t>(n * 50), 7.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < 30; ++j)
        want[static_cast<size_t>(i * 50 + 3 + j)] = a[static_cast<size_t>(i * dim + 10 + j)];
    }
    ExpectClose(Get(dst, want.size()), want, 0, "CopyStrided");
  }
  {
    // StoreKv into rows 6, 2, 9 of 12-row caches.
    const int64_t kv = 32;
    const std::vector<int32_t> pos = {6, 2, 9};
    const std::vector<float> k = RandomNormal(3 * kv, 35), v = RandomNormal(3 * kv, 36);
    float* kc = Scratch(12 * kv);
    float* vc = Scratch(12 * kv);
    be_->StoreKv(Put(k), Put(v), pos.data(), 3, kv, kc, vc);
    std::vector<double> wk(12 * kv, 0.0), wv(12 * kv, 0.0);
    for (size_t i = 0; i < pos.size(); ++i) {
      for (int64_t j = 0; j < kv; ++j) {
        wk[static_cast<size_t>(pos[i] * kv + j)] = k[i * kv + j];
        wv[static_cast<size_t>(pos[i] * kv + j)] = v[i * kv + j];
      }
    }
    ExpectClose(Get(kc, wk.size()), wk, 0, "StoreKv keys");
    ExpectClose(Get(vc, wv.size()), wv, 0, "StoreKv values");
  }
}

TEST_P(BackendOpsTest, RopeBothStylesPartialAndScaled) {
  const int64_t n = 3, heads = 2, head_dim = 32;
  const std::vector<int32_t> positions = {0, 7, 1000};
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    for (int64_t offset : {0, 8}) {
      const int64_t n_rot = head_dim - offset - (offset > 0 ? 8 : 0);
      std::vector<double> inv(static_cast<size_t>(n_rot / 2));
      for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
      const RopeParams p{n_rot, offset, style, inv.data(), 0.9f};
      const std::vector<float> x0 = RandomNormal(static_cast<size_t>(n * heads * head_dim), 41);
      float* x = Put(x0);
      be_->Rope(x, n, heads, head_dim, positions.data(), p);
      std::vector<double> want(x0.begin(), x0.end());
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          double* row = want.data() + (t * heads + h) * head_dim + offset;
          const float* src = x0.data() + (t * heads + h) * head_dim + offset;
          for (int64_t i = 0; i < n_rot / 2; ++i) {
            const double th = positions[static_cast<size_t>(t)] * inv[static_cast<size_t>(i)];
            const double c = std::cos(th) * p.mscale, s = std::sin(th) * p.mscale;
            const int64_t a = style == RopeStyle::kHalfSplit ? i : 2 * i;
            const int64_t b = style == RopeStyle::kHalfSplit ? i + n_rot / 2 : 2 * i + 1;
            row[a] = src[a] * c - src[b] * s;
            row[b] = src[a] * s + src[b] * c;
          }
        }
      }
      ExpectClose(Get(x, want.size()), want, 1e-10,
                  absl::StrCat("Rope style ", static_cast<int>(style), " offset ", offset));
    }
  }
}

TEST_P(BackendOpsTest, AttentionGqaWindowAndSinks) {
  const int64_t heads = 4, kv_heads = 2, head_dim = 64, cap = 40, kvd = kv_heads * head_dim;
  const std::vector<float> k = RandomNormal(static_cast<size_t>(cap * kvd), 51);
  const std::vector<float> v = RandomNormal(static_cast<size_t>(cap * kvd), 52);
  const std::vector<float> sinks = RandomNormal(static_cast<size_t>(heads), 53);
  const std::vector<int32_t> positions = {0, 17, 18, 39};
  const int64_t n = static_cast<int64_t>(positions.size());
  const std::vector<float> q = RandomNormal(static_cast<size_t>(n * heads * head_dim), 54);
  for (int64_t window : {int64_t{0}, int64_t{8}}) {
    for (bool with_sinks : {false, true}) {
      AttentionArgs a;
      a.q = Put(q);
      a.k_cache = Put(k);
      a.v_cache = Put(v);
      a.positions = positions.data();
      a.n = n;
      a.n_heads = heads;
      a.n_kv_heads = kv_heads;
      a.head_dim = head_dim;
      a.scale = 0.125f;
      a.out = Scratch(static_cast<size_t>(n * heads * head_dim));
      a.window = window;
      a.sinks = with_sinks ? Put(sinks) : nullptr;
      be_->Attention(a);
      std::vector<double> want(static_cast<size_t>(n * heads * head_dim), 0.0);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t p = positions[static_cast<size_t>(t)];
        const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t g = h / (heads / kv_heads);
          std::vector<double> score;
          double top = with_sinks ? sinks[static_cast<size_t>(h)] : -1e300;
          for (int64_t j = first; j <= p; ++j) {
            double s = 0;
            for (int64_t d = 0; d < head_dim; ++d)
              s += double{q[static_cast<size_t>((t * heads + h) * head_dim + d)]} *
                   k[static_cast<size_t>(j * kvd + g * head_dim + d)];
            score.push_back(s * a.scale);
            top = std::max(top, score.back());
          }
          double den = with_sinks ? std::exp(sinks[static_cast<size_t>(h)] - top) : 0;
          for (double& s : score) den += (s = std::exp(s - top));
          for (int64_t j = first; j <= p; ++j) {
            const double wgt = score[static_cast<size_t>(j - first)] / den;
            for (int64_t d = 0; d < head_dim; ++d)
              want[static_cast<size_t>((t * heads + h) * head_dim + d)] +=
                  wgt * v[static_cast<size_t>(j * kvd + g * head_dim + d)];
          }
        }
      }
      ExpectClose(Get(a.out, want.size()), want, 1e-9,
                  absl::StrCat("Attention window ", window, " sinks ", with_sinks));
    }
  }
}

TEST_P(BackendOpsTest, ApplyExpertsGroupsWithBiasesAndClamp) {
  const int64_t n = 6, hidden = 256, ffn = 512;
  const DType gate_up = DType::kQ4_K, down_type = DType::kQ6_K;
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n * hidden), 61);
  const std::vector<std::vector<int32_t>> rows = {{0, 2, 5}, {1, 2, 3, 4}, {5}};
  for (float limit : {0.0f, 1.0f}) {
    const std::vector<float> out0 = RandomNormal(static_cast<size_t>(n * hidden), 62);
    std::vector<double> want(out0.begin(), out0.end());
    std::vector<GroupedExpert> experts;
    for (size_t e = 0; e < rows.size(); ++e) {
      const uint32_t seed = 70 + static_cast<uint32_t>(e) * 10;
      const auto g = RandomQuantizedRows(gate_up, ffn, hidden, seed);
      const auto u = RandomQuantizedRows(gate_up, ffn, hidden, seed + 1);
      const auto d = RandomQuantizedRows(down_type, hidden, ffn, seed + 2);
      const std::vector<float> gb = RandomNormal(static_cast<size_t>(ffn), seed + 3, 0.1f);
      const std::vector<float> ub = RandomNormal(static_cast<size_t>(ffn), seed + 4, 0.1f);
      const std::vector<float> db = RandomNormal(static_cast<size_t>(hidden), seed + 5, 0.1f);
      const std::vector<float> sc = RandomNormal(rows[e].size(), seed + 6);
      scales_.push_back(sc);
      GroupedExpert ge{Import(gate_up, ffn, hidden, g),
                       Import(gate_up, ffn, hidden, u),
                       Import(down_type, hidden, ffn, d),
                       Put(gb),
                       Put(ub),
                       Put(db),
                       rows[e].data(),
                       scales_.back().data(),
                       static_cast<int64_t>(rows[e].size())};
      experts.push_back(ge);
      // The reference for this expert.
      const auto dg = Dequantize(gate_up, g, ffn, hidden), du = Dequantize(gate_up, u, ffn, hidden),
                 dd = Dequantize(down_type, d, hidden, ffn);
      for (size_t i = 0; i < rows[e].size(); ++i) {
        const int32_t r = rows[e][i];
        std::vector<float> xr(x.begin() + r * hidden, x.begin() + (r + 1) * hidden);
        const auto gv = Product(dg, ffn, hidden, xr, 1), uv = Product(du, ffn, hidden, xr, 1);
        std::vector<float> act(static_cast<size_t>(ffn));
        for (int64_t j = 0; j < ffn; ++j) {
          double gg = gv[static_cast<size_t>(j)] + gb[static_cast<size_t>(j)];
          double uu = uv[static_cast<size_t>(j)] + ub[static_cast<size_t>(j)];
          if (limit > 0) {
            gg = std::min<double>(gg, limit);
            uu = std::clamp<double>(uu, -limit, limit);
            act[static_cast<size_t>(j)] =
                static_cast<float>((uu + 1) * gg / (1 + std::exp(-1.702 * gg)));
          } else {
            act[static_cast<size_t>(j)] = static_cast<float>(Silu(gg) * uu);
          }
        }
        const auto dv = Product(dd, hidden, ffn, act, 1);
        for (int64_t j = 0; j < hidden; ++j)
          want[static_cast<size_t>(r * hidden + j)] +=
              double{sc[i]} * (dv[static_cast<size_t>(j)] + db[static_cast<size_t>(j)]);
      }
    }
    GroupedExpertsArgs args;
    args.x = Put(x);
    args.n = n;
    args.hidden = hidden;
    args.ffn = ffn;
    args.out = Put(out0);
    args.swiglu_alpha = 1.702f;
    args.swiglu_limit = limit;
    args.rows_in = Scratch(static_cast<size_t>(n * hidden));
    args.gate = Scratch(static_cast<size_t>(n * ffn));
    args.up = Scratch(static_cast<size_t>(n * ffn));
    args.rows_out = Scratch(static_cast<size_t>(n * hidden));
    args.experts = std::span<const GroupedExpert>(experts.data(), 2);  // a group
    be_->ApplyExperts(args);
    args.experts = std::span<const GroupedExpert>(experts.data() + 2, 1);  // one landing late
    args.input_prepared = true;
    be_->ApplyExperts(args);
    ExpectClose(Get(args.out, want.size()), want, 1e-3, absl::StrCat("ApplyExperts limit ", limit));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, BackendOpsTest,
    ::testing::Values(Variant{"cpu_scalar", "scalar"}, Variant{"cpu_avx2", "avx2"},
                      Variant{"cpu_avx512", "avx512"}, Variant{"device_like", nullptr},
                      Variant{"cuda", nullptr}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace colibri::backend

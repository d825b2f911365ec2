// Every op of the CUDA backend against the CPU reference backend, test-backend-ops style: the
// same random inputs through both, per-op error thresholds, identical routing decisions. Every
// test skips (GTEST_SKIP) without a CUDA device or in a build without the CUDA backend.
#include "colibri/backend/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/testing/test_data.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"

namespace colibri::backend {
namespace {

using quant::DType;

// max |a - b| / max |b| (b is the CPU reference).
double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return scale > 0 ? diff / scale : diff;
}

class CudaParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBuilt()) GTEST_SKIP() << "this build has no CUDA backend (-DCOLIBRI_CUDA=OFF)";
    if (CudaDeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device: the gpu tests need an NVIDIA GPU and driver";
    auto gpu = CreateCudaBackend({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = CreateCpuBackend({.threads = 2});
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_TRUE(gpu_->Synchronize().ok());
    }
  }

  // A device buffer holding `host`.
  std::unique_ptr<Buffer> Dev(const std::vector<float>& host) {
    auto buf = gpu_->Allocate(host.size() * sizeof(float));
    EXPECT_TRUE(buf.ok()) << buf.status();
    gpu_->Upload((*buf)->data(), host.data(), host.size() * sizeof(float));
    return std::move(*buf);
  }
  std::vector<float> Host(Buffer& buf, size_t n) {
    std::vector<float> out(n);
    gpu_->Download(out.data(), buf.data(), n * sizeof(float));
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return out;
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaParityTest, MemoryOpsTransferAndFences) {
  EXPECT_EQ(gpu_->name(), "cuda");
  EXPECT_FALSE(gpu_->zero_copy());
  const MemoryInfo mem = gpu_->memory_info();
  EXPECT_GT(mem.total_bytes, 0u);
  EXPECT_LE(mem.free_bytes, mem.total_bytes);
  auto buf = gpu_->Allocate(1000);
  ASSERT_TRUE(buf.ok());
  std::vector<uint8_t> zeros(1000, 1);
  gpu_->Download(zeros.data(), (*buf)->data(), 1000);
  EXPECT_EQ(zeros, std::vector<uint8_t>(1000, 0));  // allocations start zeroed, as on the CPU
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  gpu_->Upload((*buf)->data(), host.data(), 24);
  float* f = (*buf)->f32();
  gpu_->Copy(f + 8, f, 24);
  gpu_->Zero(f + 9, 8);
  EXPECT_EQ(Host(**buf, 14), std::vector<float>({1, 2, 3, 4, 5, 6, 0, 0, 1, 0, 0, 4, 5, 6}));
  // TransferIn from another thread's point of view: bytes land before it returns.
  std::vector<uint8_t> big(20u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 3);
  auto dst = gpu_->Allocate(big.size());
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(gpu_->TransferIn((*dst)->data(), big.data(), big.size()).ok());
  std::vector<uint8_t> back(big.size());
  gpu_->Download(back.data(), (*dst)->data(), back.size());
  EXPECT_EQ(back, big);
  EXPECT_TRUE(gpu_->RecordFence()->Wait().ok());
  // Out of memory is a status, not a crash.
  auto huge = gpu_->Allocate(size_t{1} << 52);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

struct MatMulCase {
  DType type;
  double matvec_tol;  // quantized-activation kernels: summation order only
  double gemm_tol;    // F16 activations and dequantized weights vs the CPU's Q8 activations
};

TEST_F(CudaParityTest, MatMulEveryWeightTypeMatvecAndGemm) {
  const MatMulCase cases[] = {
      {DType::kF32, 1e-5, 1e-5},    {DType::kF16, 1e-5, 1e-4},     {DType::kBF16, 1e-5, 1e-4},
      {DType::kQ8_0, 1e-5, 2e-2},   {DType::kQ2_K, 1e-5, 2e-2},    {DType::kQ3_K, 1e-5, 2e-2},
      {DType::kQ4_K, 1e-5, 2e-2},   {DType::kQ5_K, 1e-5, 2e-2},    {DType::kQ6_K, 1e-5, 2e-2},
      {DType::kQ8_K, 1e-5, 2e-2},   {DType::kQ4_0, 1e-5, 2e-2},    {DType::kQ4_1, 1e-5, 2e-2},
      {DType::kQ5_0, 1e-5, 2e-2},   {DType::kQ5_1, 1e-5, 2e-2},    {DType::kIQ4_NL, 1e-5, 2e-2},
      {DType::kIQ4_XS, 1e-5, 2e-2}, {DType::kMXFP4, 1e-5, 2e-2},   {DType::kIQ1_S, 1e-5, 2e-2},
      {DType::kIQ1_M, 1e-5, 2e-2},  {DType::kIQ2_XXS, 1e-5, 2e-2}, {DType::kIQ2_XS, 1e-5, 2e-2},
      {DType::kIQ2_S, 1e-5, 2e-2},  {DType::kIQ3_XXS, 1e-5, 2e-2}, {DType::kIQ3_S, 1e-5, 2e-2}};
  const int64_t rows = 67, cols = 1024;
  for (const MatMulCase& c : cases) {
    const std::vector<uint8_t> w =
        RandomQuantizedRows(c.type, rows, cols, 5 + static_cast<uint32_t>(c.type));
    std::unique_ptr<Buffer> cpu_storage, gpu_storage;
    auto cw = cpu_->ImportWeight(c.type, rows, cols, w.data(), &cpu_storage);
    auto gw = gpu_->ImportWeight(c.type, rows, cols, w.data(), &gpu_storage);
    ASSERT_TRUE(cw.ok() && gw.ok()) << gw.status();
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{9}, int64_t{15}, int64_t{40}}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(absl::StrCat(std::string(quant::DTypeName(c.type)), " n=", n,
                                  accumulate ? " accumulate" : ""));
        std::vector<float> x =
            RandomNormal(static_cast<size_t>(n * cols), 31 + static_cast<uint32_t>(n));
        x[7] = 5.0f;
        std::vector<float> y0 = RandomNormal(static_cast<size_t>(n * rows), 3);
        std::vector<float> y_cpu = y0;
        cpu_->MatMul(*cw, x.data(), n, y_cpu.data(), accumulate);
        auto dx = Dev(x);
        auto dy = Dev(y0);
        gpu_->MatMul(*gw, dx->f32(), n, dy->f32(), accumulate);
        const double err = RelError(Host(*dy, y0.size()), y_cpu);
        EXPECT_LE(err, n >= 16 ? c.gemm_tol : c.matvec_tol);
      }
    }
  }
}

TEST_F(CudaParityTest, GetRowsEveryType) {
  const DType types[] = {DType::kF32,    DType::kF16,   DType::kBF16,    DType::kQ8_0,
                         DType::kQ2_K,   DType::kQ3_K,  DType::kQ4_K,    DType::kQ5_K,
                         DType::kQ6_K,   DType::kQ8_K,  DType::kQ4_0,    DType::kQ4_1,
                         DType::kQ5_0,   DType::kQ5_1,  DType::kIQ4_NL,  DType::kIQ4_XS,
                         DType::kMXFP4,  DType::kIQ1_S, DType::kIQ1_M,   DType::kIQ2_XXS,
                         DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S};
  const int64_t rows = 20, cols = 512;
  const std::vector<int32_t> ids = {3, 0, 19, 3, 7};
  for (DType t : types) {
    SCOPED_TRACE(std::string(quant::DTypeName(t)));
    const std::vector<uint8_t> w = RandomQuantizedRows(t, rows, cols, 77);
    std::unique_ptr<Buffer> cs, gs;
    auto cw = cpu_->ImportWeight(t, rows, cols, w.data(), &cs);
    auto gw = gpu_->ImportWeight(t, rows, cols, w.data(), &gs);
    ASSERT_TRUE(gw.ok());
    std::vector<float> ref(ids.size() * cols);
    cpu_->GetRows(*cw, ids.data(), static_cast<int64_t>(ids.size()), ref.data());
    auto out = Dev(std::vector<float>(ref.size()));
    gpu_->GetRows(*gw, ids.data(), static_cast<int64_t>(ids.size()), out->f32());
    EXPECT_LE(RelError(Host(*out, ref.size()), ref), 1e-6);
  }
}

TEST_F(CudaParityTest, RmsNormBiasSiluAddGatherScatter) {
  const int64_t n = 5, dim = 384;
  const std::vector<float> x = RandomNormal(n * dim, 1), w = RandomNormal(dim, 2),
                           b = RandomNormal(dim, 3), u = RandomNormal(n * dim, 4);
  // RMSNorm, also in place.
  std::vector<float> ref(x.size());
  cpu_->RmsNorm(x.data(), w.data(), n, dim, 1e-5f, ref.data());
  auto dx = Dev(x), dw = Dev(w), dout = Dev(std::vector<float>(x.size()));
  gpu_->RmsNorm(dx->f32(), dw->f32(), n, dim, 1e-5f, dout->f32());
  EXPECT_LE(RelError(Host(*dout, x.size()), ref), 1e-6);
  gpu_->RmsNorm(dx->f32(), dw->f32(), n, dim, 1e-5f, dx->f32());
  EXPECT_LE(RelError(Host(*dx, x.size()), ref), 1e-6);
  // Bias, SwiGLU, add.
  std::vector<float> h = x;
  cpu_->AddBias(h.data(), b.data(), n, dim);
  cpu_->SiluMul(h.data(), u.data(), n * dim);
  cpu_->Add(h.data(), x.data(), n * dim);
  auto dh = Dev(x), db = Dev(b), du = Dev(u), dx0 = Dev(x);
  gpu_->AddBias(dh->f32(), db->f32(), n, dim);
  gpu_->SiluMul(dh->f32(), du->f32(), n * dim);
  gpu_->Add(dh->f32(), dx0->f32(), n * dim);
  EXPECT_LE(RelError(Host(*dh, h.size()), h), 1e-6);
  // Gather and scatter-add with host indices and scales.
  const std::vector<int32_t> rows = {4, 1, 2};
  const std::vector<float> scales = {0.5f, -1.25f, 2.0f};
  std::vector<float> g(rows.size() * dim), acc = u;
  cpu_->GatherRows(x.data(), rows.data(), 3, dim, g.data());
  cpu_->ScatterAddRows(g.data(), rows.data(), scales.data(), 3, dim, acc.data());
  auto dg = Dev(std::vector<float>(g.size())), dacc = Dev(u);
  gpu_->GatherRows(dx0->f32(), rows.data(), 3, dim, dg->f32());
  gpu_->ScatterAddRows(dg->f32(), rows.data(), scales.data(), 3, dim, dacc->f32());
  EXPECT_EQ(Host(*dg, g.size()), g);
  EXPECT_LE(RelError(Host(*dacc, acc.size()), acc), 1e-6);
}

TEST_F(CudaParityTest, RopeBothStylesAndStoreKv) {
  const int64_t n = 6, heads = 4, head_dim = 64;
  const std::vector<int32_t> pos = {0, 1, 2, 1000, 4095, 32000};
  // Full heads, and a partial rotation at an offset with a cos/sin factor (MLA / YaRN shapes).
  struct Case {
    int64_t n_rot, offset;
    float mscale;
  };
  for (const Case& rc : {Case{head_dim, 0, 1.0f}, Case{16, 40, 1.25f}}) {
    std::vector<double> inv_freq(static_cast<size_t>(rc.n_rot / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = std::pow(1e6, -2.0 * static_cast<double>(i) / rc.n_rot);
    for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
      const backend::RopeParams rope{rc.n_rot, rc.offset, style, inv_freq.data(), rc.mscale};
      std::vector<float> x = RandomNormal(n * heads * head_dim, 9);
      auto dx = Dev(x);
      cpu_->Rope(x.data(), n, heads, head_dim, pos.data(), rope);
      gpu_->Rope(dx->f32(), n, heads, head_dim, pos.data(), rope);
      EXPECT_LE(RelError(Host(*dx, x.size()), x), 1e-6);
    }
  }
  const int64_t kv_dim = 128, cap = 40;
  const std::vector<int32_t> at = {3, 7, 39};
  const std::vector<float> k = RandomNormal(3 * kv_dim, 5), v = RandomNormal(3 * kv_dim, 6);
  std::vector<float> kc(cap * kv_dim), vc(cap * kv_dim);
  cpu_->StoreKv(k.data(), v.data(), at.data(), 3, kv_dim, kc.data(), vc.data());
  auto dk = Dev(k), dv = Dev(v), dkc = Dev(std::vector<float>(kc.size())),
       dvc = Dev(std::vector<float>(vc.size()));
  gpu_->StoreKv(dk->f32(), dv->f32(), at.data(), 3, kv_dim, dkc->f32(), dvc->f32());
  EXPECT_EQ(Host(*dkc, kc.size()), kc);
  EXPECT_EQ(Host(*dvc, vc.size()), vc);
}

TEST_F(CudaParityTest, AttentionDecodeAndPrefill) {
  struct Shape {
    int64_t heads, kv_heads, head_dim, context;
  };
  for (const Shape& s :
       {Shape{4, 2, 64, 1}, Shape{8, 2, 128, 300}, Shape{4, 4, 256, 70}, Shape{6, 3, 80, 1500}}) {
    SCOPED_TRACE(absl::StrCat("heads ", s.heads, "/", s.kv_heads, " dim ", s.head_dim, " context ",
                              s.context));
    const int64_t kv_dim = s.kv_heads * s.head_dim, q_dim = s.heads * s.head_dim;
    const std::vector<float> kc = RandomNormal(s.context * kv_dim, 11),
                             vc = RandomNormal(s.context * kv_dim, 12);
    auto dkc = Dev(kc), dvc = Dev(vc);
    // Decode (one row at the last position) and prefill (every position, causal).
    for (int64_t n : {int64_t{1}, std::min<int64_t>(s.context, 33)}) {
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        pos[static_cast<size_t>(i)] = static_cast<int32_t>(s.context - n + i);
      const std::vector<float> q = RandomNormal(n * q_dim, 13 + static_cast<uint32_t>(n));
      std::vector<float> ref(q.size());
      AttentionArgs a;
      a.q = q.data();
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.positions = pos.data();
      a.n = n;
      a.n_heads = s.heads;
      a.n_kv_heads = s.kv_heads;
      a.head_dim = s.head_dim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      a.out = ref.data();
      cpu_->Attention(a);
      auto dq = Dev(q), dout = Dev(std::vector<float>(q.size()));
      a.q = dq->f32();
      a.k_cache = dkc->f32();
      a.v_cache = dvc->f32();
      a.out = dout->f32();
      gpu_->Attention(a);
      EXPECT_LE(RelError(Host(*dout, q.size()), ref), 1e-5) << "n=" << n;
    }
  }
}

// gpt-oss attention: sliding window over ring caches, with per-head sinks in backend memory.
TEST_F(CudaParityTest, WindowedAttentionWithSinksOverRings) {
  const int64_t heads = 8, kv_heads = 2, head_dim = 64, ring = 23, window = 16;
  const int64_t kv_dim = kv_heads * head_dim, q_dim = heads * head_dim;
  const std::vector<float> kc = RandomNormal(ring * kv_dim, 21),
                           vc = RandomNormal(ring * kv_dim, 22);
  const std::vector<float> sinks = RandomNormal(heads, 23, 3.0f);
  auto dkc = Dev(kc), dvc = Dev(vc), dsinks = Dev(sinks);
  // Positions 90..96: their windows wrap around the ring.
  const int64_t n = 7;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(90 + i);
  const std::vector<float> q = RandomNormal(n * q_dim, 24);
  std::vector<float> ref(q.size());
  AttentionArgs a{q.data(), kc.data(), vc.data(), pos.data(), n,
                  heads,    kv_heads,  head_dim,  0.125f,     ref.data()};
  a.window = window;
  a.ring = ring;
  a.sinks = sinks.data();
  cpu_->Attention(a);
  auto dq = Dev(q), dout = Dev(std::vector<float>(q.size()));
  a.q = dq->f32();
  a.k_cache = dkc->f32();
  a.v_cache = dvc->f32();
  a.sinks = dsinks->f32();
  a.out = dout->f32();
  gpu_->Attention(a);
  EXPECT_LE(RelError(Host(*dout, q.size()), ref), 1e-5);
}

TEST_F(CudaParityTest, ClampedSwiGlu) {
  const int64_t n = 4096;
  std::vector<float> g = RandomNormal(n, 31, 6.0f);
  const std::vector<float> u = RandomNormal(n, 32, 6.0f);
  auto dg = Dev(g), du = Dev(u);
  cpu_->ClampedSwiGlu(g.data(), u.data(), n, 1.702f, 7.0f);
  gpu_->ClampedSwiGlu(dg->f32(), du->f32(), n, 1.702f, 7.0f);
  EXPECT_LE(RelError(Host(*dg, g.size()), g), 1e-6);
}

// The router: logits on both backends, softmax top-k on the host must pick the same experts.
// Routers are F32 in converted and GGUF models (any n); quantized routers only on the decode
// path, where the activations are quantized as on the CPU.
TEST_F(CudaParityTest, RoutingDecisionsIdentical) {
  const int64_t experts = 64, hidden = 512, k = 8;
  for (DType t : {DType::kF32, DType::kQ8_0, DType::kF16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      if (t != DType::kF32 && n >= 16) continue;
      SCOPED_TRACE(absl::StrCat(std::string(quant::DTypeName(t)), " n=", n));
      const std::vector<uint8_t> w = RandomQuantizedRows(t, experts, hidden, 101);
      std::unique_ptr<Buffer> cs, gs;
      auto cw = cpu_->ImportWeight(t, experts, hidden, w.data(), &cs);
      auto gw = gpu_->ImportWeight(t, experts, hidden, w.data(), &gs);
      ASSERT_TRUE(gw.ok());
      const std::vector<float> x = RandomNormal(n * hidden, 202 + static_cast<uint32_t>(n));
      std::vector<float> lc(n * experts);
      cpu_->MatMul(*cw, x.data(), n, lc.data(), false);
      auto dx = Dev(x), dl = Dev(std::vector<float>(lc.size()));
      gpu_->MatMul(*gw, dx->f32(), n, dl->f32(), false);
      const std::vector<float> lg = Host(*dl, lc.size());
      int differing = 0;
      for (int64_t r = 0; r < n; ++r) {
        auto top = [&](const std::vector<float>& l) {
          std::vector<int32_t> idx(static_cast<size_t>(experts));
          std::iota(idx.begin(), idx.end(), 0);
          std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
            const float la = l[static_cast<size_t>(r * experts + a)],
                        lb = l[static_cast<size_t>(r * experts + b)];
            return la > lb || (la == lb && a < b);
          });
          idx.resize(static_cast<size_t>(k));
          return idx;
        };
        const auto a = top(lc), b = top(lg);
        if (a != b) {
          // Only a near-tie may order differently: the logits at the boundary must be within
          // float summation noise.
          const float gap = std::fabs(lc[static_cast<size_t>(r * experts + a[k - 1])] -
                                      lc[static_cast<size_t>(r * experts + b[k - 1])]);
          EXPECT_LT(gap, 1e-4f) << "row " << r;
          differing++;
        }
      }
      EXPECT_EQ(differing, 0);
    }
  }
}

}  // namespace
}  // namespace colibri::backend

// Our reference quantizers against llama-quantize, on the peer oracle files
// (../shared/oracle, see its README). mixtral-tiny-q8_0.gguf and mixtral-tiny-q4_k_m.gguf were
// quantized from the same F32 model; the Q8_0 file's dequantized tensors stand in for that
// model (their error is ~1/17 of a Q4_K step). For every Q4_K / Q5_K / Q6_K tensor of the
// Q4_K_M file we quantize those originals ourselves and compare our reconstruction error with
// llama.cpp's. Byte-identical blocks are counted, but the Q8_0 noise alone changes nearly every
// block (the scale searches are sensitive to it), so bit-exactness is checked in ways that
// noise does not hide:
// - byte agreement with llama.cpp's blocks is compared with the agreement between our own
//   quantizer's outputs for two inputs that differ by that same noise (same algorithm => the
//   same agreement);
// - every element of llama.cpp's blocks whose level is determined by the Q8_0 bounds of its
//   original value must equal what our requantization rule gives for the block's scales;
// - the scale-packing invariants (the largest scale maps to the top code) hold for llama.cpp's
//   blocks and ours.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "colibri/model/gguf_reader.h"
#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "gtest/gtest.h"

namespace colibri::quant {
namespace {

using model::GgufFile;
using model::GgufTensorInfo;

std::optional<std::filesystem::path> OracleDir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("COLIBRI_ORACLE_DIR")) candidates.emplace_back(env);
  candidates.emplace_back("../shared/oracle");
  // From this source file: <repo>/libs/quant/src/ -> <repo>/../shared/oracle.
  const std::filesystem::path repo =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
  candidates.push_back(repo / ".." / "shared" / "oracle");
  for (const auto& dir : candidates) {
    if (std::filesystem::exists(dir / "mixtral-tiny-q4_k_m.gguf") &&
        std::filesystem::exists(dir / "mixtral-tiny-q8_0.gguf")) {
      return dir;
    }
  }
  return std::nullopt;
}

std::vector<float> Dequantize(const GgufFile& file, const GgufTensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  const int64_t row = t.dims.empty() ? 1 : t.dims[0];
  const size_t row_bytes = RowBytes(t.type, row);
  const auto data = file.TensorData(t);
  for (int64_t r = 0; r < t.num_rows(); ++r) {
    DequantizeRow(t.type, data.data() + r * row_bytes, out.data() + r * row, row);
  }
  return out;
}

struct Quantized {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

Quantized QuantizeTensor(DType type, const std::vector<float>& x, int64_t row) {
  Quantized q;
  const size_t row_bytes = RowBytes(type, row);
  const int64_t rows = static_cast<int64_t>(x.size()) / row;
  q.bytes.resize(row_bytes * rows);
  q.values.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(type, x.data() + r * row, q.bytes.data() + r * row_bytes, row);
    DequantizeRow(type, q.bytes.data() + r * row_bytes, q.values.data() + r * row, row);
  }
  return q;
}

// A float input consistent with the Q8_0 blocks of `q8` (row-major Q8_0 data): each value
// moved by a uniform draw within its block's rounding interval, like the unknown F32 original.
std::vector<float> SimulateOriginal(std::span<const uint8_t> q8, const std::vector<float>& deq,
                                    uint32_t seed) {
  std::mt19937 rng(seed);
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(q8.data());
  std::vector<float> out(deq.size());
  for (size_t i = 0; i < deq.size(); ++i) {
    const float d = F16ToF32(blocks[i / kQK8_0].d);
    std::uniform_real_distribution<float> u(-0.5f * d, 0.5f * d);
    out[i] = deq[i] + u(rng);
  }
  return out;
}

// Fraction of equal bytes.
double ByteAgreement(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return a.empty() ? 1.0 : static_cast<double>(same) / static_cast<double>(a.size());
}

// Bounds of the F32 value behind element j of a Q8_0 block: quantize_row_q8_0_ref rounds
// x / d with d = amax / 127 in float, then stores d as f16 (within 2^-11 of it). Returns false
// for subnormal scales, whose f16 error is not relative.
bool Q8Bounds(const BlockQ8_0& b, int j, double* lo, double* hi) {
  const double d16 = F16ToF32(b.d);
  if (d16 < 0x1p-14) return false;
  *lo = 1e300;
  *hi = -1e300;
  for (double d : {d16 * (1 - 0x1p-11), d16 * (1 + 0x1p-11)}) {
    for (double q : {b.qs[j] - 0.5, b.qs[j] + 0.5}) {
      *lo = std::min(*lo, q * d);
      *hi = std::max(*hi, q * d);
    }
  }
  return true;
}

void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The stored level of element e of a block (blocks.h layouts).
int LevelOf(DType type, const uint8_t* block, int e) {
  switch (type) {
    case DType::kQ4_K: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(block);
      return (b->qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15;
    }
    case DType::kQ5_K: {
      const auto* b = reinterpret_cast<const BlockQ5_K*>(block);
      return ((b->qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15) |
             (((b->qh[e % 32] >> (e / 32)) & 1) << 4);
    }
    case DType::kQ6_K: {
      const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
      const int h = e / 128, t = e % 128, quarter = t / 32, l = t % 32;
      const int low = (b->ql[64 * h + 32 * (quarter % 2) + l] >> (4 * (quarter / 2))) & 15;
      const int high = (b->qh[32 * h + l] >> (2 * quarter)) & 3;
      return low | (high << 4);
    }
    default: return -1;
  }
}

// Level GGML's requantization step gives value x in `block` (the k-quant reference
// quantizers' last pass), or nullopt where the group's scale is zero (level left from the
// search).
std::optional<int> RequantizedLevel(DType type, const uint8_t* block, int e, float x) {
  if (type == DType::kQ6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    const float d = F16ToF32(b->d) * b->scales[e / 16];
    if (!d) return std::nullopt;
    return std::clamp(static_cast<int>(std::nearbyint(x / d)), -32, 31) + 32;
  }
  const uint16_t d16 = type == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->d
                                            : reinterpret_cast<const BlockQ5_K*>(block)->d;
  const uint16_t dmin16 = type == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->dmin
                                               : reinterpret_cast<const BlockQ5_K*>(block)->dmin;
  const uint8_t* scales = type == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->scales
                                               : reinterpret_cast<const BlockQ5_K*>(block)->scales;
  int sc, m;
  ScaleMinK4(e / 32, scales, &sc, &m);
  const float d = F16ToF32(d16) * sc;
  if (!d) return std::nullopt;
  const float dm = F16ToF32(dmin16) * m;
  const int nmax = type == DType::kQ4_K ? 15 : 31;
  return std::clamp(static_cast<int>(std::nearbyint((x + dm) / d)), 0, nmax);
}

// The packing invariant of the reference quantizers: the largest group scale is stored as
// the top code (Q4_K/Q5_K: 63, and 63 for the largest min when any min is positive; Q6_K:
// -128 for the scale of largest magnitude). All-zero blocks are exempt.
bool ScalesUseTopCode(DType type, const uint8_t* block) {
  if (type == DType::kQ6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    if (b->d == 0) return true;
    for (int8_t s : b->scales) {
      if (s == -128) return true;
    }
    return false;
  }
  const uint8_t* scales = type == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->scales
                                               : reinterpret_cast<const BlockQ5_K*>(block)->scales;
  const uint16_t dmin16 = type == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(block)->dmin
                                               : reinterpret_cast<const BlockQ5_K*>(block)->dmin;
  bool top_scale = false, top_min = dmin16 == 0;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMinK4(j, scales, &sc, &m);
    top_scale |= sc == 63;
    top_min |= m == 63;
  }
  return top_scale && top_min;
}

struct ErrorSum {
  double squared = 0;
  int64_t count = 0;
  void Add(const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = double{a[i]} - b[i];
      squared += d * d;
    }
    count += static_cast<int64_t>(a.size());
  }
  double Rmse() const { return count ? std::sqrt(squared / count) : 0; }
};

class QuantOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = OracleDir();
    if (!dir_) {
      GTEST_SKIP() << "peer oracle not found (set COLIBRI_ORACLE_DIR or provide "
                      "../shared/oracle with mixtral-tiny-q{4_k_m,8_0}.gguf)";
    }
    auto q4 = GgufFile::Open(*dir_ / "mixtral-tiny-q4_k_m.gguf");
    auto q8 = GgufFile::Open(*dir_ / "mixtral-tiny-q8_0.gguf");
    ASSERT_TRUE(q4.ok()) << q4.status();
    ASSERT_TRUE(q8.ok()) << q8.status();
    q4_.emplace(std::move(*q4));
    q8_.emplace(std::move(*q8));
  }

  // The Q8_0 file's version of `name`, dequantized.
  std::vector<float> Original(const std::string& name) {
    const GgufTensorInfo* t = q8_->FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? Dequantize(*q8_, *t) : std::vector<float>();
  }

  std::optional<std::filesystem::path> dir_;
  std::optional<GgufFile> q4_;
  std::optional<GgufFile> q8_;
};

TEST_F(QuantOracleTest, KQuantsMatchLlamaQuantize) {
  struct PerType {
    ErrorSum ours, llama;
    int64_t blocks = 0, identical_blocks = 0, tensors = 0;
    double agree_llama = 0, agree_self = 0, bytes = 0;  // byte-weighted sums
  };
  std::map<DType, PerType> per_type;
  std::ostringstream table;
  table << "\n| tensor | type | RMSE ours | RMSE llama.cpp | ratio | identical blocks | "
           "bytes equal: ours vs llama.cpp | bytes equal: ours vs ours(+noise) |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  for (const GgufTensorInfo& t : q4_->tensors()) {
    if (t.type != DType::kQ4_K && t.type != DType::kQ5_K && t.type != DType::kQ6_K) continue;
    const std::vector<float> original = Original(t.name);
    ASSERT_EQ(static_cast<int64_t>(original.size()), t.num_elements()) << t.name;
    const std::vector<float> llama = Dequantize(*q4_, t);
    const Quantized ours = QuantizeTensor(t.type, original, t.dims[0]);

    const auto theirs = q4_->TensorData(t);
    ASSERT_EQ(theirs.size(), ours.bytes.size()) << t.name;
    const size_t bb = Traits(t.type).block_bytes;
    int64_t identical = 0;
    for (size_t off = 0; off < ours.bytes.size(); off += bb) {
      identical += std::memcmp(ours.bytes.data() + off, theirs.data() + off, bb) == 0;
    }
    // Same algorithm, an input as far from the Q8_0 values as the true original is.
    const GgufTensorInfo* t8 = q8_->FindTensor(t.name);
    const Quantized self =
        QuantizeTensor(t.type, SimulateOriginal(q8_->TensorData(*t8), original, 17), t.dims[0]);
    const double agree_llama = ByteAgreement(ours.bytes, theirs);
    const double agree_self = ByteAgreement(ours.bytes, self.bytes);

    ErrorSum e_ours, e_llama;
    e_ours.Add(ours.values, original);
    e_llama.Add(llama, original);
    PerType& p = per_type[t.type];
    p.ours.Add(ours.values, original);
    p.llama.Add(llama, original);
    p.blocks += static_cast<int64_t>(ours.bytes.size() / bb);
    p.identical_blocks += identical;
    p.agree_llama += agree_llama * ours.bytes.size();
    p.agree_self += agree_self * ours.bytes.size();
    p.bytes += ours.bytes.size();
    ++p.tensors;
    table << "| " << t.name << " | " << DTypeName(t.type) << " | " << std::setprecision(5)
          << e_ours.Rmse() << " | " << e_llama.Rmse() << " | " << std::setprecision(4)
          << e_ours.Rmse() / e_llama.Rmse() << " | " << identical << "/" << ours.bytes.size() / bb
          << " | " << std::setprecision(3) << agree_llama << " | " << agree_self << " |\n";
    // Per tensor: within 5% of llama.cpp's error.
    EXPECT_LE(e_ours.Rmse(), 1.05 * e_llama.Rmse()) << t.name;
    EXPECT_GE(e_ours.Rmse(), 0.95 * e_llama.Rmse()) << t.name;
  }
  table << "\n| type | tensors | RMSE ours | RMSE llama.cpp | ratio | identical blocks | "
           "bytes equal: ours vs llama.cpp | bytes equal: ours vs ours(+noise) |\n"
        << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& [type, p] : per_type) {
    table << "| " << DTypeName(type) << " | " << p.tensors << " | " << std::setprecision(5)
          << p.ours.Rmse() << " | " << p.llama.Rmse() << " | " << std::setprecision(4)
          << p.ours.Rmse() / p.llama.Rmse() << " | " << p.identical_blocks << "/" << p.blocks
          << " (" << std::setprecision(3) << 100.0 * p.identical_blocks / p.blocks << "%) | "
          << p.agree_llama / p.bytes << " | " << p.agree_self / p.bytes << " |\n";
    EXPECT_LE(p.ours.Rmse(), 1.05 * p.llama.Rmse()) << DTypeName(type);
    EXPECT_GE(p.ours.Rmse(), 0.95 * p.llama.Rmse()) << DTypeName(type);
    // llama.cpp's bytes are as close to ours as our own output under the same noise: a
    // different search would agree markedly less.
    EXPECT_GE(p.agree_llama / p.bytes, p.agree_self / p.bytes - 0.01) << DTypeName(type);
  }
  EXPECT_EQ(per_type.count(DType::kQ4_K), 1u);
  EXPECT_EQ(per_type.count(DType::kQ6_K), 1u);
  std::cout << table.str();
  RecordProperty("table", table.str());
}

TEST_F(QuantOracleTest, LlamaLevelsFollowOurRequantizationRule) {
  // Wherever the Q8_0 bounds of an original value pin down its level under a block's final
  // scales, llama.cpp stored exactly the level our requantization pass computes.
  int64_t checked = 0, ambiguous = 0, mismatched = 0, blocks = 0, top_code = 0, ours_top = 0;
  for (const GgufTensorInfo& t : q4_->tensors()) {
    if (t.type != DType::kQ4_K && t.type != DType::kQ5_K && t.type != DType::kQ6_K) continue;
    const GgufTensorInfo* t8 = q8_->FindTensor(t.name);
    ASSERT_NE(t8, nullptr);
    ASSERT_EQ(t8->type, DType::kQ8_0) << t.name;
    const auto* q8 = reinterpret_cast<const BlockQ8_0*>(q8_->TensorData(*t8).data());
    const auto theirs = q4_->TensorData(t);
    const size_t bb = Traits(t.type).block_bytes;
    const Quantized ours = QuantizeTensor(t.type, Original(t.name), t.dims[0]);
    for (size_t k = 0; k < theirs.size() / bb; ++k) {
      const uint8_t* block = theirs.data() + k * bb;
      ++blocks;
      top_code += ScalesUseTopCode(t.type, block);
      ours_top += ScalesUseTopCode(t.type, ours.bytes.data() + k * bb);
      for (int e = 0; e < kQK_K; ++e) {
        const size_t i = k * kQK_K + e;
        double lo, hi;
        if (!Q8Bounds(q8[i / kQK8_0], static_cast<int>(i % kQK8_0), &lo, &hi)) continue;
        const std::optional<int> a = RequantizedLevel(t.type, block, e, static_cast<float>(lo));
        const std::optional<int> b = RequantizedLevel(t.type, block, e, static_cast<float>(hi));
        if (!a || !b) continue;
        if (*a != *b) {
          ++ambiguous;
          continue;
        }
        ++checked;
        mismatched += LevelOf(t.type, block, e) != *a;
      }
    }
  }
  std::cout << "\nrequantization rule: " << checked << " levels determined by the Q8_0 bounds ("
            << ambiguous << " ambiguous), " << mismatched << " differ from llama.cpp's; "
            << top_code << "/" << blocks << " llama.cpp blocks and " << ours_top
            << " of ours use the top scale code\n";
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(top_code, blocks);
  EXPECT_EQ(ours_top, blocks);
}

TEST_F(QuantOracleTest, ErrorOrderingAcrossKQuants) {
  // Every quantized matrix of the Q8_0 file, through each k-quant.
  const DType kTypes[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  std::map<DType, ErrorSum> errors;
  double signal = 0;
  int64_t count = 0;
  for (const GgufTensorInfo& t : q8_->tensors()) {
    if (t.type != DType::kQ8_0 || t.dims[0] % 256 != 0) continue;
    const std::vector<float> original = Dequantize(*q8_, t);
    for (float v : original) signal += double{v} * v;
    count += static_cast<int64_t>(original.size());
    for (DType type : kTypes) {
      errors[type].Add(QuantizeTensor(type, original, t.dims[0]).values, original);
    }
  }
  ASSERT_GT(count, 0);
  const double rms = std::sqrt(signal / count);
  std::ostringstream table;
  table << "\n| type | RMSE | RMSE / RMS(weights) |\n|---|---|---|\n";
  double previous = 1e30;
  for (DType type : kTypes) {
    const double rmse = errors[type].Rmse();
    table << "| " << DTypeName(type) << " | " << std::setprecision(5) << rmse << " | " << rmse / rms
          << " |\n";
    EXPECT_LT(rmse, previous) << DTypeName(type);
    previous = rmse;
  }
  std::cout << table.str();
  RecordProperty("table", table.str());
}

}  // namespace
}  // namespace colibri::quant

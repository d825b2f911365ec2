#include "colibri/model/gguf_reader.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "colibri/model/gguf_writer.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::model {
namespace {

using quant::DType;
using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// ---- Oracle files ----------------------------------------------------------------------------

std::optional<std::filesystem::path> OracleDir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("COLIBRI_ORACLE_DIR")) candidates.emplace_back(env);
  candidates.emplace_back("../shared/oracle");
  // From this source file: <repo>/libs/model/src/ -> <repo>/../shared/oracle.
  const std::filesystem::path repo =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
  candidates.push_back(repo / ".." / "shared" / "oracle");
  for (const auto& dir : candidates) {
    if (std::filesystem::exists(dir / "mixtral-micro-f32.gguf")) return dir;
  }
  return std::nullopt;
}

struct OracleModel {
  const char* file;
  const char* arch;
  uint32_t hidden, ffn, layers, heads, kv_heads;
  size_t tensors;
};

constexpr OracleModel kOracleModels[] = {
    {"mixtral-micro-f32.gguf", "llama", 64, 128, 4, 4, 2, 3 + 4 * 10},
    {"qwen2moe-micro-f32.gguf", "qwen2moe", 64, 128, 4, 4, 2, 3 + 4 * 17},
    {"olmoe-micro-f32.gguf", "olmoe", 64, 128, 4, 4, 4, 3 + 4 * 12},
    {"mixtral-tiny-q4_k_m.gguf", "llama", 256, 512, 2, 4, 2, 3 + 2 * 10},
    {"mixtral-tiny-q8_0.gguf", "llama", 256, 512, 2, 4, 2, 3 + 2 * 10},
};

class GgufOracleTest : public ::testing::TestWithParam<OracleModel> {};

TEST_P(GgufOracleTest, ParsesMetadataAndTensors) {
  const std::optional<std::filesystem::path> dir = OracleDir();
  if (!dir) GTEST_SKIP() << "peer oracle not found (set COLIBRI_ORACLE_DIR or ../shared/oracle)";
  const OracleModel& m = GetParam();
  auto opened = GgufFile::Open(*dir / m.file);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = *opened;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.architecture(), m.arch);
  const std::string a = m.arch;
  EXPECT_EQ(*f.GetU32(a + ".embedding_length"), m.hidden);
  EXPECT_EQ(*f.GetU32(a + ".block_count"), m.layers);
  EXPECT_EQ(*f.GetU32(a + ".attention.head_count"), m.heads);
  EXPECT_EQ(*f.GetU32(a + ".attention.head_count_kv"), m.kv_heads);
  EXPECT_EQ(*f.GetU32(a + ".expert_count"), 8u);
  EXPECT_EQ(*f.GetU32(a + ".expert_used_count"), 2u);
  EXPECT_EQ(*f.GetU32(a + ".context_length"), 4096u);
  EXPECT_EQ(*f.GetU32(a + ".vocab_size"), 512u);
  EXPECT_EQ(*f.GetF32(a + ".rope.freq_base"), 1e6f);
  EXPECT_EQ(*f.GetF32(a + ".attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*f.GetU32(a + ".rope.dimension_count"), m.hidden / m.heads);
  if (a == "qwen2moe") {
    EXPECT_EQ(*f.GetU32(a + ".expert_feed_forward_length"), m.ffn);
    EXPECT_EQ(*f.GetU32(a + ".expert_shared_feed_forward_length"), 256u);
  }
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ(*f.GetString("tokenizer.ggml.model"), "llama");

  EXPECT_EQ(f.tensors().size(), m.tensors);
  const uint32_t e = m.hidden, head_dim = m.hidden / m.heads;
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{e, 512}));
  const GgufTensorInfo* k = f.FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims, (std::vector<int64_t>{e, m.kv_heads * head_dim}));
  const GgufTensorInfo* gate = f.FindTensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->dims, (std::vector<int64_t>{e, m.ffn, 8}));
  const GgufTensorInfo* down = f.FindTensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<int64_t>{m.ffn, e, 8}));
  const GgufTensorInfo* norm = f.FindTensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dims, (std::vector<int64_t>{e}));
  EXPECT_EQ(norm->type, DType::kF32);
  EXPECT_EQ(f.FindTensor("blk.0.ffn_gate_inp.weight")->type, DType::kF32);
  if (a == "qwen2moe") {
    EXPECT_EQ(f.FindTensor("blk.0.ffn_gate_inp_shexp.weight")->dims, (std::vector<int64_t>{e}));
    EXPECT_EQ(f.FindTensor("blk.0.ffn_down_shexp.weight")->dims, (std::vector<int64_t>{256, e}));
    EXPECT_NE(f.FindTensor("blk.3.attn_q.bias"), nullptr);
  }
  if (a == "olmoe") {
    EXPECT_EQ(f.FindTensor("blk.0.attn_q_norm.weight")->dims,
              (std::vector<int64_t>{m.heads * head_dim}));
  }

  const std::string file = m.file;
  if (file.find("q4_k_m") != std::string::npos) {
    EXPECT_EQ(f.FindTensor("blk.0.attn_q.weight")->type, DType::kQ4_K);
    EXPECT_EQ(f.FindTensor("blk.0.attn_k.weight")->type, DType::kQ8_0);
    EXPECT_EQ(f.FindTensor("blk.0.attn_v.weight")->type, DType::kQ8_0);
    EXPECT_EQ(f.FindTensor("blk.0.attn_output.weight")->type, DType::kQ5_K);
    EXPECT_EQ(embd->type, DType::kQ4_K);
    EXPECT_EQ(f.FindTensor("output.weight")->type, DType::kQ6_K);
    int q6_down = 0;
    for (uint32_t l = 0; l < m.layers; ++l) {
      q6_down +=
          f.FindTensor("blk." + std::to_string(l) + ".ffn_down_exps.weight")->type == DType::kQ6_K;
    }
    EXPECT_GE(q6_down, 1);
  } else if (file.find("q8_0") != std::string::npos) {
    EXPECT_EQ(f.FindTensor("blk.0.attn_q.weight")->type, DType::kQ8_0);
  } else {
    for (const GgufTensorInfo& t : f.tensors()) EXPECT_EQ(t.type, DType::kF32) << t.name;
  }

  // Every tensor's bytes lie in the file and decode to finite values.
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    const auto data = f.TensorData(t);
    ASSERT_EQ(data.size(), t.size_bytes) << t.name;
    ASSERT_EQ(t.size_bytes, quant::RowBytes(t.type, t.dims[0]) * t.num_rows()) << t.name;
    total += t.size_bytes;
    std::vector<float> row(static_cast<size_t>(t.dims[0]));
    quant::DequantizeRow(t.type, data.data(), row.data(), t.dims[0]);
    for (float v : row) ASSERT_TRUE(std::isfinite(v)) << t.name;
  }
  EXPECT_LE(f.data_offset() + total, f.bytes().size());
  EXPECT_GT(f.data_offset() + total, f.bytes().size() - 32 * f.tensors().size());
}

INSTANTIATE_TEST_SUITE_P(Oracle, GgufOracleTest, ::testing::ValuesIn(kOracleModels),
                         [](const auto& info) {
                           std::string name = info.param.file;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(GgufOracleTest, QuantizedFilesAgreeOnTheEmbedding) {
  const std::optional<std::filesystem::path> dir = OracleDir();
  if (!dir) GTEST_SKIP() << "peer oracle not found (set COLIBRI_ORACLE_DIR or ../shared/oracle)";
  auto q4 = GgufFile::Open(*dir / "mixtral-tiny-q4_k_m.gguf");
  auto q8 = GgufFile::Open(*dir / "mixtral-tiny-q8_0.gguf");
  ASSERT_TRUE(q4.ok() && q8.ok());
  // Same model: the two quantizations of a tensor must be close (offsets are right).
  for (const char* name : {"token_embd.weight", "blk.1.ffn_up_exps.weight", "output.weight"}) {
    const GgufTensorInfo* a = q4->FindTensor(name);
    const GgufTensorInfo* b = q8->FindTensor(name);
    ASSERT_TRUE(a && b) << name;
    ASSERT_EQ(a->dims, b->dims);
    const int64_t n = a->num_elements();
    std::vector<float> x(n), y(n);
    for (int64_t r = 0; r < a->num_rows(); ++r) {
      const int64_t row = a->dims[0];
      quant::DequantizeRow(a->type, q4->TensorData(*a).data() + r * quant::RowBytes(a->type, row),
                           x.data() + r * row, row);
      quant::DequantizeRow(b->type, q8->TensorData(*b).data() + r * quant::RowBytes(b->type, row),
                           y.data() + r * row, row);
    }
    double err = 0, sig = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
      sig += double{y[i]} * y[i];
    }
    EXPECT_LT(std::sqrt(err / sig), 0.1) << name;
  }
}

// ---- Writer round trip -----------------------------------------------------------------------

std::vector<uint8_t> QuantizedBytes(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> out(quant::RowBytes(t, n));
  quant::QuantizeRow(t, x.data(), out.data(), n);
  return out;
}

GgufWriter MakeRichWriter(GgufWriter::Options options) {
  GgufWriter w(options);
  EXPECT_TRUE(w.AddString("general.architecture", "llama").ok());
  EXPECT_TRUE(w.Add("u8", GgufWriteValue::Uint8(200)).ok());
  EXPECT_TRUE(w.Add("i8", GgufWriteValue::Int8(-100)).ok());
  EXPECT_TRUE(w.Add("u16", GgufWriteValue::Uint16(60000)).ok());
  EXPECT_TRUE(w.Add("i16", GgufWriteValue::Int16(-30000)).ok());
  EXPECT_TRUE(w.AddU32("u32", 4000000000u).ok());
  EXPECT_TRUE(w.Add("i32", GgufWriteValue::Int32(-2000000000)).ok());
  EXPECT_TRUE(w.Add("u64", GgufWriteValue::Uint64(std::numeric_limits<uint64_t>::max())).ok());
  EXPECT_TRUE(w.Add("i64", GgufWriteValue::Int64(std::numeric_limits<int64_t>::min())).ok());
  EXPECT_TRUE(w.AddF32("f32", 1.5f).ok());
  EXPECT_TRUE(w.Add("f64", GgufWriteValue::Float64(-2.25)).ok());
  EXPECT_TRUE(w.Add("yes", GgufWriteValue::Bool(true)).ok());
  EXPECT_TRUE(w.Add("no", GgufWriteValue::Bool(false)).ok());
  EXPECT_TRUE(w.AddString("empty", "").ok());
  EXPECT_TRUE(w.Add("tokens", GgufWriteValue::StringArray({"<s>", "", "hello world"})).ok());
  const float scores[] = {0.5f, -1.0f, 3.0f};
  EXPECT_TRUE(w.Add("scores", GgufWriteValue::Float32Array(scores)).ok());
  const int32_t types[] = {1, -2, 3, 4};
  EXPECT_TRUE(w.Add("types", GgufWriteValue::Int32Array(types)).ok());
  EXPECT_TRUE(w.Add("no_items", GgufWriteValue::Array(GgufType::kUint8, {})).ok());
  EXPECT_TRUE(w.Add("flags", GgufWriteValue::Array(GgufType::kBool, {GgufWriteValue::Bool(true),
                                                                     GgufWriteValue::Bool(false)}))
                  .ok());
  EXPECT_TRUE(
      w.Add("nested",
            GgufWriteValue::Array(
                GgufType::kArray,
                {GgufWriteValue::Int32Array(types), GgufWriteValue::StringArray({"a", "bc"}),
                 GgufWriteValue::Array(GgufType::kArray, {GgufWriteValue::Float32Array(scores)})}))
          .ok());
  std::vector<float> f32(3 * 5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) - 7.5f;
  EXPECT_TRUE(w.AddTensor("a.f32", {5, 3}, DType::kF32,
                          {reinterpret_cast<const uint8_t*>(f32.data()), f32.size() * 4})
                  .ok());
  EXPECT_TRUE(
      w.AddTensor("b.q4_k", {512, 2, 3}, DType::kQ4_K, QuantizedBytes(DType::kQ4_K, 3072, 1)).ok());
  EXPECT_TRUE(
      w.AddTensor("c.q8_0", {64, 3}, DType::kQ8_0, QuantizedBytes(DType::kQ8_0, 192, 2)).ok());
  EXPECT_TRUE(
      w.AddTensor("d.q6_k", {256, 1, 2, 2}, DType::kQ6_K, QuantizedBytes(DType::kQ6_K, 1024, 3))
          .ok());
  EXPECT_TRUE(w.AddTensor("e.f16", {7}, DType::kF16, QuantizedBytes(DType::kF16, 7, 4)).ok());
  EXPECT_TRUE(w.AddTensor("f.bf16", {3, 1}, DType::kBF16, QuantizedBytes(DType::kBF16, 3, 5)).ok());
  EXPECT_TRUE(w.AddTensor("g.empty", {0, 4}, DType::kF32, {}).ok());
  return w;
}

void ExpectRichContents(const GgufFile& f, uint32_t version, uint64_t alignment) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(*f.GetU32("u8"), 200u);
  EXPECT_EQ(*f.GetI32("i8"), -100);
  EXPECT_EQ(*f.GetU32("u16"), 60000u);
  EXPECT_EQ(*f.GetI64("i16"), -30000);
  EXPECT_EQ(*f.GetU32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetI32("i32"), -2000000000);
  EXPECT_EQ(*f.GetU64("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetI64("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.GetF32("f32"), 1.5f);
  EXPECT_EQ(*f.GetF64("f64"), -2.25);
  EXPECT_EQ(*f.GetF32("f64"), -2.25f);
  EXPECT_TRUE(*f.GetBool("yes"));
  EXPECT_FALSE(*f.GetBool("no"));
  EXPECT_EQ(*f.GetString("empty"), "");
  EXPECT_EQ(*f.GetStringArray("tokens"), (std::vector<std::string_view>{"<s>", "", "hello world"}));
  EXPECT_EQ(*f.GetF32Array("scores"), (std::vector<float>{0.5f, -1.0f, 3.0f}));
  EXPECT_EQ(*f.GetIntArray("types"), (std::vector<int64_t>{1, -2, 3, 4}));
  EXPECT_EQ((*f.GetArray("no_items"))->size(), 0u);
  const GgufValue* flags = *f.GetArray("flags");
  EXPECT_EQ(flags->element_type(), GgufType::kBool);
  ASSERT_EQ(flags->element_bytes().size(), 2u);
  EXPECT_EQ(flags->element_bytes()[0], 1);
  const GgufValue* nested = *f.GetArray("nested");
  ASSERT_EQ(nested->element_type(), GgufType::kArray);
  ASSERT_EQ(nested->arrays().size(), 3u);
  EXPECT_EQ(nested->arrays()[0].IntElement(1), -2);
  EXPECT_EQ(nested->arrays()[0].UintElement(1), std::nullopt);  // negative
  EXPECT_EQ(nested->arrays()[0].UintElement(2), 3u);
  EXPECT_EQ(nested->arrays()[0].IntElement(9), std::nullopt);  // out of range
  EXPECT_EQ(nested->arrays()[1].strings()[1], "bc");
  EXPECT_EQ(nested->arrays()[2].arrays()[0].FloatElement(2), 3.0);
  // Insertion order is kept (the writer puts general.alignment first when it adds it).
  EXPECT_EQ(f.metadata()[alignment == 32 ? 0 : 1].key, "general.architecture");

  ASSERT_EQ(f.tensors().size(), 7u);
  EXPECT_EQ(f.tensors()[1].name, "b.q4_k");
  const GgufTensorInfo* a = f.FindTensor("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{5, 3}));
  float first;
  std::memcpy(&first, f.TensorData(*a).data(), 4);
  EXPECT_EQ(first, -7.5f);
  const GgufTensorInfo* b = f.FindTensor("b.q4_k");
  EXPECT_EQ(b->type, DType::kQ4_K);
  EXPECT_EQ(b->num_elements(), 3072);
  EXPECT_EQ(b->num_rows(), 6);
  const std::vector<uint8_t> expect_b = QuantizedBytes(DType::kQ4_K, 3072, 1);
  ASSERT_EQ(f.TensorData(*b).size(), expect_b.size());
  EXPECT_EQ(std::memcmp(f.TensorData(*b).data(), expect_b.data(), expect_b.size()), 0);
  const GgufTensorInfo* d = f.FindTensor("d.q6_k");
  EXPECT_EQ(d->dims.size(), 4u);
  EXPECT_EQ(d->size_bytes, 4u * 210);
  for (const GgufTensorInfo& t : f.tensors()) EXPECT_EQ(t.offset % alignment, 0u) << t.name;
  EXPECT_EQ(f.FindTensor("g.empty")->size_bytes, 0u);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
}

TEST(GgufWriterTest, RoundTripAllValueTypes) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u, 1u}) {
      GgufWriter w = MakeRichWriter({version, alignment});
      auto bytes = w.Serialize();
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      auto f = GgufFile::Parse(*bytes);
      ASSERT_TRUE(f.ok()) << f.status();
      ExpectRichContents(*f, version, alignment);
    }
  }
}

TEST(GgufWriterTest, OpenMapsAWrittenFile) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "gguf_reader_test_roundtrip.gguf";
  ASSERT_TRUE(MakeRichWriter({3, 32}).WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  GgufFile moved = std::move(*f);  // views survive a move
  ExpectRichContents(moved, 3, 32);
  std::filesystem::remove(path);
  auto missing = GgufFile::Open(path);
  EXPECT_FALSE(missing.ok());
}

TEST(GgufWriterTest, RejectsInconsistentInput) {
  GgufWriter w;
  EXPECT_TRUE(w.AddU32("k", 1).ok());
  EXPECT_EQ(w.AddU32("k", 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Add("mixed", GgufWriteValue::Array(GgufType::kUint32, {GgufWriteValue::Uint32(1),
                                                                     GgufWriteValue::Int32(2)}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> bytes(10);
  EXPECT_FALSE(w.AddTensor("t", {5}, DType::kF32, bytes).ok());     // 20 bytes needed
  EXPECT_FALSE(w.AddTensor("t", {100}, DType::kQ4_K, bytes).ok());  // not whole blocks
  EXPECT_FALSE(w.AddTensor("t", {1, 1, 1, 1, 1}, DType::kF32, bytes).ok());
  EXPECT_FALSE(GgufWriter({4, 32}).Serialize().ok());
  EXPECT_FALSE(GgufWriter({3, 48}).Serialize().ok());
}

// ---- Getter errors -----------------------------------------------------------------------------

TEST(GgufGetterTest, ErrorsNameTheKeyAndTheType) {
  GgufWriter w;
  ASSERT_TRUE(w.Add("neg", GgufWriteValue::Int32(-5)).ok());
  ASSERT_TRUE(w.Add("big", GgufWriteValue::Uint64(uint64_t{1} << 40)).ok());
  ASSERT_TRUE(w.AddString("name", "llama").ok());
  ASSERT_TRUE(w.AddU32("count", 7).ok());
  const float f[] = {1.0f};
  ASSERT_TRUE(w.Add("floats", GgufWriteValue::Float32Array(f)).ok());
  auto bytes = w.Serialize();
  auto file = GgufFile::Parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();

  auto s = file->GetU32("neg");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s.status()), HasSubstr("'neg'"));
  EXPECT_THAT(Msg(s.status()), HasSubstr("int32 -5"));
  EXPECT_EQ(*file->GetI64("neg"), -5);
  EXPECT_FALSE(file->GetI32("big").ok());
  EXPECT_EQ(*file->GetU64("big"), uint64_t{1} << 40);
  auto str = file->GetString("count");
  EXPECT_THAT(Msg(str.status()), HasSubstr("key 'count' is uint32 7, expected string"));
  auto num = file->GetU32("name");
  EXPECT_THAT(Msg(num.status()), HasSubstr("string 'llama'"));
  EXPECT_FALSE(file->GetF32("count").ok());
  EXPECT_FALSE(file->GetBool("count").ok());
  EXPECT_FALSE(file->GetStringArray("floats").ok());
  EXPECT_FALSE(file->GetIntArray("floats").ok());
  EXPECT_FALSE(file->GetArray("count").ok());
  auto missing = file->GetU32("llama.block_count");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(missing.status()), HasSubstr("'llama.block_count'"));
  EXPECT_EQ(file->architecture(), "");  // absent
}

// ---- Malformed input ---------------------------------------------------------------------------

// Little-endian byte builder for hand-made (broken) files.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    return Raw(&v, sizeof(T));
  }
  Bytes& Str(std::string_view s) {
    Put<uint64_t>(s.size());
    return Raw(s.data(), s.size());
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Raw("GGUF", 4);
    return Put<uint32_t>(version).Put<uint64_t>(n_tensors).Put<uint64_t>(n_kv);
  }
  // (resize + memcpy rather than insert: GCC 12 warns falsely on small inserts.)
  Bytes& Raw(const void* p, size_t n) {
    const size_t at = b_.size();
    b_.resize(at + n);
    if (n != 0) std::memcpy(b_.data() + at, p, n);
    return *this;
  }
  Bytes& Pad(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }
  const std::vector<uint8_t>& get() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

absl::Status ParseStatus(const std::vector<uint8_t>& bytes) {
  return GgufFile::Parse(bytes).status();
}

void ExpectError(const std::vector<uint8_t>& bytes, std::string_view substring,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  const absl::Status s = ParseStatus(bytes);
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << substring;
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(Msg(s), HasSubstr(std::string(substring)));
  EXPECT_EQ(Msg(s).rfind("gguf: ", 0), 0u) << s;
}

std::vector<uint8_t> SmallValidFile() {
  GgufWriter w;
  EXPECT_TRUE(w.AddString("general.architecture", "llama").ok());
  EXPECT_TRUE(w.AddU32("llama.block_count", 1).ok());
  EXPECT_TRUE(w.Add("tokenizer.ggml.tokens", GgufWriteValue::StringArray({"a", "bb"})).ok());
  const int32_t ids[] = {1, 2};
  EXPECT_TRUE(w.Add("ids", GgufWriteValue::Int32Array(ids)).ok());
  EXPECT_TRUE(
      w.Add("nested", GgufWriteValue::Array(GgufType::kArray, {GgufWriteValue::Int32Array(ids)}))
          .ok());
  EXPECT_TRUE(
      w.AddTensor("blk.0.attn_q.weight", {32, 2}, DType::kQ8_0, QuantizedBytes(DType::kQ8_0, 64, 7))
          .ok());
  std::vector<float> norm(16, 1.0f);  // 64 bytes: the file ends without padding
  EXPECT_TRUE(w.AddTensor("blk.0.attn_norm.weight", {16}, DType::kF32,
                          {reinterpret_cast<const uint8_t*>(norm.data()), 64})
                  .ok());
  return *w.Serialize();
}

TEST(GgufMalformedTest, EveryTruncationIsAnError) {
  const std::vector<uint8_t> file = SmallValidFile();
  ASSERT_TRUE(GgufFile::Parse(file).ok());
  for (size_t len = 0; len < file.size(); ++len) {
    const std::vector<uint8_t> prefix(file.begin(), file.begin() + len);
    const absl::Status s = ParseStatus(prefix);
    ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes parsed";
    // A whole header with its tensor data cut short is a truncated file, named as such.
    if (s.code() == absl::StatusCode::kDataLoss) {
      ASSERT_THAT(Msg(s), HasSubstr("the file is truncated")) << len;
      ASSERT_THAT(Msg(s), HasSubstr(absl::StrCat(file.size() - len, " bytes missing"))) << len;
      continue;
    }
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << len << ": " << s;
  }
}

TEST(GgufMalformedTest, BadMagicAndVersion) {
  ExpectError({}, "too small");
  ExpectError({'G', 'G', 'U'}, "too small");
  ExpectError(Bytes().Put<uint32_t>(0x12345678).Pad(20).get(), "bad magic");
  std::vector<uint8_t> big_endian = Bytes().Header(0, 0).get();
  std::memcpy(big_endian.data(), "FUGG", 4);
  ExpectError(big_endian, "big-endian", absl::StatusCode::kFailedPrecondition);
  ExpectError(Bytes().Header(0, 0, 1).get(), "version 1", absl::StatusCode::kFailedPrecondition);
  ExpectError(Bytes().Header(0, 0, 4).get(), "version 4", absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(GgufFile::Parse(Bytes().Header(0, 0).get()).ok());
}

TEST(GgufMalformedTest, HugeCounts) {
  ExpectError(Bytes().Header(uint64_t{1} << 62, 0).get(), "tensor count");
  ExpectError(Bytes().Header(0, std::numeric_limits<uint64_t>::max()).get(), "metadata count");
  // A count that passes the header check but not after the metadata was read.
  Bytes b;
  b.Header(3, 1).Str("k").Put<uint32_t>(8).Str(std::string(60, 'x'));
  ExpectError(b.get(), "tensor count");
  // Key length, string value length and array counts beyond the file.
  ExpectError(Bytes().Header(0, 1).Put<uint64_t>(uint64_t{1} << 60).Pad(8).get(),
              "metadata key #0");
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(1000).get(), "key 'k'");
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("k")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(4)
                  .Put<uint64_t>(uint64_t{1} << 61)
                  .get(),
              "array of 2305843009213693952 uint32");
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("k")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(8)
                  .Put<uint64_t>(std::numeric_limits<uint64_t>::max())
                  .Pad(16)
                  .get(),
              "strings exceeds");
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("k")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(9)
                  .Put<uint64_t>(uint64_t{1} << 40)
                  .Pad(16)
                  .get(),
              "arrays exceeds");
  ExpectError(Bytes().Header(0, 1).Str(std::string(70000, 'k')).get(), "exceeds the limit");
}

TEST(GgufMalformedTest, BadValueTypes) {
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(13).Pad(8).get(),
              "key 'k': invalid value type 13");
  ExpectError(
      Bytes().Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(77).Put<uint64_t>(0).get(),
      "invalid array element type 77");
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(7).Put<uint8_t>(2).get(), "invalid bool");
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("k")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(7)
                  .Put<uint64_t>(2)
                  .Put<uint8_t>(1)
                  .Put<uint8_t>(9)
                  .get(),
              "invalid bool");
  // Arrays nested deeper than the cap.
  Bytes deep;
  deep.Header(0, 1).Str("k").Put<uint32_t>(9);
  for (int i = 0; i < 10; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(0).Put<uint64_t>(0);
  ExpectError(deep.get(), "nested deeper");
  // Duplicate keys.
  ExpectError(Bytes()
                  .Header(0, 2)
                  .Str("k")
                  .Put<uint32_t>(4)
                  .Put<uint32_t>(1)
                  .Str("k")
                  .Put<uint32_t>(4)
                  .Put<uint32_t>(2)
                  .get(),
              "duplicate key 'k'");
}

TEST(GgufMalformedTest, BadAlignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    ExpectError(
        Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(bad).get(),
        "general.alignment");
  }
  ExpectError(
      Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(5).Put<int32_t>(-32).get(),
      "general.alignment");
  ExpectError(Bytes().Header(0, 1).Str("general.alignment").Put<uint32_t>(8).Str("32").get(),
              "general.alignment");
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("general.alignment")
                  .Put<uint32_t>(10)
                  .Put<uint64_t>(uint64_t{1} << 40)
                  .get(),
              "general.alignment");
  // A valid non-default alignment moves the data section.
  GgufWriter w({3, 256});
  ASSERT_TRUE(w.AddTensor("t", {4}, DType::kF32, std::vector<uint8_t>(16)).ok());
  auto f = GgufFile::Parse(*w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset(), 256u);
}

std::vector<uint8_t> WithRawTensors(const std::vector<GgufWriter::RawTensorInfo>& infos,
                                    size_t data_bytes) {
  GgufWriter w;
  for (const auto& info : infos) w.AddRawTensorInfo(info);
  std::vector<uint8_t> bytes = *w.Serialize();
  bytes.resize(bytes.size() + data_bytes, 0);
  return bytes;
}

TEST(GgufMalformedTest, BadTensorInfos) {
  using Raw = GgufWriter::RawTensorInfo;
  EXPECT_TRUE(GgufFile::Parse(WithRawTensors({Raw{"t", {8}, 0, 0}}, 32)).ok());
  ExpectError(WithRawTensors({Raw{"t", {1, 1, 1, 1, 1}, 0, 0}}, 32), "tensor 't': 5 dims");
  ExpectError(WithRawTensors({Raw{"t", {uint64_t{1} << 63}, 0, 0}}, 32), "too large");
  ExpectError(WithRawTensors({Raw{"t", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0}}, 32),
              "element count overflows");
  ExpectError(WithRawTensors({Raw{"t", {uint64_t{1} << 62}, 0, 0}}, 32), "byte size");
  ExpectError(WithRawTensors({Raw{"blk.0.attn_q.weight", {256}, 34, 0}}, 32),
              "tensor 'blk.0.attn_q.weight': unsupported ggml type 34 (tq1_0)",
              absl::StatusCode::kFailedPrecondition);
  ExpectError(WithRawTensors({Raw{"t", {32}, 99, 0}}, 32), "unsupported ggml type 99 (unknown)",
              absl::StatusCode::kFailedPrecondition);
  ExpectError(WithRawTensors({Raw{"t", {100}, 12, 0}}, 512), "not a multiple of the block size");
  ExpectError(WithRawTensors({Raw{"t", {8}, 0, 16}}, 64), "not a multiple of the alignment 32");
  ExpectError(WithRawTensors({Raw{"t", {8}, 0, 0}, Raw{"t", {8}, 0, 32}}, 64),
              "duplicate tensor 't'");
  ExpectError(WithRawTensors({Raw{std::string(2000, 'n'), {8}, 0, 0}}, 32), "exceeds the limit");
  // Data past the end: a truncated file, with the bytes it has and needs, and the first tensor
  // cut short.
  {
    const std::vector<uint8_t> bytes =
        WithRawTensors({Raw{"blk.0.attn_q.weight", {64, 2}, 0, 64}}, 100);
    const absl::Status s = ParseStatus(bytes);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(Msg(s), HasSubstr("gguf: the file is truncated: " + std::to_string(bytes.size()) +
                                  " bytes, its tensors need "));
    EXPECT_THAT(Msg(s), HasSubstr("tensor 'blk.0.attn_q.weight' and those after it"));
  }
  ExpectError(WithRawTensors({Raw{"t", {8}, 0, std::numeric_limits<uint64_t>::max() - 31}}, 32),
              "exceeds file size");
  // Overlapping tensors.
  ExpectError(WithRawTensors({Raw{"a", {16}, 0, 0}, Raw{"b", {16}, 0, 32}}, 128),
              "tensor 'b' at data offset 32 overlaps tensor 'a' (0 + 64)");
  ExpectError(WithRawTensors({Raw{"a", {16}, 0, 0}, Raw{"b", {16}, 0, 0}}, 128), "overlaps");
  // Zero-sized tensors may share an offset.
  EXPECT_TRUE(
      GgufFile::Parse(WithRawTensors({Raw{"a", {0}, 0, 0}, Raw{"b", {16}, 0, 0}}, 64)).ok());
}

TEST(GgufMalformedTest, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> valid = SmallValidFile();
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[pos] = static_cast<uint8_t>(rng()); break;
        case 1: bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        default: bytes[pos] = (rng() % 2) ? 0xff : 0x00; break;
      }
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    auto f = GgufFile::Parse(bytes);
    if (f.ok()) {
      ++parsed;
      for (const GgufTensorInfo& t : f->tensors()) {
        const auto data = f->TensorData(t);
        ASSERT_LE(data.data() + data.size(), bytes.data() + bytes.size());
      }
    } else {
      ASSERT_EQ(Msg(f.status()).rfind("gguf: ", 0), 0u) << f.status();
    }
  }
  EXPECT_GT(parsed, 0);  // mutations of tensor bytes still parse
}

// A model split as llama.cpp's gguf-split writes it: split.no in every part, split.count and
// split.tensors.count (u16, u16, i32) in them too, tensors spread over the parts.
TEST(GgufSplitTest, PartsOpenAsOneFile) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / ("gguf_split_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10, 11, 12};
  auto part = [&](int no, const std::string& tensor, const std::vector<float>& data) {
    GgufWriter w;
    EXPECT_TRUE(w.AddString("general.architecture", "llama").ok());
    EXPECT_TRUE(w.Add("split.no", GgufWriteValue::Uint16(static_cast<uint16_t>(no))).ok());
    EXPECT_TRUE(w.Add("split.count", GgufWriteValue::Uint16(2)).ok());
    EXPECT_TRUE(w.Add("split.tensors.count", GgufWriteValue::Int32(2)).ok());
    EXPECT_TRUE(w.AddTensor(tensor, {static_cast<int64_t>(data.size())}, DType::kF32,
                            {reinterpret_cast<const uint8_t*>(data.data()), data.size() * 4})
                    .ok());
    const auto path = dir / ("m-0000" + std::to_string(no + 1) + "-of-00002.gguf");
    EXPECT_TRUE(w.WriteFile(path).ok());
    return path;
  };
  const auto first = part(0, "a", a);
  const auto second = part(1, "b", b);
  auto f = GgufFile::OpenSplit(first);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->parts(), 2u);
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo* tb = f->FindTensor("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->part, 1u);
  GgufFile moved = std::move(*f);  // views into every part survive a move
  auto data = moved.TensorData(*moved.FindTensor("b"));
  ASSERT_EQ(data.size(), 32u);
  EXPECT_EQ(std::memcmp(data.data(), b.data(), 32), 0);
  EXPECT_EQ(std::memcmp(moved.TensorData(*moved.FindTensor("a")).data(), a.data(), 16), 0);

  auto later = GgufFile::OpenSplit(second);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(later.status().message()), HasSubstr("pass the first part"));
  part(1, "a", a);  // the same tensor in both parts
  EXPECT_THAT(std::string(GgufFile::OpenSplit(first).status().message()),
              HasSubstr("tensor 'a' is in two parts"));
  std::filesystem::remove(second);
  auto missing = GgufFile::OpenSplit(first);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("1 of 2 parts missing (m-00002-of-00002.gguf)"));
  // A single file is opened as it is.
  GgufWriter single;
  ASSERT_TRUE(single.AddString("general.architecture", "llama").ok());
  ASSERT_TRUE(single.WriteFile(dir / "one.gguf").ok());
  auto one = GgufFile::OpenSplit(dir / "one.gguf");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->parts(), 1u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace colibri::model

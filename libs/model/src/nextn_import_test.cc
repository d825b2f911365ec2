#include "nextn_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "colibri/model/gguf_reader.h"
#include "colibri/model/gguf_writer.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/quant/quantize.h"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;
using quant::DType;

// The synthetic fixture's shape (hidden 32, expert ffn 64, 2 layers) with 3 experts and one
// NextN layer.
ModelConfig Config() {
  ModelConfig c = DefaultSyntheticConfig();
  c.n_experts = 3;
  c.nextn_layers = 1;
  return c;
}

std::vector<uint8_t> Floats(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * static_cast<float>((i * 7) % 23 - 11);
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class NextnImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("colibri_nextn_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A GGUF holding block 2 (the NextN block of a 2-layer model) and one tensor of block 1.
  GgufFile File(bool with_unknown) {
    GgufWriter w;
    EXPECT_TRUE(w.AddTensor("blk.1.attn_norm.weight", {32}, DType::kF32, Floats(32, 0.1f)).ok());
    EXPECT_TRUE(
        w.AddTensor("blk.2.nextn.eh_proj.weight", {64, 32}, DType::kF32, Floats(64 * 32, 0.01f))
            .ok());
    EXPECT_TRUE(w.AddTensor("blk.2.nextn.enorm.weight", {32}, DType::kF32, Floats(32, 0.5f)).ok());
    EXPECT_TRUE(w.AddTensor("blk.2.attn_q.bias", {32}, DType::kF32, Floats(32, 0.2f)).ok());
    EXPECT_TRUE(w.AddTensor("blk.2.exp_probs_b.bias", {3}, DType::kF32, Floats(3, 0.3f)).ok());
    EXPECT_TRUE(
        w.AddTensor("blk.2.ffn_gate_inp.weight", {32, 3}, DType::kF32, Floats(96, 0.03f)).ok());
    EXPECT_TRUE(w.AddTensor("blk.2.ffn_up_exps.weight", {32, 64, 3}, DType::kF32,
                            Floats(32 * 64 * 3, 0.02f))
                    .ok());
    if (with_unknown) {
      EXPECT_TRUE(w.AddTensor("blk.2.mystery.weight", {32}, DType::kF32, Floats(32, 1)).ok());
    }
    bytes_ = *w.Serialize();
    auto f = GgufFile::Parse(bytes_);
    EXPECT_TRUE(f.ok()) << f.status();
    return std::move(*f);
  }

  fs::path dir_;
  std::vector<uint8_t> bytes_;
};

TEST_F(NextnImportTest, GgufBlockBecomesNamedExtraTensors) {
  GgufFile f = File(false);
  for (const char* preset : {"keep", "q8_0"}) {
    SCOPED_TRACE(preset);
    auto w = ContainerWriter::Create(dir_ / preset, "m", Config(), {});
    ASSERT_TRUE(w.ok()) << w.status();
    auto plan = QuantPlan::Parse(preset, Config());
    ASSERT_TRUE(plan.ok());
    WriterSink sink(**w);
    ASSERT_TRUE(ImportNextnFromGguf(f, Config(), *plan, sink).ok());
    const Manifest& m = (*w)->manifest();
    ASSERT_EQ(m.extra.size(), 6u);  // block 1 is not NextN
    EXPECT_TRUE(m.dense.empty());
    const TensorEntry* up = m.FindExtra("nextn.0.ffn_up_exps");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->shape, (std::vector<int64_t>{3, 64, 32}));
    const TensorEntry* eh = m.FindExtra("nextn.0.eh_proj");
    ASSERT_NE(eh, nullptr);
    EXPECT_EQ(eh->shape, (std::vector<int64_t>{32, 64}));
    const DType matrix = std::string(preset) == "keep" ? DType::kF32 : DType::kQ8_0;
    EXPECT_EQ(up->dtype, matrix);
    EXPECT_EQ(eh->dtype, matrix);
    // Vectors, biases and the router stay F32 whatever the preset.
    for (const char* name : {"nextn.0.enorm", "nextn.0.attn_q_bias", "nextn.0.ffn_exp_probs_b",
                             "nextn.0.ffn_gate_inp"}) {
      ASSERT_NE(m.FindExtra(name), nullptr) << name;
      EXPECT_EQ(m.FindExtra(name)->dtype, DType::kF32) << name;
    }
    EXPECT_EQ(m.FindExtra("nextn.0.ffn_gate_inp")->shape, (std::vector<int64_t>{3, 32}));
  }
}

TEST_F(NextnImportTest, UnknownTensorOfTheBlockIsRefusedByName) {
  GgufFile f = File(true);
  auto w = ContainerWriter::Create(dir_ / "m", "m", Config(), {});
  ASSERT_TRUE(w.ok());
  WriterSink sink(**w);
  auto s = ImportNextnFromGguf(f, Config(), *QuantPlan::Parse("keep", Config()), sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("blk.2.mystery.weight"), std::string::npos) << s;
}

TEST(NextnNamesTest, BothSourcesMapToTheSameSuffixes) {
  const std::pair<const char*, const char*> pairs[] = {
      {"eh_proj.weight", "nextn.eh_proj.weight"},
      {"shared_head.head.weight", "nextn.shared_head_head.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
      // DeepSeek-V3 / Kimi K2 latent attention in the MTP layer
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
  };
  for (const auto& [hf, gguf] : pairs) {
    EXPECT_FALSE(NextnSuffixFromHuggingFace(hf).empty()) << hf;
    EXPECT_EQ(NextnSuffixFromHuggingFace(hf), NextnSuffixFromGguf(gguf)) << hf;
  }
  EXPECT_EQ(NextnSuffixFromGguf("post_attention_norm.weight"), "ffn_norm");
  EXPECT_EQ(NextnSuffixFromHuggingFace("mlp.experts.0.up_proj.weight"),
            "");  // stacked by the importer
  EXPECT_EQ(NextnSuffixFromGguf("nextn.unknown.weight"), "");
  // llama.cpp's newer deepseek2 layout splits kv_b in two.
  EXPECT_EQ(NextnSuffixFromGguf("attn_k_b.weight"), "attn_k_b");
  EXPECT_EQ(NextnSuffixFromGguf("attn_v_b.weight"), "attn_v_b");
}

}  // namespace
}  // namespace colibri::model

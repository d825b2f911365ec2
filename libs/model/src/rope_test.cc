#include "colibri/model/rope.h"

#include <cmath>

#include "colibri/model/model_config.h"
#include "gtest/gtest.h"

namespace colibri::model {
namespace {

using nlohmann::json;

TEST(RopeTable, UnscaledIsThePowerSeries) {
  const RopeTable t = MakeRopeTable(10000.0, 8, RopeScaling{});
  ASSERT_EQ(t.inv_freq.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(t.inv_freq[static_cast<size_t>(i)], std::pow(10000.0, -2.0 * i / 8));
  EXPECT_EQ(t.mscale, 1.0);
}

TEST(RopeTable, LinearDividesEveryFrequency) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLinear;
  s.factor = 4.0;
  const RopeTable t = MakeRopeTable(10000.0, 8, s);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(t.inv_freq[static_cast<size_t>(i)], std::pow(10000.0, -2.0 * i / 8) / 4.0);
  }
  EXPECT_EQ(t.mscale, 1.0);
}

// Values from an independent numpy evaluation of the Hugging Face YaRN equations.
TEST(RopeTable, YarnTruncatedMatchesTheDeepSeekShape) {
  RopeScaling s;
  s.type = RopeScaling::Type::kYarn;
  s.factor = 40;
  s.original_context = 4096;
  const double want[] = {1,
                         0.31622776601683794,
                         0.10000000000000001,
                         0.023914724805023366,
                         0.0051250000000000002,
                         0.00084986212117025206,
                         2.5000000000000001e-05,
                         7.9056941504209488e-06};
  const RopeTable t = MakeRopeTable(10000.0, 16, s);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(t.inv_freq[i], want[i], 1e-15 * want[i] + 1e-18) << i;
  EXPECT_NEAR(t.mscale, 0.1 * std::log(40.0) + 1.0, 1e-15);
  // DeepSeek's mscale == mscale_all_dim: cos and sin are not scaled.
  s.mscale = s.mscale_all_dim = 1.0;
  EXPECT_DOUBLE_EQ(MakeRopeTable(10000.0, 16, s).mscale, 1.0);
  s.mscale_all_dim = 0.707;
  EXPECT_NEAR(MakeRopeTable(10000.0, 16, s).mscale, YarnMscale(40, 1.0) / YarnMscale(40, 0.707),
              1e-15);
  s.attention_factor = 1.5;
  EXPECT_DOUBLE_EQ(MakeRopeTable(10000.0, 16, s).mscale, 1.5);
}

TEST(RopeTable, YarnUntruncatedMatchesTheGptOssShape) {
  RopeScaling s;
  s.type = RopeScaling::Type::kYarn;
  s.factor = 32;
  s.original_context = 4096;
  s.truncate = false;
  const RopeTable t = MakeRopeTable(150000.0, 64, s);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  const std::pair<size_t, double> want[] = {{0, 1.0},
                                            {7, 0.073744568210260819},
                                            {8, 0.050813274815461475},
                                            {9, 0.031705696184663769},
                                            {17, 0.00012931870124506317},
                                            {18, 3.8308812373753384e-05},
                                            {31, 3.0235114281192144e-07}};
  for (auto [i, v] : want) EXPECT_NEAR(t.inv_freq[i], v, 1e-14 * v) << i;
  // Rounding the range would change the ramp's ends.
  s.truncate = true;
  EXPECT_GT(std::abs(MakeRopeTable(150000.0, 64, s).inv_freq[9] - t.inv_freq[9]),
            1e-3 * t.inv_freq[9]);
}

TEST(RopeScaling, HuggingFaceYarnAndLinearParse) {
  auto s = RopeScalingFromHuggingFace(json{{"type", "yarn"},
                                           {"factor", 40},
                                           {"original_max_position_embeddings", 4096},
                                           {"beta_fast", 32},
                                           {"beta_slow", 1},
                                           {"mscale", 1.0},
                                           {"mscale_all_dim", 1.0}},
                                      163840, "config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->type, RopeScaling::Type::kYarn);
  EXPECT_EQ(s->factor, 40);
  EXPECT_EQ(s->original_context, 4096);
  EXPECT_EQ(s->mscale_all_dim, 1.0);
  EXPECT_TRUE(s->truncate);
  s = RopeScalingFromHuggingFace(json{{"rope_type", "yarn"}, {"factor", 32}, {"truncate", false}},
                                 131072, "c");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->truncate);
  EXPECT_EQ(s->original_context, 131072);  // none given: max_position_embeddings
  s = RopeScalingFromHuggingFace(json{{"type", "linear"}, {"factor", 2.0}}, 4096, "c");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->type, RopeScaling::Type::kLinear);
  s = RopeScalingFromHuggingFace(json{{"rope_type", "default"}}, 4096, "c");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->type, RopeScaling::Type::kNone);
}

TEST(RopeScaling, HuggingFaceRefusalsNameTheProblem) {
  const std::pair<json, const char*> bad[] = {
      {json{{"type", "dynamic"}, {"factor", 2.0}}, "'dynamic' is not supported"},
      {json{{"rope_type", "longrope"}, {"factor", 2.0}}, "'longrope'"},
      {json{{"type", "yarn"}}, "needs a numeric 'factor'"},
      {json{{"type", "yarn"}, {"factor", -1.0}}, "factor must be a positive"},
      {json{{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0}}, "beta_fast"},
      {json{{"type", 3}}, "must be a string"},
      {json::array(), "must be an object"},
  };
  for (const auto& [j, msg] : bad) {
    auto s = RopeScalingFromHuggingFace(j, 4096, "config.json");
    ASSERT_FALSE(s.ok()) << j.dump();
    EXPECT_NE(s.status().message().find(msg), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("config.json"), std::string::npos) << s.status();
  }
}

TEST(RopeScaling, ManifestRoundTrip) {
  RopeScaling s;
  s.type = RopeScaling::Type::kYarn;
  s.factor = 32;
  s.original_context = 4096;
  s.beta_fast = 16;
  s.mscale = 0.5;
  s.mscale_all_dim = 0.25;
  s.attention_factor = 1.1;
  s.truncate = false;
  auto back = RopeScalingFromJson(RopeScalingToJson(s), "manifest");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  RopeScaling linear;
  linear.type = RopeScaling::Type::kLinear;
  linear.factor = 3;
  EXPECT_EQ(*RopeScalingFromJson(RopeScalingToJson(linear), "m"), linear);
  EXPECT_EQ(*RopeScalingFromJson(RopeScalingToJson(RopeScaling{}), "m"), RopeScaling{});
  EXPECT_FALSE(RopeScalingFromJson(json{{"type", "yarn"}, {"factor", 4.0}}, "m")
                   .ok());  // no original context
  EXPECT_FALSE(RopeScalingFromJson(json{{"rope_type", "ntk"}}, "m").ok());
}

TEST(ModelConfigRope, PartialRotaryAndScaleRoundTripThroughTheManifest) {
  json hf = {
      {"model_type", "qwen3_moe"},
      {"hidden_size", 64},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 32},
      {"num_experts", 8},
      {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 32},
      {"vocab_size", 512},
      {"max_position_embeddings", 32768},
      {"partial_rotary_factor", 0.5},
      {"rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_dims, 16);
  EXPECT_EQ(c->rotary_dims(), 16);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c->rope_scaling.original_context, 8192);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 1.0 / std::sqrt(32.0));
  ModelConfig m = *c;
  m.attention_scale = 0.125;
  auto back = ConfigFromJson(ConfigToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rope_dims, 16);
  EXPECT_EQ(back->rope_scaling, m.rope_scaling);
  EXPECT_EQ(back->softmax_scale(), 0.125);
  hf["partial_rotary_factor"] = 1.5;
  EXPECT_FALSE(ConfigFromHuggingFace(hf).ok());
  m.rope_dims = 33;
  EXPECT_FALSE(m.Validate().ok());
}

}  // namespace
}  // namespace colibri::model

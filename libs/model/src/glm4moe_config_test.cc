// GLM-4.5 configs from both sources: config.json of Glm4MoeForCausalLM and glm4moe GGUF metadata.
#include <gtest/gtest.h>

#include "colibri/model/convert.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/model/gguf_writer.h"
#include "colibri/model/model_config.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

using nlohmann::json;

// GLM-4.5-Air's config.json (zai-org/GLM-4.5-Air): the real keys and sizes.
json Glm45AirHf() {
  return json::parse(R"({
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "partial_rotary_factor": 0.5,
    "initializer_range": 0.02, "intermediate_size": 10944, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1408, "norm_topk_prob": true,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
    "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.54.0",
    "use_cache": true, "use_qk_norm": false, "vocab_size": 151552})");
}

TEST(Glm4MoeConfig, FromHuggingFace) {
  auto c = ConfigFromHuggingFace(Glm45AirHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGlm4Moe);
  EXPECT_EQ(c->n_layers, 46);
  EXPECT_EQ(c->nextn_layers, 1);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_dims, 64);
  EXPECT_EQ(c->rotary_dims(), 64);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalfSplit);
  EXPECT_EQ(c->n_experts, 128);
  EXPECT_EQ(c->expert_ffn, 1408);
  EXPECT_EQ(c->top_k, 8);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{151329, 151336, 151338}));
  EXPECT_EQ(c->router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c->router_bias);
  EXPECT_EQ(c->n_expert_groups, 1);
  EXPECT_EQ(c->topk_groups, 1);
  EXPECT_EQ(c->routed_scaling_factor, 1.0);
  EXPECT_EQ(c->dense_layers, (std::vector<int64_t>{0}));
  EXPECT_EQ(c->dense_ffn, 10944);
  EXPECT_EQ(c->shared_expert_ffn, 1408);
  EXPECT_FALSE(c->shared_expert_gated);
  EXPECT_EQ(c->n_moe_layers(), 45);
  // GLM-4.5 (355B) sets use_qk_norm; partial_rotary_factor defaults to 0.5 when absent.
  json hf = Glm45AirHf();
  hf["use_qk_norm"] = true;
  hf.erase("partial_rotary_factor");
  hf["n_group"] = 8;
  hf["topk_group"] = 4;
  hf["routed_scaling_factor"] = 2.5;
  hf["first_k_dense_replace"] = 3;
  c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(c->rope_dims, 64);
  EXPECT_EQ(c->n_expert_groups, 8);
  EXPECT_EQ(c->topk_groups, 4);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->dense_layers, (std::vector<int64_t>{0, 1, 2}));
  // The manifest form keeps every field.
  auto back = ConfigFromJson(ConfigToJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ConfigToJson(*back), ConfigToJson(*c));
  EXPECT_EQ(ArchitectureName(back->architecture), "glm4_moe");
}

TEST(Glm4MoeConfig, MissingKeysAreNamed) {
  for (const char* key : {"n_routed_experts", "moe_intermediate_size", "intermediate_size"}) {
    json hf = Glm45AirHf();
    hf.erase(key);
    auto c = ConfigFromHuggingFace(hf);
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos) << c.status();
  }
}

// A glm4moe GGUF as llama.cpp's converter writes GLM-4.5-Air's metadata (shapes shrunk: the
// config comes from the keys and a few tensors).
GgufFile GlmGguf(std::vector<uint8_t>* bytes, bool with_eot, uint32_t heads = 4) {
  GgufWriter w;
  const std::string a = "glm4moe.";
  EXPECT_TRUE(w.AddString("general.architecture", "glm4moe").ok());
  for (auto [k, v] :
       std::initializer_list<std::pair<const char*, uint32_t>>{{"block_count", 3},
                                                               {"context_length", 4096},
                                                               {"embedding_length", 64},
                                                               {"feed_forward_length", 128},
                                                               {"attention.head_count", heads},
                                                               {"attention.head_count_kv", 2},
                                                               {"attention.key_length", 32},
                                                               {"attention.value_length", 32},
                                                               {"rope.dimension_count", 16},
                                                               {"expert_count", 16},
                                                               {"expert_used_count", 4},
                                                               {"expert_feed_forward_length", 32},
                                                               {"expert_shared_count", 1},
                                                               {"leading_dense_block_count", 1},
                                                               {"expert_gating_func", 2},
                                                               {"nextn_predict_layers", 1}}) {
    EXPECT_TRUE(w.AddU32(a + k, v).ok());
  }
  EXPECT_TRUE(w.AddF32(a + "rope.freq_base", 1e6f).ok());
  EXPECT_TRUE(w.AddF32(a + "attention.layer_norm_rms_epsilon", 1e-5f).ok());
  EXPECT_TRUE(w.AddF32(a + "expert_weights_scale", 2.5f).ok());
  EXPECT_TRUE(w.AddU32("tokenizer.ggml.eos_token_id", 2).ok());
  if (with_eot) {
    EXPECT_TRUE(w.AddU32("tokenizer.ggml.eot_token_id", 5).ok());
    EXPECT_TRUE(w.AddU32("tokenizer.ggml.eom_token_id", 7).ok());
  }
  auto zeros = [](int64_t n) { return std::vector<uint8_t>(static_cast<size_t>(n) * 4, 0); };
  EXPECT_TRUE(w.AddTensor("token_embd.weight", {64, 100}, quant::DType::kF32, zeros(6400)).ok());
  EXPECT_TRUE(w.AddTensor("output.weight", {64, 100}, quant::DType::kF32, zeros(6400)).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.attn_q.bias", {128}, quant::DType::kF32, zeros(128)).ok());
  EXPECT_TRUE(w.AddTensor("blk.1.exp_probs_b.bias", {16}, quant::DType::kF32, zeros(16)).ok());
  *bytes = *w.Serialize();
  auto f = GgufFile::Parse(*bytes);
  EXPECT_TRUE(f.ok()) << f.status();
  return std::move(*f);
}

TEST(Glm4MoeConfig, FromGguf) {
  std::vector<uint8_t> bytes;
  GgufFile f = GlmGguf(&bytes, true);
  auto c = ConfigFromGguf(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGlm4Moe);
  EXPECT_EQ(c->n_layers, 2);  // block_count 3 holds the NextN block
  EXPECT_EQ(c->nextn_layers, 1);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->rope_dims, 16);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_EQ(c->expert_ffn, 32);
  EXPECT_EQ(c->vocab_size, 100);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 5, 7}));  // eos, end of turn, end of message
  EXPECT_EQ(c->router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c->router_bias);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->dense_layers, (std::vector<int64_t>{0}));
  EXPECT_EQ(c->dense_ffn, 128);
  EXPECT_EQ(c->shared_expert_ffn, 32);
  EXPECT_FALSE(c->shared_expert_gated);
  GgufFile plain = GlmGguf(&bytes, false);
  c = ConfigFromGguf(plain);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2}));
}

// Found by gguf_fuzz: zero heads divided the hidden size before anything checked it.
TEST(Glm4MoeConfig, ZeroHeadsIsAnError) {
  std::vector<uint8_t> bytes;
  GgufFile f = GlmGguf(&bytes, true, 0);
  auto c = ConfigFromGguf(f);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("attention.head_count is 0"), std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace colibri::model

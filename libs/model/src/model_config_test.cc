#include "colibri/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "colibri/core/file_util.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

using nlohmann::json;

// config.json files as tools/gen_tiny_model.py writes them (micro preset), i.e. with each
// family's real Hugging Face keys.
json MixtralHf() {
  return json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
    "max_position_embeddings": 4096, "num_attention_heads": 4, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "num_local_experts": 8,
    "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "float32", "transformers_version": "4.51.0", "use_cache": true,
    "vocab_size": 512})");
}

json Qwen2MoeHf() {
  return json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
    "attention_dropout": 0.0, "bos_token_id": 1, "decoder_sparse_step": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 256, "max_position_embeddings": 4096, "max_window_layers": 2,
    "mlp_only_layers": [], "moe_intermediate_size": 128, "norm_topk_prob": false,
    "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "output_router_logits": false,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 256, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "float32", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 512})");
}

json OlmoeHf() {
  return json::parse(R"({
    "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 1, "clip_qkv": null, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 128, "max_position_embeddings": 4096, "norm_topk_prob": false,
    "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_key_value_heads": 4, "output_router_logits": false,
    "pad_token_id": 0, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.01, "tie_word_embeddings": false, "torch_dtype": "float32",
    "use_cache": true, "vocab_size": 512})");
}

json Qwen3MoeHf() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
    "decoder_sparse_step": 1, "eos_token_id": 2, "head_dim": 32, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 256,
    "max_position_embeddings": 4096, "max_window_layers": 2, "mlp_only_layers": [],
    "moe_intermediate_size": 128, "norm_topk_prob": true, "num_attention_heads": 4,
    "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "output_router_logits": false, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "float32",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 512})");
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// gpt-oss-120b's config.json keys (layer count cut to 4).
json GptOssHf() {
  return json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true,
    "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 4, "num_key_value_heads": 8, "num_local_experts": 128, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
    "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": false,
    "vocab_size": 201088, "eos_token_id": 200002, "pad_token_id": 199999})");
}

TEST(ConfigFromHuggingFace, GptOss) {
  auto c = ConfigFromHuggingFace(GptOssHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGptOss);
  EXPECT_EQ(c->head_dim, 64);  // != hidden / heads (45)
  EXPECT_EQ(c->n_experts, 128);
  EXPECT_EQ(c->top_k, 4);
  EXPECT_EQ(c->expert_ffn, 2880);
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_TRUE(c->IsSliding(0));
  EXPECT_FALSE(c->IsSliding(1));
  EXPECT_TRUE(c->qkv_bias && c->attn_output_bias && c->attn_sinks && c->router_bias &&
              c->expert_bias);
  EXPECT_TRUE(c->softmax_after_topk);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_FALSE(c->rope_scaling.truncate);
  // The manifest keeps every field.
  auto back = ConfigFromJson(ConfigToJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ConfigToJson(*back), ConfigToJson(*c));
  // A layer type we do not know is refused, naming it.
  json bad = GptOssHf();
  bad["layer_types"][2] = "chunked_attention";
  EXPECT_EQ(ConfigFromHuggingFace(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = GptOssHf();
  bad["layer_types"].erase(0);
  EXPECT_EQ(ConfigFromHuggingFace(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigFromHuggingFace, Mixtral) {
  auto c = ConfigFromHuggingFace(MixtralHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMixtral);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->n_layers, 2);
  EXPECT_EQ(c->n_heads, 4);
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);  // hidden / heads: Mixtral configs have no head_dim
  EXPECT_EQ(c->expert_ffn, 128);
  EXPECT_EQ(c->n_experts, 8);
  EXPECT_EQ(c->top_k, 2);
  EXPECT_EQ(c->shared_expert_ffn, 0);
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->context_length, 4096);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalfSplit);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>({2}));
}

TEST(ConfigFromHuggingFace, Qwen2Moe) {
  auto c = ConfigFromHuggingFace(Qwen2MoeHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen2Moe);
  EXPECT_EQ(c->expert_ffn, 128);         // moe_intermediate_size, not intermediate_size
  EXPECT_EQ(c->shared_expert_ffn, 256);  // shared_expert_intermediate_size
  EXPECT_EQ(c->n_experts, 8);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
}

TEST(ConfigFromHuggingFace, Olmoe) {
  auto c = ConfigFromHuggingFace(OlmoeHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kOlmoe);
  EXPECT_EQ(c->expert_ffn, 128);  // OLMoE's intermediate_size is the expert size
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->qk_norm, QkNorm::kFull);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_expert_ffn, 0);
}

TEST(ConfigFromHuggingFace, Qwen3Moe) {
  auto c = ConfigFromHuggingFace(Qwen3MoeHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(c->head_dim, 32);  // explicit: heads * head_dim != hidden
  EXPECT_EQ(c->expert_ffn, 128);
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_expert_ffn, 0);
}

TEST(ConfigFromHuggingFace, Qwen3MoeNormTopkDefaultsTrueAndAttentionBiasIsRead) {
  json hf = Qwen3MoeHf();
  hf.erase("norm_topk_prob");
  hf["attention_bias"] = true;
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->qkv_bias);
}

TEST(ConfigFromHuggingFace, OracleQwen3MoeCheckpointConfig) {
  const std::filesystem::path path = "../shared/oracle/qwen3moe/qwen3moe-micro-f32/config.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no peer oracle at " << path;
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status();
  auto c = ConfigFromHuggingFace(json::parse(*text));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->n_layers, 4);
  EXPECT_EQ(c->n_heads, 4);
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->expert_ffn, 64);
  EXPECT_EQ(c->n_experts, 8);
  EXPECT_EQ(c->top_k, 2);
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
}

TEST(ConfigFromHuggingFace, EosListAndMissingKvHeads) {
  json hf = MixtralHf();
  hf["eos_token_id"] = json::array({2, 7});
  hf.erase("num_key_value_heads");
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>({2, 7}));
  EXPECT_EQ(c->n_kv_heads, 4);  // defaults to n_heads (no GQA)
}

TEST(ConfigFromHuggingFace, SlidingWindowAtLeastContextIsAccepted) {
  json hf = MixtralHf();
  hf["sliding_window"] = 4096;
  EXPECT_TRUE(ConfigFromHuggingFace(hf).ok());
}

TEST(ConfigFromHuggingFace, RefusesUnknownModelType) {
  json hf = MixtralHf();
  hf["model_type"] = "llama";
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(c.status(), "'llama'")) << c.status();
  EXPECT_TRUE(Contains(c.status(), "mixtral")) << c.status();

  hf.erase("model_type");
  c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status(), "model_type")) << c.status();

  EXPECT_FALSE(ConfigFromHuggingFace(json::array({1, 2})).ok());
}

TEST(ConfigFromHuggingFace, WrongJsonTypesAreErrorsNotExceptions) {
  json hf = MixtralHf();
  hf["model_type"] = 7;
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(c.status(), "model_type")) << c.status();

  hf = MixtralHf();
  hf["hidden_size"] = json::array({64});
  c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status(), "hidden_size")) << c.status();

  // Optional keys of the wrong type fall back to their defaults.
  hf = MixtralHf();
  hf["rope_theta"] = "big";
  hf["tie_word_embeddings"] = "yes";
  c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e4);
  EXPECT_FALSE(c->tie_word_embeddings);
}

struct Refusal {
  const char* name;
  json (*base)();
  const char* key;
  json value;
  const char* expect_in_message;
};

TEST(ConfigFromHuggingFace, RefusesUnsupportedOptionsNamingThem) {
  const Refusal cases[] = {
      {"mixtral sliding window", MixtralHf, "sliding_window", 1024, "sliding_window"},
      {"qwen2 sparse step 0", Qwen2MoeHf, "decoder_sparse_step", 0, "decoder_sparse_step"},
      {"qwen2 dense layer out of range", Qwen2MoeHf, "mlp_only_layers", json::array({2}),
       "mlp_only_layers"},
      {"qwen2 sliding window", Qwen2MoeHf, "use_sliding_window", true, "use_sliding_window"},
      {"qwen3 dense layers not a list", Qwen3MoeHf, "mlp_only_layers", 1, "mlp_only_layers"},
      {"qwen3 sliding window", Qwen3MoeHf, "use_sliding_window", true, "use_sliding_window"},
      {"qwen3 dynamic rope scaling", Qwen3MoeHf, "rope_scaling",
       json{{"rope_type", "dynamic"}, {"factor", 4.0}}, "rope_scaling type 'dynamic'"},
      {"olmoe clip_qkv", OlmoeHf, "clip_qkv", 8.0, "clip_qkv"},
      {"olmoe yarn without factor", OlmoeHf, "rope_scaling", json{{"type", "yarn"}},
       "rope_scaling"},
      {"mixtral longrope", MixtralHf, "rope_scaling", json{{"type", "longrope"}, {"factor", 2.0}},
       "rope_scaling type 'longrope'"},
  };
  for (const auto& rc : cases) {
    SCOPED_TRACE(rc.name);
    json hf = rc.base();
    hf[rc.key] = rc.value;
    auto c = ConfigFromHuggingFace(hf);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(c.status(), rc.expect_in_message)) << c.status();
    EXPECT_TRUE(Contains(c.status(), "model_type")) << c.status();
  }
}

TEST(ConfigFromHuggingFace, QwenDenseLayersFromSparseStepAndMlpOnlyLayers) {
  json hf = Qwen3MoeHf();
  hf["num_hidden_layers"] = 6;
  hf["decoder_sparse_step"] = 2;  // layers 1, 3, 5 are MoE
  hf["mlp_only_layers"] = json::array({3});
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dense_layers, (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(c->dense_ffn, 256);
  EXPECT_EQ(c->n_moe_layers(), 2);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_TRUE(c->IsMoeLayer(5));
  EXPECT_EQ(c->MoeLayerRank(1), 0);
  EXPECT_EQ(c->MoeLayerRank(5), 1);
  hf["mlp_only_layers"] = json::array({1, 3, 5});
  EXPECT_TRUE(Contains(ConfigFromHuggingFace(hf).status(), "every layer is dense"));
  // Default keys: every layer MoE; Qwen2-MoE's shared expert is gated, routing is softmax.
  c = ConfigFromHuggingFace(Qwen2MoeHf());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->dense_layers.empty());
  EXPECT_TRUE(c->shared_expert_gated);
  EXPECT_EQ(c->router_scoring, RouterScoring::kSoftmax);
  EXPECT_EQ(c->n_expert_groups, 1);
  EXPECT_EQ(c->routed_scaling_factor, 1.0);
}

TEST(ConfigFromHuggingFace, MissingOrMistypedRequiredKeyIsNamed) {
  const std::pair<json (*)(), const char*> required[] = {
      {MixtralHf, "num_local_experts"},
      {MixtralHf, "intermediate_size"},
      {MixtralHf, "hidden_size"},
      {MixtralHf, "num_hidden_layers"},
      {MixtralHf, "num_attention_heads"},
      {MixtralHf, "num_experts_per_tok"},
      {MixtralHf, "vocab_size"},
      {Qwen2MoeHf, "num_experts"},
      {Qwen2MoeHf, "moe_intermediate_size"},
      {Qwen2MoeHf, "shared_expert_intermediate_size"},
      {OlmoeHf, "intermediate_size"},
      {Qwen3MoeHf, "moe_intermediate_size"},
  };
  for (const auto& [base, key] : required) {
    SCOPED_TRACE(key);
    json hf = base();
    hf.erase(key);
    auto c = ConfigFromHuggingFace(hf);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(c.status(), key)) << c.status();
    EXPECT_TRUE(Contains(c.status(), "missing")) << c.status();

    hf = base();
    hf[key] = "64";
    c = ConfigFromHuggingFace(hf);
    ASSERT_FALSE(c.ok());
    EXPECT_TRUE(Contains(c.status(), key)) << c.status();
    EXPECT_TRUE(Contains(c.status(), "integer")) << c.status();
  }
}

TEST(ConfigFromHuggingFace, InconsistentValuesFailValidation) {
  json hf = MixtralHf();
  hf["num_experts_per_tok"] = 9;
  auto c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status(), "top_k")) << c.status();

  hf = MixtralHf();
  hf["num_key_value_heads"] = 3;
  c = ConfigFromHuggingFace(hf);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status(), "n_kv_heads")) << c.status();
}

TEST(ConfigJson, RoundTripsEveryField) {
  ModelConfig c;
  c.architecture = Architecture::kQwen2Moe;
  c.hidden_size = 96;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 24;
  c.expert_ffn = 160;
  c.n_experts = 12;
  c.top_k = 3;
  c.shared_expert_ffn = 320;
  c.vocab_size = 1000;
  c.context_length = 2048;
  c.rms_norm_eps = 3.5e-6;
  c.rope_theta = 12345.5;
  c.rope_style = RopeStyle::kInterleaved;
  c.qk_norm = QkNorm::kPerHead;
  c.qkv_bias = true;
  c.norm_topk_prob = false;
  c.tie_word_embeddings = true;
  c.bos_token_id = 5;
  c.eos_token_ids = {6, 7};
  c.shared_expert_gated = true;
  c.router_scoring = RouterScoring::kSigmoid;
  c.router_bias = true;
  c.n_expert_groups = 4;
  c.topk_groups = 2;
  c.group_scoring = GroupScoring::kMax;
  c.routed_scaling_factor = 2.5;
  c.dense_layers = {0, 2};
  c.dense_ffn = 200;
  const json j = ConfigToJson(c);
  EXPECT_EQ(j["architecture"], "qwen2_moe");
  EXPECT_EQ(j["rope_style"], "interleaved");
  EXPECT_EQ(j["qk_norm"], "per_head");
  auto back = ConfigFromJson(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->architecture, c.architecture);
  EXPECT_EQ(back->hidden_size, c.hidden_size);
  EXPECT_EQ(back->n_layers, c.n_layers);
  EXPECT_EQ(back->n_heads, c.n_heads);
  EXPECT_EQ(back->n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(back->head_dim, c.head_dim);
  EXPECT_EQ(back->expert_ffn, c.expert_ffn);
  EXPECT_EQ(back->n_experts, c.n_experts);
  EXPECT_EQ(back->top_k, c.top_k);
  EXPECT_EQ(back->shared_expert_ffn, c.shared_expert_ffn);
  EXPECT_EQ(back->vocab_size, c.vocab_size);
  EXPECT_EQ(back->context_length, c.context_length);
  EXPECT_DOUBLE_EQ(back->rms_norm_eps, c.rms_norm_eps);
  EXPECT_DOUBLE_EQ(back->rope_theta, c.rope_theta);
  EXPECT_EQ(back->rope_style, c.rope_style);
  EXPECT_EQ(back->qk_norm, c.qk_norm);
  EXPECT_EQ(back->qkv_bias, c.qkv_bias);
  EXPECT_EQ(back->norm_topk_prob, c.norm_topk_prob);
  EXPECT_EQ(back->tie_word_embeddings, c.tie_word_embeddings);
  EXPECT_EQ(back->bos_token_id, c.bos_token_id);
  EXPECT_EQ(back->eos_token_ids, c.eos_token_ids);
  EXPECT_EQ(back->shared_expert_gated, c.shared_expert_gated);
  EXPECT_EQ(back->router_scoring, c.router_scoring);
  EXPECT_EQ(back->router_bias, c.router_bias);
  EXPECT_EQ(back->n_expert_groups, c.n_expert_groups);
  EXPECT_EQ(back->topk_groups, c.topk_groups);
  EXPECT_EQ(back->group_scoring, c.group_scoring);
  EXPECT_DOUBLE_EQ(back->routed_scaling_factor, c.routed_scaling_factor);
  EXPECT_EQ(back->dense_layers, c.dense_layers);
  EXPECT_EQ(back->dense_ffn, c.dense_ffn);
}

TEST(ConfigJson, ManifestsWithoutRoutingKeysKeepTheirMeaning) {
  json j = ConfigToJson(ConfigFromHuggingFace(Qwen2MoeHf()).value());
  for (const char* key :
       {"shared_expert_gated", "router_scoring", "router_bias", "n_expert_groups", "topk_groups",
        "group_scoring", "routed_scaling_factor", "dense_layers", "dense_ffn"}) {
    j.erase(key);
  }
  auto c = ConfigFromJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->shared_expert_gated);
  EXPECT_EQ(c->router_scoring, RouterScoring::kSoftmax);
  EXPECT_FALSE(c->router_bias);
  EXPECT_EQ(c->n_expert_groups, 1);
  EXPECT_EQ(c->routed_scaling_factor, 1.0);
  EXPECT_TRUE(c->dense_layers.empty());
}

TEST(ConfigJson, RoundTripsEachFamilyFromHuggingFace) {
  for (json (*base)() : {MixtralHf, Qwen2MoeHf, OlmoeHf, Qwen3MoeHf}) {
    auto c = ConfigFromHuggingFace(base());
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(std::string(ArchitectureName(c->architecture)));
    auto back = ConfigFromJson(ConfigToJson(*c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ConfigToJson(*back), ConfigToJson(*c));
  }
}

TEST(ConfigJson, RejectsBadManifestConfigs) {
  ModelConfig ok;
  ok.hidden_size = 64;
  ok.n_layers = 2;
  ok.n_heads = 4;
  ok.n_kv_heads = 2;
  ok.head_dim = 16;
  ok.expert_ffn = 128;
  ok.n_experts = 8;
  ok.top_k = 2;
  ok.vocab_size = 512;
  ASSERT_TRUE(ConfigFromJson(ConfigToJson(ok)).ok());

  json j = ConfigToJson(ok);
  j["architecture"] = "gpt2";
  auto r = ConfigFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "'gpt2'")) << r.status();

  j = ConfigToJson(ok);
  j["rope_style"] = "sideways";
  r = ConfigFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "rope_style")) << r.status();

  j = ConfigToJson(ok);
  j["qk_norm"] = "sometimes";
  r = ConfigFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "qk_norm")) << r.status();

  j = ConfigToJson(ok);
  j.erase("n_experts");
  r = ConfigFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "n_experts")) << r.status();

  j = ConfigToJson(ok);
  j["head_dim"] = 16.5;
  r = ConfigFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "head_dim")) << r.status();

  EXPECT_FALSE(ConfigFromJson(json("not an object")).ok());

  // Wrong JSON types: errors naming the key, never exceptions.
  for (const char* key : {"architecture", "rope_style", "qk_norm"}) {
    SCOPED_TRACE(key);
    j = ConfigToJson(ok);
    j[key] = 3;
    r = ConfigFromJson(j);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(r.status(), key)) << r.status();
  }
}

ModelConfig ValidConfig() {
  ModelConfig c;
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.expert_ffn = 128;
  c.n_experts = 8;
  c.top_k = 2;
  c.vocab_size = 512;
  return c;
}

TEST(ModelConfigValidate, AcceptsAValidConfig) { EXPECT_TRUE(ValidConfig().Validate().ok()); }

TEST(ModelConfigValidate, EachOutOfRangeFieldIsNamed) {
  struct Field {
    const char* name;
    int64_t ModelConfig::*member;
  };
  const Field fields[] = {
      {"hidden_size", &ModelConfig::hidden_size}, {"n_layers", &ModelConfig::n_layers},
      {"n_heads", &ModelConfig::n_heads},         {"n_kv_heads", &ModelConfig::n_kv_heads},
      {"head_dim", &ModelConfig::head_dim},       {"expert_ffn", &ModelConfig::expert_ffn},
      {"n_experts", &ModelConfig::n_experts},     {"top_k", &ModelConfig::top_k},
      {"vocab_size", &ModelConfig::vocab_size},   {"context_length", &ModelConfig::context_length},
  };
  for (const auto& f : fields) {
    for (int64_t bad : {int64_t{0}, int64_t{-1}, (int64_t{1} << 24) + 1}) {
      SCOPED_TRACE(std::string(f.name) + " = " + std::to_string(bad));
      ModelConfig c = ValidConfig();
      c.*f.member = bad;
      absl::Status s = c.Validate();
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(Contains(s, f.name)) << s;
    }
  }
}

TEST(ModelConfigValidate, ConsistencyErrors) {
  ModelConfig c = ValidConfig();
  // Found by gguf_fuzz: each count in range, their product sized a 2^48-entry table.
  c.n_layers = 1 << 16;
  c.n_experts = 1 << 16;
  absl::Status blocks = c.Validate();
  ASSERT_FALSE(blocks.ok());
  EXPECT_TRUE(Contains(blocks, "expert blocks is out of range")) << blocks;
  c = ValidConfig();
  c.n_kv_heads = 3;
  absl::Status s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "n_kv_heads")) << s;

  c = ValidConfig();
  c.head_dim = 15;
  s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "head_dim")) << s;

  c = ValidConfig();
  c.top_k = 9;
  s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "top_k")) << s;

  c = ValidConfig();
  c.shared_expert_ffn = -1;
  s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s, "shared_expert_ffn")) << s;

  c = ValidConfig();
  c.rms_norm_eps = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = ValidConfig();
  c.rope_theta = -1;
  EXPECT_FALSE(c.Validate().ok());
  c = ValidConfig();
  c.rms_norm_eps = std::nan("");
  EXPECT_FALSE(c.Validate().ok());
}

TEST(Architecture, NamesRoundTrip) {
  for (Architecture a : {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kOlmoe,
                         Architecture::kQwen3Moe}) {
    auto back = ParseArchitecture(ArchitectureName(a));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, a);
  }
  EXPECT_EQ(ArchitectureName(Architecture::kQwen3Moe), "qwen3_moe");
  auto bad = ParseArchitecture("deepseek");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status(), "deepseek"));
}

TEST(ModelConfigValidate, RoutingAndLayerMixErrorsNameTheField) {
  const std::pair<void (*)(ModelConfig&), const char*> cases[] = {
      {[](ModelConfig& c) { c.n_expert_groups = 3; }, "n_expert_groups"},
      {[](ModelConfig& c) {
         c.n_expert_groups = 4;
         c.topk_groups = 5;
       },
       "topk_groups"},
      {[](ModelConfig& c) {
         c.n_expert_groups = 8;
         c.topk_groups = 2;
       },
       "two best experts"},
      {[](ModelConfig& c) {
         c.n_expert_groups = 4;
         c.topk_groups = 1;
         c.top_k = 3;
       },
       "exceeds the experts"},
      {[](ModelConfig& c) { c.routed_scaling_factor = 0; }, "routed_scaling_factor"},
      {[](ModelConfig& c) {
         c.dense_layers = {1, 0};
         c.dense_ffn = 8;
       },
       "dense_layers"},
      {[](ModelConfig& c) { c.dense_layers = {0}; }, "dense_ffn"},
      {[](ModelConfig& c) {
         c.shared_expert_gated = true;
         c.shared_expert_ffn = 0;
       },
       "shared_expert_gated"},
  };
  for (const auto& [mutate, field] : cases) {
    SCOPED_TRACE(field);
    ModelConfig c = ValidConfig();
    mutate(c);
    const absl::Status s = c.Validate();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s, field)) << s;
  }
}

}  // namespace
}  // namespace colibri::model

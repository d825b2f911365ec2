#include "colibri/plan/kv_limit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "colibri/engine/engine.h"

namespace colibri::plan {
namespace {

TEST(KvLimit, FullContextsForTheBatchWhenTheyFit) {
  KvLimitInputs in;
  in.kv_bytes_per_token = 1024;
  in.context_length = 4096;
  in.max_batch = 4;
  in.memory_free = 64ull << 30;
  in.memory_reserved = 8ull << 30;
  const KvLimit l = DefaultKvCacheLimit(in);
  EXPECT_EQ(l.bytes, 4ull * 4096 * 1024);
  EXPECT_NE(l.explanation.find("4 sequences x 4096 tokens"), std::string::npos) << l.explanation;
}

TEST(KvLimit, CappedByHalfTheHostMemoryLeftOrNinetyPercentOfTheDevice) {
  KvLimitInputs in;
  in.kv_bytes_per_token = 256 << 10;  // a large model in F32
  in.context_length = 32768;
  in.max_batch = 16;  // 128 GiB wanted
  in.memory_free = 40ull << 30;
  in.memory_reserved = 10ull << 30;
  EXPECT_EQ(DefaultKvCacheLimit(in).bytes, 15ull << 30);
  EXPECT_NE(DefaultKvCacheLimit(in).explanation.find("half of MemAvailable"), std::string::npos);
  in.device = true;
  EXPECT_EQ(DefaultKvCacheLimit(in).bytes, (30ull << 30) / 10 * 9);
  // Nothing left: still bounded (never 0, which would mean unbounded).
  in.memory_reserved = 50ull << 30;
  EXPECT_EQ(DefaultKvCacheLimit(in).bytes, 256u << 10);
}

TEST(KvLimit, EngineBytesPerTokenIsKAndVOfEveryLayer) {
  model::ModelConfig c;
  c.n_layers = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  EXPECT_EQ(engine::KvBytesPerToken(c), 32u * 2 * 8 * 128 * 4);
}

TEST(KvLimit, SlidingLayersHoldARingNotEveryToken) {
  // gpt-oss-120b: 36 layers alternating sliding (window 128) and full, 8 KV heads of 64.
  model::ModelConfig c;
  c.n_layers = 36;
  c.n_kv_heads = 8;
  c.head_dim = 64;
  c.context_length = 131072;
  c.sliding_window = 128;
  for (int l = 0; l < 36; ++l) c.sliding_layers.push_back(l % 2 == 0);
  const uint64_t row = 2 * 8 * 64 * 4;  // K and V of one layer and token
  EXPECT_EQ(engine::KvBytesPerToken(c), 18 * row);
  EXPECT_EQ(engine::KvRingBytes(c, 512), 18 * (127 + 512) * row);
  EXPECT_EQ(engine::KvRingBytes(c, 1), 18 * 128 * row);
  c.sliding_layers.clear();
  EXPECT_EQ(engine::KvBytesPerToken(c), 36 * row);
  EXPECT_EQ(engine::KvRingBytes(c, 512), 0u);
  // The default limit counts each sequence's rings once, not per token.
  KvLimitInputs in;
  in.kv_bytes_per_token = 1000;
  in.kv_ring_bytes = 50000;
  in.context_length = 100;
  in.max_batch = 2;
  in.memory_free = uint64_t{1} << 40;
  const KvLimit limit = DefaultKvCacheLimit(in);
  EXPECT_EQ(limit.bytes, 2u * (100 * 1000 + 50000));
  EXPECT_NE(limit.explanation.find("sliding-window rings"), std::string::npos) << limit.explanation;
}

TEST(KvLimit, LatentAttentionCachesTheLatentOnly) {
  // DeepSeek-V3: 61 layers, 128 heads, q/k head 192 (128 + 64 RoPE), v head 128, latent 512 + 64.
  model::ModelConfig c;
  c.n_layers = 61;
  c.n_heads = c.n_kv_heads = 128;
  c.head_dim = 192;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  EXPECT_EQ(engine::KvBytesPerToken(c), 61u * 576 * 4);
  // Decompressed, the same tokens would hold K (128 x 192) and V (128 x 128) per layer: 71x more.
  const uint64_t decompressed = 61u * 128 * (192 + 128) * 4;
  EXPECT_EQ(decompressed / engine::KvBytesPerToken(c), 71u);
}

}  // namespace
}  // namespace colibri::plan

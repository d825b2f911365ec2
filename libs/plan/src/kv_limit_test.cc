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
  in.max_batch = 16;                  // 128 GiB wanted
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

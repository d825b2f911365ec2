#include "kv_limit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "cache_flags.h"
#include "colibri/core/status.h"
#include "colibri/engine/engine.h"

namespace colibri::compute {
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

TEST(KvLimit, MemAvailableFromMeminfo) {
  const std::string path = ::testing::TempDir() + "meminfo_" + std::to_string(::getpid());
  {
    std::ofstream(path) << "MemTotal:       16318420 kB\nMemFree:         1000000 kB\n"
                           "MemAvailable:    8000000 kB\nBuffers:          100 kB\n";
  }
  auto a = HostMemAvailable(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, 8000000ull * 1024);
  { std::ofstream(path) << "MemTotal: 5 kB\n"; }
  EXPECT_EQ(HostMemAvailable(path).status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
  auto real = HostMemAvailable();
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_GT(*real, 0u);
}

// --kv-cache-limit as the three binaries parse it: auto by default, 0 the explicit opt-out.
absl::StatusOr<uint64_t> ParsedKvLimit(std::vector<std::string> args) {
  CLI::App app;
  CacheFlags flags;
  AddCacheFlags(&app, &flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  ComputeNodeOptions o;
  RETURN_IF_ERROR(ApplyCacheFlags(flags, &o));
  return o.kv_cache_limit;
}

TEST(KvLimit, FlagDefaultsToAutoAndZeroStaysUnbounded) {
  EXPECT_EQ(*ParsedKvLimit({}), ComputeNodeOptions::kAutoKvLimit);
  EXPECT_EQ(*ParsedKvLimit({"--kv-cache-limit", "auto"}), ComputeNodeOptions::kAutoKvLimit);
  EXPECT_EQ(*ParsedKvLimit({"--kv-cache-limit", "0"}), 0u);
  EXPECT_EQ(*ParsedKvLimit({"--kv-cache-limit", "2G"}), 2ull << 30);
  auto bad = ParsedKvLimit({"--kv-cache-limit", "lots"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--kv-cache-limit"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace colibri::compute

#include "node_flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "colibri/core/status.h"

namespace colibri::compute {
namespace {

// --kv-cache-limit as the three binaries parse it: auto by default, 0 the explicit opt-out.
absl::StatusOr<uint64_t> ParsedKvLimit(std::vector<std::string> args) {
  CLI::App app;
  NodeFlags flags;
  AddNodeFlags(&app, &flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  ASSIGN_OR_RETURN(ComputeNodeOptions o, ResolveNodeFlags(flags));
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

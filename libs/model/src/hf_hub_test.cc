#include "colibri/model/hf_hub.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;

class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("hub_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    entry_ = root_ / "hf_home" / "hub" / "models--Org--Tiny-MoE";
    fs::create_directories(entry_ / "snapshots" / "aaa111");
    fs::create_directories(entry_ / "snapshots" / "bbb222");
    fs::create_directories(entry_ / "refs");
    std::ofstream(entry_ / "refs" / "main") << "bbb222";
    std::ofstream(entry_ / "snapshots" / "bbb222" / "config.json") << "{}";
    env_.hf_home = (root_ / "hf_home").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_, entry_;
  HubEnvironment env_;
};

TEST_F(HubCache, RepoIdResolvesToTheSnapshotMainPointsAt) {
  auto p = ResolveModelInput("Org/Tiny-MoE", env_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, entry_ / "snapshots" / "bbb222");
  // The entry directory itself resolves the same way.
  EXPECT_EQ(*ResolveModelInput(entry_.string(), env_), entry_ / "snapshots" / "bbb222");
}

TEST_F(HubCache, CacheDirFollowsTheEnvironment) {
  const HubEnvironment both{.hf_hub_cache = "/x/hub", .hf_home = "/y"};
  const HubEnvironment home_only{.hf_home = "/y"};
  const HubEnvironment user{.home = "/home/u"};
  EXPECT_EQ(both.CacheDir(), fs::path("/x/hub"));
  EXPECT_EQ(home_only.CacheDir(), fs::path("/y/hub"));
  EXPECT_EQ(user.CacheDir(), fs::path("/home/u/.cache/huggingface/hub"));
  HubEnvironment direct{.hf_hub_cache = (root_ / "hf_home" / "hub").string()};
  EXPECT_TRUE(ResolveModelInput("Org/Tiny-MoE", direct).ok());
}

TEST_F(HubCache, AmbiguousOrMissingSnapshotsAreExplained) {
  fs::remove(entry_ / "refs" / "main");
  auto two = ResolveModelInput("Org/Tiny-MoE", env_);
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(two.status().message().find("2 snapshots (aaa111, bbb222)"), std::string::npos)
      << two.status();
  fs::remove_all(entry_ / "snapshots" / "aaa111");
  EXPECT_EQ(*ResolveModelInput("Org/Tiny-MoE", env_), entry_ / "snapshots" / "bbb222");
  fs::remove_all(entry_ / "snapshots" / "bbb222");
  EXPECT_NE(ResolveModelInput("Org/Tiny-MoE", env_).status().message().find("has no snapshot"),
            std::string::npos);
}

TEST_F(HubCache, PathsAndUnknownRepos) {
  const fs::path plain = root_ / "plain";
  fs::create_directories(plain);
  EXPECT_EQ(*ResolveModelInput(plain.string(), env_), plain);
  auto missing = ResolveModelInput("Org/Other", env_);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("huggingface-cli download Org/Other"),
            std::string::npos);
  EXPECT_NE(missing.status().message().find("models--Org--Other"), std::string::npos);
  EXPECT_EQ(ResolveModelInput("no/such/path", env_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ResolveModelInput("../colibri-hub-test-no-such-dir-4f1c", env_).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace colibri::model

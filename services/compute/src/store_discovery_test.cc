#include "store_discovery.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "gtest/gtest.h"

namespace colibri::compute {
namespace {

// A resolver whose answers the test sets; it records the names it was asked for.
class FakeDns {
 public:
  void Set(const std::string& host, absl::StatusOr<std::vector<std::string>> answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_.insert_or_assign(host, std::move(answer));
  }
  HostResolver resolver() {
    return [this](const std::string& host) -> absl::StatusOr<std::vector<std::string>> {
      std::lock_guard<std::mutex> lock(mu_);
      asked_.push_back(host);
      auto it = answers_.find(host);
      if (it == answers_.end()) return absl::NotFoundError("no such host " + host);
      return it->second;
    };
  }
  std::vector<std::string> asked() {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, absl::StatusOr<std::vector<std::string>>> answers_;
  std::vector<std::string> asked_;
};

TEST(StoreDiscoveryTest, AddsExactlyTheNewTargetsOnEachPoll) {
  FakeDns dns;
  std::vector<std::string> added;
  StoreDiscovery d({{"expert-store", 50051}}, dns.resolver(),
                   [&](const std::string& t) { added.push_back(t); });

  dns.Set("expert-store", std::vector<std::string>{"10.89.0.2", "10.89.0.3"});
  auto r1 = d.Poll();
  EXPECT_EQ(r1.added, (std::vector<std::string>{"10.89.0.2:50051", "10.89.0.3:50051"}));
  EXPECT_TRUE(r1.vanished.empty());

  // Same answer in another order: nothing new.
  dns.Set("expert-store", std::vector<std::string>{"10.89.0.3", "10.89.0.2"});
  EXPECT_TRUE(d.Poll().added.empty());

  // Scaled from 2 to 3 replicas: only the third is added.
  dns.Set("expert-store", std::vector<std::string>{"10.89.0.3", "10.89.0.7", "10.89.0.2"});
  auto r3 = d.Poll();
  EXPECT_EQ(r3.added, (std::vector<std::string>{"10.89.0.7:50051"}));
  EXPECT_EQ(added,
            (std::vector<std::string>{"10.89.0.2:50051", "10.89.0.3:50051", "10.89.0.7:50051"}));
  EXPECT_EQ(d.Current(),
            (std::vector<std::string>{"10.89.0.3:50051", "10.89.0.7:50051", "10.89.0.2:50051"}));
  EXPECT_EQ(dns.asked(),
            (std::vector<std::string>{"expert-store", "expert-store", "expert-store"}));
}

TEST(StoreDiscoveryTest, VanishedTargetsAreReportedAndNotAddedAgain) {
  FakeDns dns;
  std::vector<std::string> added;
  StoreDiscovery d({{"store", 7000}}, dns.resolver(),
                   [&](const std::string& t) { added.push_back(t); });
  dns.Set("store", std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  d.Poll();
  dns.Set("store", std::vector<std::string>{"10.0.0.2"});
  auto r = d.Poll();
  EXPECT_TRUE(r.added.empty());
  EXPECT_EQ(r.vanished, (std::vector<std::string>{"10.0.0.1:7000"}));
  // Back again: the node still has it (probed while down), so it is not added twice.
  dns.Set("store", std::vector<std::string>{"10.0.0.2", "10.0.0.1"});
  r = d.Poll();
  EXPECT_TRUE(r.added.empty());
  EXPECT_TRUE(r.vanished.empty());
  EXPECT_EQ(added, (std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"}));
}

TEST(StoreDiscoveryTest, FailedResolutionAddsNothingAndVanishesNothing) {
  FakeDns dns;
  std::vector<std::string> added;
  StoreDiscovery d({{"store", 50051}}, dns.resolver(),
                   [&](const std::string& t) { added.push_back(t); });
  auto r = d.Poll();  // no replica yet: NotFound
  EXPECT_TRUE(r.added.empty());
  dns.Set("store", std::vector<std::string>{"10.0.0.5"});
  EXPECT_EQ(d.Poll().added, (std::vector<std::string>{"10.0.0.5:50051"}));
  dns.Set("store", absl::UnavailableError("temporary failure in name resolution"));
  r = d.Poll();
  EXPECT_TRUE(r.added.empty());
  EXPECT_TRUE(r.vanished.empty());
  EXPECT_EQ(d.Current(), (std::vector<std::string>{"10.0.0.5:50051"}));
  EXPECT_EQ(added, (std::vector<std::string>{"10.0.0.5:50051"}));
}

TEST(StoreDiscoveryTest, MarkedKnownTargetsAreNotAddedAndSeveralNamesMerge) {
  FakeDns dns;
  std::vector<std::string> added;
  StoreDiscovery d({{"a", 1}, {"b", 2}}, dns.resolver(),
                   [&](const std::string& t) { added.push_back(t); });
  d.MarkKnown({"10.0.0.1:1"});
  dns.Set("a", std::vector<std::string>{"10.0.0.1", "fd00::9"});
  dns.Set("b", std::vector<std::string>{"10.0.0.1"});
  EXPECT_EQ(d.Poll().added, (std::vector<std::string>{"[fd00::9]:1", "10.0.0.1:2"}));
  EXPECT_EQ(added, (std::vector<std::string>{"[fd00::9]:1", "10.0.0.1:2"}));
}

TEST(StoreDiscoveryTest, BackgroundPollingAddsANewReplica) {
  FakeDns dns;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> added;
  dns.Set("store", std::vector<std::string>{"10.0.0.1"});
  StoreDiscovery d({{"store", 50051}}, dns.resolver(), [&](const std::string& t) {
    std::lock_guard<std::mutex> lock(mu);
    added.push_back(t);
    cv.notify_all();
  });
  d.MarkKnown({"10.0.0.1:50051"});
  d.Start(std::chrono::milliseconds(10));
  dns.Set("store", std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !added.empty(); }));
  EXPECT_EQ(added, (std::vector<std::string>{"10.0.0.2:50051"}));
}

TEST(StoreDiscoveryTest, ResolvesLocalhostAndParsesNames) {
  auto addrs = ResolveHost("localhost");
  ASSERT_TRUE(addrs.ok()) << addrs.status();
  EXPECT_TRUE(std::find(addrs->begin(), addrs->end(), "127.0.0.1") != addrs->end() ||
              std::find(addrs->begin(), addrs->end(), "::1") != addrs->end());
  auto ip = ResolveHost("127.0.0.1");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, (std::vector<std::string>{"127.0.0.1"}));
  // NotFound, or Unavailable where the sandbox has no DNS server at all.
  const auto missing = ResolveHost("no-such-host.invalid").status().code();
  EXPECT_TRUE(missing == absl::StatusCode::kNotFound || missing == absl::StatusCode::kUnavailable)
      << missing;

  auto n = ParseDnsName("expert-store:50051");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->host, "expert-store");
  EXPECT_EQ(n->port, 50051);
  EXPECT_EQ(ParseDnsName("expert-store").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDnsName("expert-store:0").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDnsName("expert-store:7x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDnsName(":50051").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreTarget("10.1.2.3", 9), "10.1.2.3:9");
  EXPECT_EQ(StoreTarget("fd00::1", 9), "[fd00::1]:9");
}

}  // namespace
}  // namespace colibri::compute

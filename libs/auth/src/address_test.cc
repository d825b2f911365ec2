#include "colibri/auth/address.h"

#include "gtest/gtest.h"

namespace colibri::auth {
namespace {

TEST(ParseHostPort, Values) {
  auto a = ParseHostPort("compute:50052");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "compute");
  EXPECT_EQ(a->port, 50052);
  auto b = ParseHostPort("[::1]:0");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  for (const char* bad :
       {"", "host", ":80", "host:", "host:65536", "host:-1", "host:8x", "host:+80", "ho st:80",
        "host:80/evil", "a;b:80", "[::1]80", "[zz]:80", "host:123456"}) {
    EXPECT_EQ(ParseHostPort(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(IsLoopback, Values) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("128.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("compute"));
  EXPECT_FALSE(IsLoopbackHost("localhost.evil.com"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/tmp/x.sock"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50051"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1"));  // no port: not an address
}

TEST(ValidateTarget, Values) {
  EXPECT_TRUE(ValidateTarget("store-1.cluster.local:50051").ok());
  EXPECT_TRUE(ValidateTarget("10.1.2.3:1").ok());
  EXPECT_TRUE(ValidateTarget("unix:/run/colibri/store.sock").ok());
  EXPECT_FALSE(ValidateTarget("unix:relative.sock").ok());
  EXPECT_FALSE(ValidateTarget("unix:").ok());
  EXPECT_FALSE(ValidateTarget("store:0").ok());
  EXPECT_FALSE(ValidateTarget("store:70000").ok());
  EXPECT_FALSE(ValidateTarget("store").ok());
  EXPECT_FALSE(ValidateTarget("dns:///store:50051").ok());
  EXPECT_FALSE(ValidateTarget(std::string("sto\nre:50051")).ok());
}

TEST(AdminRoutesAllowed, OnlyBehindAKeyOrOnLoopback) {
  EXPECT_TRUE(AdminRoutesAllowed("metrics", "127.0.0.1", false));
  EXPECT_TRUE(AdminRoutesAllowed("metrics", "0.0.0.0", true));
  EXPECT_FALSE(AdminRoutesAllowed("metrics", "0.0.0.0", false));
  EXPECT_FALSE(AdminRoutesAllowed("metrics", "10.1.1.1", false));
}

}  // namespace
}  // namespace colibri::auth

#include "colibri/auth/transport.h"

#include "gtest/gtest.h"

namespace colibri::auth {
namespace {

TEST(Transport, PlaintextOnlyOnLoopbackAndUnixSockets) {
  auto t = Transport::Create({});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->tls());
  EXPECT_TRUE((*t)->ServerCredentials("127.0.0.1:0").ok());
  EXPECT_TRUE((*t)->ServerCredentials("[::1]:0").ok());
  EXPECT_TRUE((*t)->ServerCredentials("localhost:50051").ok());
  EXPECT_TRUE((*t)->ServerCredentials("unix:/tmp/colibri-test.sock").ok());
  auto any = (*t)->ServerCredentials("0.0.0.0:50051");
  EXPECT_EQ(any.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(any.status().message().find("--insecure"), std::string::npos) << any.status();
  EXPECT_EQ((*t)->ServerCredentials("10.0.0.5:50051").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*t)->Channel("127.0.0.1:50051").ok());
  EXPECT_TRUE((*t)->Channel("unix:/tmp/colibri-test.sock").ok());
  EXPECT_EQ((*t)->Channel("compute:50052").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Channel("10.0.0.5:50051").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Transport, InsecureAllowsPlaintextEverywhere) {
  auto t = Transport::Create({.insecure = true});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->ServerCredentials("0.0.0.0:50051").ok());
  EXPECT_TRUE((*t)->Channel("compute:50052").ok());
}

TEST(Transport, ChannelTargetsAreValidated) {
  auto t = Transport::Create({.insecure = true});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Channel("compute").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->Channel("compute:99999").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->ServerCredentials("garbage here:1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Transport, TlsNeedsAllThreeFiles) {
  auto t = Transport::Create({.cert = "/nonexistent/cert.pem", .key = "/nonexistent/key.pem"});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("--tls-ca"), std::string::npos) << t.status();
  auto missing = Transport::Create(
      {.cert = "/nonexistent/c.pem", .key = "/nonexistent/k.pem", .ca = "/nonexistent/a"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--tls-cert /nonexistent/c.pem"), std::string::npos)
      << missing.status();
}

}  // namespace
}  // namespace colibri::auth

#include "colibri/auth/http_auth.h"

#include "gtest/gtest.h"

namespace colibri::auth {
namespace {

TEST(AuthorizeHttp, PathsAndKeys) {
  auto keys = ApiKeys::Load({"k1", "k2"}, "");
  ASSERT_TRUE(keys.ok());
  HttpPolicy p{std::make_shared<const ApiKeys>(*keys), false};
  EXPECT_EQ(AuthorizeHttp(p, "/health", "").value_or("?"), "");
  EXPECT_EQ(AuthorizeHttp(p, "/metrics", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthorizeHttp(p, "/v1/models", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthorizeHttp(p, "/admin/stores", "Bearer k3").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthorizeHttp(p, "/admin/stores", "Bearer k2").value_or("?"), "key-2");
  // Only the exact /health path is open.
  EXPECT_EQ(AuthorizeHttp(p, "/health/", "").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthorizeHttp(p, "/healthz", "").status().code(), absl::StatusCode::kUnauthenticated);
  p.metrics_public = true;
  EXPECT_EQ(AuthorizeHttp(p, "/metrics", "").value_or("?"), "");
  EXPECT_EQ(AuthorizeHttp(p, "/admin/cache/clear", "").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthorizeHttp(HttpPolicy{}, "/admin/cache/clear", "").value_or("?"), "");
}

}  // namespace
}  // namespace colibri::auth

#include "server/access_control.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvserve::server {
namespace {

TEST(AccessControl, BearerMatchesOnlyTheExactKey) {
  EXPECT_TRUE(bearer_matches("Bearer sk-123", "sk-123"));
  EXPECT_TRUE(bearer_matches("bearer sk-123", "sk-123"));    // the scheme is case-insensitive
  EXPECT_TRUE(bearer_matches("Bearer  sk-123 ", "sk-123"));  // surrounding blanks
  EXPECT_FALSE(bearer_matches("Bearer sk-1234", "sk-123"));
  EXPECT_FALSE(bearer_matches("Bearer sk-12", "sk-123"));
  EXPECT_FALSE(bearer_matches("Bearer SK-123", "sk-123"));  // the key is case-sensitive
  EXPECT_FALSE(bearer_matches("Basic sk-123", "sk-123"));
  EXPECT_FALSE(bearer_matches("sk-123", "sk-123"));
  EXPECT_FALSE(bearer_matches("", "sk-123"));
  EXPECT_FALSE(bearer_matches("Bearer ", ""));  // no key configured matches nothing
}

TEST(AccessControl, ProbesAndMetricsNeedNoKey) {
  for (const char* open : {"/health", "/live", "/metrics"}) EXPECT_FALSE(route_needs_key(open)) << open;
  for (const char* closed :
       {"/generate", "/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize",
        "/cache/flush", "/cache/pin", "/cache/stats", "/health/x", "/"})
    EXPECT_TRUE(route_needs_key(closed)) << closed;
}

TEST(AccessControl, AllowedOrigins) {
  EXPECT_EQ(allowed_origin("", "https://a.com"), "");
  EXPECT_EQ(allowed_origin("*", "https://a.com"), "*");
  EXPECT_EQ(allowed_origin("*", ""), "");  // not a cross-origin request
  const std::string list = "https://a.com, http://localhost:3000";
  EXPECT_EQ(allowed_origin(list, "https://a.com"), "https://a.com");
  EXPECT_EQ(allowed_origin(list, "http://localhost:3000"), "http://localhost:3000");
  EXPECT_EQ(allowed_origin(list, "https://a.com.evil.example"), "");
  EXPECT_EQ(allowed_origin(list, "http://a.com"), "");
}

TEST(AccessControl, CorsOriginsValidation) {
  for (const char* ok : {"", "*", "https://a.com", "http://localhost:3000,https://b.example.org"})
    EXPECT_TRUE(validate_cors_origins(ok).ok()) << ok;
  for (const char* bad :
       {"a.com", "https://a.com/", "https://a.com/x", "https://", "://a.com", "https://a b.com"})
    EXPECT_FALSE(validate_cors_origins(bad).ok()) << bad;
}

TEST(AccessControl, ResolveApiKey) {
  EXPECT_EQ(*resolve_api_key("", ""), "");
  EXPECT_EQ(*resolve_api_key(" sk-1\n", ""), "sk-1");
  const std::string path = ::testing::TempDir() + "/kvs_api_key_test";
  std::ofstream(path) << "sk-from-file  \nsecond line ignored\n";
  EXPECT_EQ(*resolve_api_key("", path), "sk-from-file");
  EXPECT_FALSE(resolve_api_key("sk-1", path).ok());  // both: ambiguous
  std::ofstream(path) << "\n";
  EXPECT_FALSE(resolve_api_key("", path).ok());  // empty first line
  std::remove(path.c_str());
  auto missing = resolve_api_key("", path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace kvserve::server

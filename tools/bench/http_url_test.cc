#include "tools/bench/http_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::bench {
namespace {

using ::testing::HasSubstr;

TEST(HttpUrlTest, ParsesHostPortAndPath) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("http://127.0.0.1:9100/metrics");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9100);
  EXPECT_EQ(u->path, "/metrics");
  u = ParseHttpUrl("http://localhost");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/");
  u = ParseHttpUrl("http://[::1]:8000/v1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->path, "/v1");
}

TEST(HttpUrlTest, BadUrlsSayWhy) {
  const std::pair<const char*, const char*> cases[] = {
      {"https://h:1", "https is not supported"}, {"h:1", "expected http://"},
      {"http://:1/x", "no host"},                {"http://h:x", "bad port 'x'"},
      {"http://h:70000", "bad port"},            {"http://h:", "empty port"},
      {"http://[::1", "unclosed"},
  };
  for (const auto& [url, why] : cases) {
    absl::StatusOr<HttpUrl> u = ParseHttpUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_THAT(u.status().message(), HasSubstr(why)) << url;
    EXPECT_THAT(u.status().message(), HasSubstr(url));
  }
}

}  // namespace
}  // namespace folio::bench

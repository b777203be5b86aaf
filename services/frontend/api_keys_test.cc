#include "services/frontend/api_keys.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::frontend {
namespace {

using ::testing::HasSubstr;

TEST(ApiKeysTest, NoKeysAllowsEverything) {
  ApiKeys keys;
  EXPECT_FALSE(keys.enabled());
  EXPECT_TRUE(keys.Check(std::nullopt).ok());
  EXPECT_TRUE(keys.Check("Bearer whatever").ok());
}

TEST(ApiKeysTest, ChecksTheBearerKey) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Create({"k1", "k2"}, "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->Check("Bearer k1").ok());
  EXPECT_TRUE(keys->Check("bearer  k2 ").ok());
  const absl::Status missing = keys->Check(std::nullopt);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("missing API key"));
  EXPECT_THAT(keys->Check("Bearer k3").message(), HasSubstr("invalid API key"));
  EXPECT_THAT(keys->Check("Bearer k").message(), HasSubstr("invalid API key"));
  EXPECT_THAT(keys->Check("Basic k1").message(), HasSubstr("must be 'Bearer <key>'"));
  EXPECT_EQ(keys->Check("k1").code(), absl::StatusCode::kUnauthenticated);
}

TEST(ApiKeysTest, ReadsAKeyFile) {
  const std::string path = ::testing::TempDir() + "/api_keys.txt";
  {
    std::ofstream out(path);
    out << "# service keys\n\n  from-file  \nsecond\n";
  }
  absl::StatusOr<ApiKeys> keys = ApiKeys::Create({"flag-key"}, path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 3u);
  EXPECT_TRUE(keys->Check("Bearer from-file").ok());
  EXPECT_TRUE(keys->Check("Bearer second").ok());
  EXPECT_TRUE(keys->Check("Bearer flag-key").ok());
  EXPECT_FALSE(keys->Check("Bearer # service keys").ok());
  std::remove(path.c_str());
}

TEST(ApiKeysTest, BadKeysAndFilesAreErrors) {
  EXPECT_EQ(ApiKeys::Create({}, "/nonexistent/keys").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ApiKeys::Create({"has space"}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string path = ::testing::TempDir() + "/empty_keys.txt";
  { std::ofstream out(path); out << "# nothing\n"; }
  EXPECT_THAT(ApiKeys::Create({}, path).status().message(), HasSubstr("holds no key"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace folio::frontend

// TLS configuration: which flag sets go together, and unreadable or non-PEM files are
// InvalidArgument naming the file (the mTLS handshakes themselves are checked end to end
// by tests/http/tls_e2e_test.py).
#include "common/tls.h"

#include <fstream>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::HasSubstr;

class TlsFlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    absl::SetFlag(&FLAGS_tls_cert, "");
    absl::SetFlag(&FLAGS_tls_key, "");
    absl::SetFlag(&FLAGS_tls_ca, "");
  }
};

TEST_F(TlsFlagsTest, FlagsThatDoNotGoTogetherAreInvalid) {
  ASSERT_TRUE(TlsConfigFromFlags().ok());
  EXPECT_FALSE(TlsConfigFromFlags()->enabled());
  absl::SetFlag(&FLAGS_tls_cert, "/x/cert.pem");
  EXPECT_EQ(TlsConfigFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_tls_key, "/x/key.pem");
  ASSERT_TRUE(TlsConfigFromFlags().ok());
  EXPECT_TRUE(TlsConfigFromFlags()->enabled());
  absl::SetFlag(&FLAGS_tls_cert, "");
  absl::SetFlag(&FLAGS_tls_key, "");
  absl::SetFlag(&FLAGS_tls_ca, "/x/ca.pem");
  EXPECT_EQ(TlsConfigFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TlsTest, UnreadableOrNonPemFilesAreInvalidArgument) {
  const std::string junk = ::testing::TempDir() + "/not_pem.txt";
  std::ofstream(junk) << "hello";
  TlsConfig missing{"/nonexistent/cert.pem", "/nonexistent/key.pem", "", ""};
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> s = MakeServerCredentials(missing);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("/nonexistent/cert.pem"));
  TlsConfig not_pem{junk, junk, junk, ""};
  EXPECT_THAT(std::string(MakeServerCredentials(not_pem).status().message()), HasSubstr("not PEM"));
  EXPECT_EQ(MakeChannel("127.0.0.1:1", not_pem).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Off: plaintext, nothing to read.
  EXPECT_TRUE(MakeServerCredentials(TlsConfig()).ok());
  EXPECT_TRUE(MakeChannel("127.0.0.1:1", TlsConfig()).ok());
}

}  // namespace
}  // namespace folio

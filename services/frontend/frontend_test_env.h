// Test-only: FrontendTestEnv, a gtest fixture that runs a FrontendService over loopback
// gRPC (ServiceRunner, /metrics included) in front of a FakeScheduler, with the real
// stories260K tokenizer ($FOLIO_MODELS_DIR/stories260K/tok512.bin). Tests skip, saying how
// to run them, when FOLIO_MODELS_DIR is unset. Shared by service_test.cc and cli_test.cc.
// Thread-compatible (one test at a time).
#ifndef FOLIO_SERVICES_FRONTEND_FRONTEND_TEST_ENV_H_
#define FOLIO_SERVICES_FRONTEND_FRONTEND_TEST_ENV_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/service_runner.h"
#include "common/tokenizer/tokenizer.h"
#include "folio/v1/folio.grpc.pb.h"
#include "gtest/gtest.h"
#include "services/frontend/fake_scheduler.h"
#include "services/frontend/service.h"

namespace folio::frontend::testing {

inline constexpr int32_t kMaxModelLen = 512;

// The outcome of one Generate stream as the client saw it.
struct StreamResult {
  std::vector<folio::v1::GenerateResponse> messages;
  grpc::Status status;
  std::string text;                // all text deltas joined
  std::vector<int32_t> token_ids;  // all tokens
};

class FrontendTestEnv : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Tokens of `text` without BOS, as the model would generate them.
  std::vector<int32_t> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;

  static folio::v1::GenerateRequest Request(const std::string& prompt, int max_tokens = 32);
  // Runs Generate to the end. `cancel_after_messages` > 0: cancel once that many arrived.
  StreamResult Generate(const folio::v1::GenerateRequest& request,
                        std::optional<absl::Duration> deadline = std::nullopt,
                        int cancel_after_messages = 0);
  grpc::Status Complete(const folio::v1::GenerateRequest& request,
                        folio::v1::CompleteResponse* response);

  std::string address() const { return runner_->address(); }

  // What a derived fixture sets before SetUp (API keys, ...); resuming stays off.
  FrontendOptions frontend_options_;
  folio::internal::v1::ClusterInfo info_;
  std::optional<Tokenizer> tokenizer_;
  MetricsRegistry registry_;
  std::unique_ptr<FakeScheduler> fake_;
  std::unique_ptr<FrontendService> service_;
  std::unique_ptr<ServiceRunner> runner_;
  std::unique_ptr<folio::v1::TextGeneration::Stub> stub_;
};

}  // namespace folio::frontend::testing

#endif  // FOLIO_SERVICES_FRONTEND_FRONTEND_TEST_ENV_H_

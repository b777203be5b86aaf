// The folio-frontend binary: NOT_SERVING until the scheduler answers (which may come up
// later), serving afterwards, SIGTERM exits cleanly, and start-up failures exit non-zero.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "services/frontend/frontend_test_env.h"
#include "tests/service_process.h"

namespace folio::frontend::testing {
namespace {

namespace ipb = folio::internal::v1;
namespace pb = folio::v1;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// A port that was free a moment ago.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class FrontendMainTest : public FrontendTestEnv {
 protected:
  void SetUp() override {
    FrontendTestEnv::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (std::getenv("FOLIO_BUILD_DIR") == nullptr) {
      GTEST_SKIP() << "FOLIO_BUILD_DIR is not set; run through ctest or set it to the build "
                      "folder holding bin/folio-frontend";
    }
  }

  static HealthCheckResponse::ServingStatus Health(const std::string& address) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    HealthCheckRequest request;
    HealthCheckResponse response;
    return stub->Check(&ctx, request, &response).ok() ? response.status()
                                                      : HealthCheckResponse::UNKNOWN;
  }
};

TEST_F(FrontendMainTest, ServesOnceALateSchedulerAnswersAndStopsOnSigterm) {
  const int scheduler_port = FreePort();
  auto proc = folio::testing::ServiceProcess::Start(
      "folio-frontend", {absl::StrCat("--scheduler=127.0.0.1:", scheduler_port), "--port=0",
                         "--metrics_port=0", "--http_port=0", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_EQ(Health((*proc)->address()), HealthCheckResponse::NOT_SERVING);

  std::unique_ptr<FakeScheduler> late = FakeScheduler::Start(info_, scheduler_port);
  ASSERT_NE(late, nullptr) << "port " << scheduler_port << " was taken meanwhile";
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
  for (int i = 0; i < 200 && status != HealthCheckResponse::SERVING; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    status = Health((*proc)->address());
  }
  ASSERT_EQ(status, HealthCheckResponse::SERVING);

  const std::vector<int32_t> tokens = Encode("there was a dog");
  late->SetScript(TokensScript(tokens, ipb::FINISH_REASON_LENGTH, 5));
  auto stub = pb::TextGeneration::NewStub(
      grpc::CreateChannel((*proc)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  pb::CompleteResponse response;
  grpc::Status rpc = stub->Complete(&ctx, Request("Once upon a time"), &response);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_EQ(response.text(), Decode(tokens));

  const std::string metrics = folio::testing::HttpGet((*proc)->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_frontend_requests_total"));

  (*proc)->Signal(SIGTERM);
  absl::StatusOr<int> exit_status = (*proc)->Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 0);
}

TEST_F(FrontendMainTest, GivesUpAfterTheStartupTimeout) {
  auto proc = folio::testing::ServiceProcess::Start(
      "folio-frontend", {"--scheduler=127.0.0.1:1", "--port=0", "--metrics_port=-1",
                         "--http_port=-1",
                         "--startup_timeout_s=1", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  absl::StatusOr<int> exit_status = (*proc)->Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 1);
}

TEST_F(FrontendMainTest, ABadChatTemplateFileStopsTheStartWithTheLine) {
  const std::string path = ::testing::TempDir() + "/bad_chat_template.jinja";
  {
    std::ofstream out(path);
    out << "{% for m in messages %}\n{{ m.content }\n";
  }
  folio::testing::CommandResult r = folio::testing::RunCommand(
      folio::testing::BinDir() + "/folio-frontend --scheduler=127.0.0.1:1 --port=0 --chat_template=" + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--chat_template " + path + ": chat template: line 2"));
  r = folio::testing::RunCommand(folio::testing::BinDir() +
                                 "/folio-frontend --scheduler=127.0.0.1:1 --port=0 --chat_template=/nonexistent.jinja");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--chat_template: cannot read /nonexistent.jinja"));
  std::remove(path.c_str());
}

TEST_F(FrontendMainTest, SchedulerFlagIsRequired) {
  folio::testing::CommandResult r =
      folio::testing::RunCommand(folio::testing::BinDir() + "/folio-frontend --port=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--scheduler"));
}

TEST_F(FrontendMainTest, BadReplicaFlagsStopTheStartAndSayWhatIsWrong) {
  const std::string bin = folio::testing::BinDir() + "/folio-frontend --port=0 ";
  struct Case {
    std::string flags;
    std::string message;
  } cases[] = {
      {"--replicas=127.0.0.1:1,,127.0.0.1:2", "an empty entry"},
      {"--replicas=127.0.0.1", "is not HOST:PORT"},
      {"--replicas=127.0.0.1:1,127.0.0.1:1", "listed twice"},
      {"--replicas=dns:///name-without-port", "is not HOST:PORT"},
      {"--replicas=127.0.0.1:1,127.0.0.1:2 --routing=fastest", "unknown routing policy \"fastest\""},
      {"--replicas=127.0.0.1:1 --scheduler=127.0.0.1:2", "one of --scheduler"},
      {"--replicas=127.0.0.1:1,127.0.0.1:2 --replica_poll_ms=0", "--replica_poll_ms"},
  };
  for (const Case& c : cases) {
    folio::testing::CommandResult r = folio::testing::RunCommand(bin + c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.flags;
  }
}

// A DNS name with no address yet is not a start-up error: the frontend is NOT_SERVING
// (replica pods may come up later), and gives up only at --startup_timeout_s.
TEST_F(FrontendMainTest, ADnsNameThatResolvesToNothingIsNotServingUntilTheTimeout) {
  auto proc = folio::testing::ServiceProcess::Start(
      "folio-frontend", {"--replicas=dns:///no-such-replica.invalid:50052", "--port=0",
                         "--metrics_port=-1", "--http_port=-1", "--startup_timeout_s=3",
                         "--replica_resolve_ms=200", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  EXPECT_EQ(Health((*proc)->address()), HealthCheckResponse::NOT_SERVING);
  absl::StatusOr<int> exit_status = (*proc)->Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_EQ(*exit_status, 1);
}

// Two replicas behind one frontend: requests complete through the router (the fakes have
// no cache manager, so both count as recovering and still take work: nothing better).
TEST_F(FrontendMainTest, ServesThroughAReplicaList) {
  std::unique_ptr<FakeScheduler> a = FakeScheduler::Start(info_);
  std::unique_ptr<FakeScheduler> b = FakeScheduler::Start(info_);
  const std::vector<int32_t> tokens = Encode("there was a dog");
  a->SetScript(TokensScript(tokens, ipb::FINISH_REASON_LENGTH, 5));
  b->SetScript(TokensScript(tokens, ipb::FINISH_REASON_LENGTH, 5));
  auto proc = folio::testing::ServiceProcess::Start(
      "folio-frontend", {"--replicas=" + a->address() + "," + b->address(),
                         "--routing=round-robin", "--port=0", "--metrics_port=0",
                         "--http_port=0", "--shutdown_grace_ms=0"});
  ASSERT_TRUE(proc.ok()) << proc.status();
  auto stub = pb::TextGeneration::NewStub(
      grpc::CreateChannel((*proc)->address(), grpc::InsecureChannelCredentials()));
  auto complete = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    pb::CompleteResponse response;
    grpc::Status rpc = stub->Complete(&ctx, Request("Once upon a time"), &response);
    if (rpc.ok()) {
      EXPECT_EQ(response.text(), Decode(tokens));
    }
    return rpc;
  };
  // Until the frontend has the model (UNAVAILABLE before), nothing reaches a replica.
  grpc::Status first = complete();
  for (int i = 0; i < 200 && !first.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    first = complete();
  }
  ASSERT_TRUE(first.ok()) << first.error_message();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(complete().ok());
  EXPECT_EQ(a->calls().size(), 2u) << "round-robin over both";
  EXPECT_EQ(b->calls().size(), 2u);
  const std::string metrics = folio::testing::HttpGet((*proc)->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_frontend_route_total{replica=\"" + a->address() +
                                 "\",policy=\"round-robin\"} 2"));
}

}  // namespace
}  // namespace folio::frontend::testing

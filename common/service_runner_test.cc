#include "common/service_runner.h"

#include <thread>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace folio {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthCheckResponse::ServingStatus Check(Health::Stub& stub, const std::string& service) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub.Check(&ctx, req, &resp);
  if (!s.ok()) return HealthCheckResponse::UNKNOWN;
  return resp.status();
}

TEST(ServiceRunnerTest, HealthFollowsReadinessAndShutdown) {
  MetricsRegistry registry;
  registry.AddCounter("folio_test_total", "Test.").Increment();
  ServerOptions options{.service_name = "folio.test.Svc",
                        .shutdown_grace = absl::Milliseconds(800)};
  auto runner = ServiceRunner::Start(options, {}, &registry);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stub = Health::NewStub(
      grpc::CreateChannel((*runner)->address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::NOT_SERVING);
  (*runner)->SetServing(ServingState::kServing);
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(*stub, ""), HealthCheckResponse::SERVING);

  httplib::Client http("127.0.0.1", (*runner)->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, ::testing::HasSubstr("folio_test_total 1"));
  // The runner's own process metrics.
  EXPECT_THAT(res->body, ::testing::HasSubstr("folio_build_info{service=\"folio.test.Svc\","));
  EXPECT_THAT(res->body,
              ::testing::HasSubstr("folio_health_serving{service=\"folio.test.Svc\"} 1"));
  EXPECT_THAT(res->body, ::testing::HasSubstr("folio_process_start_time_seconds "));

  // During the grace period the server still answers, and says NOT_SERVING.
  std::thread shutdown([&] { (*runner)->Shutdown(); });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::NOT_SERVING);
  shutdown.join();
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::UNKNOWN) << "server is gone";
}

TEST(ServiceRunnerTest, ANamedHealthStandsApartFromReadiness) {
  ServerOptions options{.service_name = "folio.test.Svc", .metrics_port = -1};
  auto runner = ServiceRunner::Start(options, {}, nullptr);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stub = Health::NewStub(
      grpc::CreateChannel((*runner)->address(), grpc::InsecureChannelCredentials()));
  (*runner)->SetHealth("liveness", ServingState::kServing);
  EXPECT_EQ(Check(*stub, "liveness"), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(*stub, ""), HealthCheckResponse::NOT_SERVING) << "\"\" follows readiness";
  (*runner)->SetServing(ServingState::kServing);
  (*runner)->SetHealth("liveness", ServingState::kNotServing);
  EXPECT_EQ(Check(*stub, "liveness"), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(*stub, "folio.test.Svc"), HealthCheckResponse::SERVING);
  (*runner)->Shutdown();
}

TEST(ServiceRunnerTest, BusyPortIsAClearError) {
  auto first = ServiceRunner::Start(ServerOptions{.service_name = "a", .metrics_port = -1}, {},
                                    nullptr);
  ASSERT_TRUE(first.ok());
  auto second = ServiceRunner::Start(
      ServerOptions{.service_name = "b", .port = (*first)->port(), .metrics_port = -1}, {},
      nullptr);
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace folio

#include "services/scheduler/timed_clients.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Answers every call with the status it is given.
class ScriptedCache final : public CacheClient {
 public:
  absl::Status next = absl::OkStatus();
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest&) override {
    if (!next.ok()) return next;
    return cachemgr::StepResponse{};
  }
  absl::Status Reset() override { return next; }
  absl::Status Restore() override { return next; }
};

class ScriptedWorkers final : public WorkerClient {
 public:
  absl::Status next = absl::OkStatus();
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput&,
                                             const std::vector<std::string>&) override {
    if (!next.ok()) return next;
    return worker::StepOutput{};
  }
  absl::Status Restore() override { return next; }
};

TEST(TimedClientsTest, EveryCallIsTimedAndFailuresAreCountedByCode) {
  MetricsRegistry registry;
  RpcMetrics metrics(&registry);
  ScriptedCache cache;
  ScriptedWorkers workers;
  TimedCacheClient timed_cache(&cache, &metrics);
  TimedWorkerClient timed_workers(&workers, &metrics);

  EXPECT_TRUE(timed_cache.Step({}).ok());
  EXPECT_TRUE(timed_cache.Step({}).ok());
  EXPECT_TRUE(timed_workers.Execute({}, {}).ok());
  workers.next = absl::UnavailableError("rank 1 is gone");
  absl::StatusOr<worker::StepOutput> failed = timed_workers.Execute({}, {});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << "errors pass through";
  EXPECT_TRUE(timed_cache.Reset().ok());
  EXPECT_EQ(timed_workers.Restore().code(), absl::StatusCode::kUnavailable);

  const std::string page = registry.Serialize();
  EXPECT_THAT(page, HasSubstr("folio_scheduler_rpc_duration_seconds_count{service=\"cachemgr\","
                              "method=\"Step\"} 2"));
  EXPECT_THAT(page, HasSubstr("folio_scheduler_rpc_duration_seconds_count{service=\"cachemgr\","
                              "method=\"Reset\"} 1"));
  EXPECT_THAT(page, HasSubstr("folio_scheduler_rpc_duration_seconds_count{service=\"worker\","
                              "method=\"ExecuteStep\"} 2"));
  EXPECT_THAT(page, HasSubstr("folio_scheduler_rpc_errors_total{service=\"worker\","
                              "method=\"ExecuteStep\",code=\"UNAVAILABLE\"} 1"));
  EXPECT_THAT(page, HasSubstr("folio_scheduler_rpc_errors_total{service=\"worker\","
                              "method=\"Restore\",code=\"UNAVAILABLE\"} 1"));
  EXPECT_THAT(page, Not(HasSubstr("folio_scheduler_rpc_errors_total{service=\"cachemgr\"")));
}

}  // namespace
}  // namespace folio::scheduler

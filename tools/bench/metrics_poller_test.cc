#include "tools/bench/metrics_poller.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "common/metrics.h"
#include "common/metrics_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::bench {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

TEST(MetricsPollerTest, SummaryCountsOnlySamplesWithRequestsInFlight) {
  std::vector<MetricsSample> samples = {
      {0.25, 0, {{"u", 0.0}}},
      {0.50, 2, {{"u", 0.5}, {"s", 3}}},
      {0.75, 1, {{"u", 1.0}, {"s", NAN}}},
      {1.00, 0, {{"u", 0.0}}},
  };
  const json m = SummarizeMetrics({"http://h:1/metrics"}, 0.25, samples, 1, "boom");
  EXPECT_EQ(m["samples"], 4);
  EXPECT_EQ(m["scrape_errors"], 1);
  EXPECT_EQ(m["last_scrape_error"], "boom");
  EXPECT_DOUBLE_EQ(m["gauges"]["u"]["mean"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(m["gauges"]["u"]["max"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m["gauges"]["u"]["min"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(m["gauges"]["s"]["mean"].get<double>(), 3);  // NaN left out
  ASSERT_EQ(m["series"].size(), 4u);
  EXPECT_EQ(m["series"][1]["in_flight"], 2);
  EXPECT_TRUE(m["series"][2]["s"].is_null());
  EXPECT_EQ(m["series"][3]["t_s"], 1.0);
}

TEST(MetricsPollerTest, BadOrUnreachableUrlsAreClearErrors) {
  auto none = [] { return 0; };
  auto p = MetricsPoller::Create({"ftp://x/metrics"}, 0.25, DefaultMetricsGauges(), none);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("bad URL 'ftp://x/metrics'"));
  p = MetricsPoller::Create({"http://127.0.0.1:1/metrics"}, 0.25, DefaultMetricsGauges(), none);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(p.status().message(), HasSubstr("GET http://127.0.0.1:1/metrics failed"));

  MetricsRegistry registry;
  auto server = MetricsServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string base = "http://127.0.0.1:" + std::to_string((*server)->port());
  p = MetricsPoller::Create({base + "/nothing"}, 0.25, DefaultMetricsGauges(), none);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("answered HTTP 404"));
  p = MetricsPoller::Create({base + "/metrics"}, 0, DefaultMetricsGauges(), none);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("interval must be positive"));
}

// A real /metrics server whose gauges change between scrapes: the in-flight callback
// (called before and after each scrape) sets them, so what each scrape sees is known.
TEST(MetricsPollerTest, ScrapesARealServerAndSumsLabelSets) {
  MetricsRegistry registry;
  Gauge& util = registry.AddGauge("folio_cachemgr_slot_utilization_ratio", "u");
  auto& running = registry.AddGaugeFamily("folio_scheduler_requests_running", "r", {"replica"});
  auto server = MetricsServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();

  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;  // the poller's, after Create's probe scrape
  auto in_flight = [&] {
    std::lock_guard<std::mutex> lock(mu);
    const int call = ++calls;
    const int scrape = (call + 1) / 2;  // 1-based
    if (call % 2 == 1) {                // before scrape `scrape`
      util.Set(scrape == 1 ? 0.4 : scrape == 2 ? 0.8 : 0.1);
      running.WithLabels({"0"}).Set(scrape);
      running.WithLabels({"1"}).Set(10);
    }
    cv.notify_all();
    return scrape <= 2 ? 1 : 0;
  };
  auto poller = MetricsPoller::Create(
      {"http://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics"}, 0.01,
      DefaultMetricsGauges(), in_flight);
  ASSERT_TRUE(poller.ok()) << poller.status();
  (*poller)->Start(std::chrono::steady_clock::now());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return calls >= 6; }));
  }
  (*poller)->Stop();
  const json m = (*poller)->Result();
  ASSERT_GE(m["samples"].get<int>(), 3) << m.dump(1);
  EXPECT_EQ(m["scrape_errors"], 0);
  const json& u = m["gauges"]["folio_cachemgr_slot_utilization_ratio"];
  EXPECT_DOUBLE_EQ(u["mean"].get<double>(), 0.6) << m.dump(1);
  EXPECT_DOUBLE_EQ(u["max"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(u["min"].get<double>(), 0.4);
  const json& r = m["gauges"]["folio_scheduler_requests_running"];
  EXPECT_DOUBLE_EQ(r["min"].get<double>(), 11);  // 1 + 10
  EXPECT_DOUBLE_EQ(r["max"].get<double>(), 12);
  EXPECT_FALSE(m["gauges"].contains("folio_cachemgr_sequences"));  // not on this page
  EXPECT_EQ(m["series"][0]["in_flight"], 1);
  EXPECT_EQ(m["series"][2]["in_flight"], 0);
  EXPECT_DOUBLE_EQ(m["series"][2]["folio_cachemgr_slot_utilization_ratio"].get<double>(), 0.1);
  EXPECT_LT(m["series"][0]["t_s"].get<double>(), m["series"][1]["t_s"].get<double>());
}

}  // namespace
}  // namespace folio::bench

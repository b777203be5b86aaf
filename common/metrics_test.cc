#include "common/metrics.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, CountersAndGaugesSerialize) {
  MetricsRegistry registry;
  Counter& requests = registry.AddCounter("folio_requests_total", "Requests served.");
  Gauge& free_blocks = registry.AddGauge("folio_blocks_free", "Free blocks.");
  requests.Increment();
  requests.Increment(2);
  free_blocks.Set(7.5);
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("# HELP folio_requests_total Requests served.\n"
                              "# TYPE folio_requests_total counter\n"
                              "folio_requests_total 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE folio_blocks_free gauge\nfolio_blocks_free 7.5\n"));
}

TEST(MetricsTest, LabelsAreEscapedAndSorted) {
  MetricsRegistry registry;
  auto& family = registry.AddCounterFamily("folio_errors_total", "Errors.", {"code", "path"});
  family.WithLabels({"b", "x\"y"}).Increment();
  family.WithLabels({"a", "back\\slash\nnl"}).Increment(4);
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("folio_errors_total{code=\"a\",path=\"back\\\\slash\\nnl\"} 4\n"
                              "folio_errors_total{code=\"b\",path=\"x\\\"y\"} 1\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  Histogram& h = registry.AddHistogram("folio_latency_seconds", "Latency.", {0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // the upper bound is inclusive
  h.Observe(0.5);
  h.Observe(3);
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("folio_latency_seconds_bucket{le=\"0.10000000000000001\"} 2\n"
                              "folio_latency_seconds_bucket{le=\"1\"} 3\n"
                              "folio_latency_seconds_bucket{le=\"+Inf\"} 4\n"
                              "folio_latency_seconds_sum 3.6499999999999999\n"
                              "folio_latency_seconds_count 4\n"));
}

TEST(MetricsTest, CollectHooksRunBeforeSerializing) {
  MetricsRegistry registry;
  Gauge& g = registry.AddGauge("folio_derived", "Derived.");
  int calls = 0;
  registry.AddCollectHook([&] { g.Set(++calls); });
  EXPECT_THAT(registry.Serialize(), HasSubstr("folio_derived 1\n"));
  EXPECT_THAT(registry.Serialize(), HasSubstr("folio_derived 2\n"));
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry registry;
  Counter& c = registry.AddCounter("folio_c_total", "C.");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) c.Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(1, 2, 4), ::testing::ElementsAre(1, 2, 4, 8));
}

}  // namespace
}  // namespace folio

#include "tools/bench/prom_text.h"

#include <cmath>

#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A page as the services serve it: HELP/TYPE lines, a labelled family, a histogram.
TEST(PromTextTest, ReadsARegistrysOwnPage) {
  MetricsRegistry registry;
  registry.AddGauge("folio_cachemgr_sequences", "Live sequences.").Set(7);
  registry.AddGauge("folio_cachemgr_kv_usage_ratio", "Used / capacity.").Set(0.25);
  auto& family = registry.AddGaugeFamily("folio_test_queue", "Per queue.", {"queue"});
  family.WithLabels({"a"}).Set(2);
  family.WithLabels({"b \"quoted\""}).Set(3.5);
  Histogram& h = registry.AddHistogram("folio_test_latency_seconds", "Latency.", {0.1, 1});
  h.Observe(0.05);
  h.Observe(5);
  const std::string page = registry.Serialize();
  ASSERT_THAT(page, HasSubstr("# TYPE folio_test_latency_seconds histogram"));

  absl::StatusOr<std::vector<PromSample>> samples = ParsePromText(page);
  ASSERT_TRUE(samples.ok()) << samples.status() << "\n" << page;
  const std::map<std::string, double> sums =
      SumByName(*samples, {"folio_cachemgr_sequences", "folio_cachemgr_kv_usage_ratio",
                           "folio_test_queue", "folio_test_latency_seconds_count",
                           "folio_missing"});
  EXPECT_THAT(sums, ElementsAre(Pair("folio_cachemgr_kv_usage_ratio", 0.25),
                                Pair("folio_cachemgr_sequences", 7),
                                Pair("folio_test_latency_seconds_count", 2),
                                Pair("folio_test_queue", 5.5)));
  bool saw_inf_bucket = false;
  for (const PromSample& s : *samples) {
    if (s.name == "folio_test_queue" && s.value == 3.5) {
      EXPECT_THAT(s.labels, ElementsAre(Pair("queue", "b \"quoted\"")));
    }
    if (s.name == "folio_test_latency_seconds_bucket" && !s.labels.empty() &&
        s.labels.back().second == "+Inf") {
      saw_inf_bucket = true;
      EXPECT_EQ(s.value, 2);
    }
  }
  EXPECT_TRUE(saw_inf_bucket) << page;
}

TEST(PromTextTest, SpecialValuesEscapesAndTimestamps) {
  const char* page =
      "# HELP a_gauge A gauge.\n"
      "# TYPE a_gauge gauge\n"
      "a_gauge NaN\n"
      "b_gauge{le=\"+Inf\"} +Inf\r\n"
      "c_gauge -Inf 1700000000000\n"
      "\n"
      "   # indented comment\n"
      "d_gauge{x=\"1\",y=\"a\\\\b\\nc\",} 1.5e3\n"
      "e_gauge { x = \"1\" } -2\n";
  absl::StatusOr<std::vector<PromSample>> samples = ParsePromText(page);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 5u);
  EXPECT_TRUE(std::isnan((*samples)[0].value));
  EXPECT_EQ((*samples)[1].value, INFINITY);
  EXPECT_THAT((*samples)[1].labels, ElementsAre(Pair("le", "+Inf")));
  EXPECT_EQ((*samples)[2].value, -INFINITY);
  EXPECT_EQ((*samples)[3].value, 1500);
  EXPECT_THAT((*samples)[3].labels, ElementsAre(Pair("x", "1"), Pair("y", "a\\b\nc")));
  EXPECT_EQ((*samples)[4].value, -2);
}

TEST(PromTextTest, BadLinesNameTheLineAndWhatIsWrong) {
  struct Case {
    const char* page;
    const char* message;
  } cases[] = {
      {"ok 1\n9bad 1\n", "metrics line 2"},
      {"x{a=1} 2\n", "expected a quoted value for label a"},
      {"x{a=\"1\" 2\n", "expected ',' or '}'"},
      {"x{a=\"1} 2\n", "expected a quoted value"},
      {"x\n", "expected a space before the value"},
      {"x abc\n", "bad value 'abc'"},
      {"x 1 2 3\n", "unexpected text"},
      {"x 1 later\n", "bad timestamp 'later'"},
      {"x{a=\"\\q\"} 1\n", "expected a quoted value"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<PromSample>> samples = ParsePromText(c.page);
    ASSERT_FALSE(samples.ok()) << c.page;
    EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(samples.status().message(), HasSubstr(c.message)) << c.page;
  }
}

}  // namespace
}  // namespace folio::bench

#include "tools/bench/report.h"

#include "gtest/gtest.h"

namespace folio::bench {
namespace {

TEST(ReportTest, PercentileInterpolates) {
  const std::vector<double> v = {1, 2, 3, 4, 5};
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 3);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 5);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
}

TEST(ReportTest, FinishReasonsOfChoicesCombine) {
  EXPECT_EQ(CombineFinishReasons({"length", "length", "length"}), "length");
  EXPECT_EQ(CombineFinishReasons({"length", "stop", "length"}), "length,stop");
  EXPECT_EQ(CombineFinishReasons({"length", ""}), "length,none");
  EXPECT_EQ(CombineFinishReasons({""}), "");
}

TEST(ReportTest, SummaryFigures) {
  RequestResult a{.sent = true, .ok = true, .status = "OK", .prompt_tokens = 4,
                  .requested_output = 3, .output_tokens = 3, .finish_reason = "length",
                  .ttft_s = 0.1, .e2e_s = 0.5, .itl_s = {0.2, 0.2}};
  RequestResult b{.sent = true, .ok = false, .status = "UNAVAILABLE", .prompt_tokens = 4,
                  .requested_output = 3};
  RequestResult c;  // never sent
  const nlohmann::json s = Summarize({a, b, c}, 2.0);
  EXPECT_EQ(s["num_requests"], 3);
  EXPECT_EQ(s["sent"], 2);
  EXPECT_EQ(s["completed"], 1);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["failures"]["UNAVAILABLE"], 1);
  EXPECT_EQ(s["not_sent"], 1);
  EXPECT_DOUBLE_EQ(s["request_throughput"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["output_throughput"].get<double>(), 1.5);
  EXPECT_NEAR(s["ttft_ms"]["mean"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), 200, 1e-9);  // (0.5 - 0.1) / 2
  EXPECT_NEAR(s["itl_ms"]["p99"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(s["e2e_latency_ms"]["p90"].get<double>(), 500, 1e-9);
  EXPECT_NEAR(s["normalized_latency_ms_per_token"].get<double>(), 500.0 / 3, 1e-9);
  EXPECT_EQ(s["requests"].size(), 3u);
  const std::string table = FormatTable(s);
  EXPECT_NE(table.find("UNAVAILABLE"), std::string::npos);
  EXPECT_NE(table.find("TPOT"), std::string::npos);
}

}  // namespace
}  // namespace folio::bench

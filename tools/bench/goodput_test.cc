#include "tools/bench/goodput.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::bench {
namespace {

using ::testing::HasSubstr;

RequestResult Done(double ttft_s, double e2e_s, int tokens) {
  RequestResult r;
  r.sent = r.ok = true;
  r.status = "OK";
  r.ttft_s = ttft_s;
  r.e2e_s = e2e_s;
  r.output_tokens = tokens;
  return r;
}

TEST(GoodputTest, ParsesAnySubsetInAnyOrder) {
  absl::StatusOr<Slo> slo = ParseSlo("e2e:2000,ttft:500");
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_EQ(slo->ttft_ms, 500);
  EXPECT_FALSE(slo->tpot_ms.has_value());
  EXPECT_EQ(slo->e2e_ms, 2000);
  slo = ParseSlo("tpot:12.5");
  ASSERT_TRUE(slo.ok());
  EXPECT_EQ(slo->tpot_ms, 12.5);
}

TEST(GoodputTest, BadSpecsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"ttft", "has no ':'"},
      {"ttft:abc", "must be a positive number"},
      {"ttft:-1", "must be a positive number"},
      {"ttft:0", "must be a positive number"},
      {"ttft:inf", "must be a positive number"},
      {"itl:5", "unknown objective 'itl'"},
      {"ttft:5,ttft:6", "ttft is given twice"},
      {"ttft:5,", "has no ':'"},
  };
  for (const auto& [spec, message] : cases) {
    absl::StatusOr<Slo> slo = ParseSlo(spec);
    ASSERT_FALSE(slo.ok()) << spec;
    EXPECT_EQ(slo.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(slo.status().message(), HasSubstr(message)) << spec;
    EXPECT_THAT(slo.status().message(), HasSubstr("ttft:MS,tpot:MS,e2e:MS"));
  }
}

TEST(GoodputTest, CountsRequestsWithinEveryBound) {
  Slo slo;
  slo.ttft_ms = 100;
  slo.tpot_ms = 10;
  std::vector<RequestResult> results = {
      Done(0.05, 0.05 + 9 * 0.009, 10),   // good
      Done(0.15, 0.20, 10),               // TTFT too slow
      Done(0.05, 0.05 + 9 * 0.011, 10),   // TPOT too slow
      Done(0.09, 0.09, 1),                // one token: no TPOT, good
      Done(0.01, 0.02, 0),                // no token: not good
  };
  RequestResult failed = Done(0.01, 0.02, 5);
  failed.ok = false;
  failed.status = "UNAVAILABLE";
  results.push_back(failed);
  results.push_back(RequestResult{});  // never sent: not in the fraction
  const nlohmann::json g = Goodput(results, 2.0, slo);
  EXPECT_EQ(g["good_requests"], 2);
  EXPECT_DOUBLE_EQ(g["requests_per_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(g["fraction"].get<double>(), 2.0 / 6);
  EXPECT_EQ(g["slo_ms"], nlohmann::json({{"ttft", 100}, {"tpot", 10}}));

  Slo e2e_only;
  e2e_only.e2e_ms = 150;
  EXPECT_TRUE(MeetsSlo(results[0], e2e_only));
  EXPECT_FALSE(MeetsSlo(results[1], e2e_only));  // 200 ms
  EXPECT_EQ(Goodput({}, 0, e2e_only)["fraction"], 0.0);
}

}  // namespace
}  // namespace folio::bench

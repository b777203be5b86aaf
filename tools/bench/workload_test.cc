#include "tools/bench/workload.h"

#include <cmath>

#include "gtest/gtest.h"

namespace folio::bench {
namespace {

WorkloadOptions Options(const std::string& name) {
  WorkloadOptions o;
  o.name = name;
  o.num_requests = 2000;
  o.vocab_size = 512;
  o.max_model_len = 4096;
  o.special_ids = {0, 1, 2};
  return o;
}

double MeanInput(const std::vector<BenchRequest>& w) {
  double sum = 0;
  for (const BenchRequest& r : w) sum += r.prompt_token_ids.size();
  return sum / w.size();
}

double MeanOutput(const std::vector<BenchRequest>& w) {
  double sum = 0;
  for (const BenchRequest& r : w) sum += r.output_len;
  return sum / w.size();
}

TEST(WorkloadTest, SameSeedSameRequestsOtherSeedOthers) {
  auto a = MakeWorkload(Options("sharegpt-like"));
  auto b = MakeWorkload(Options("sharegpt-like"));
  WorkloadOptions other = Options("sharegpt-like");
  other.seed = 1;
  auto c = MakeWorkload(other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt_token_ids, (*b)[i].prompt_token_ids);
    EXPECT_EQ((*a)[i].output_len, (*b)[i].output_len);
  }
  EXPECT_NE((*a)[0].prompt_token_ids, (*c)[0].prompt_token_ids);
}

TEST(WorkloadTest, LogNormalMeansBeforeCapsAndCapsHold) {
  WorkloadOptions o = Options("sharegpt-like");
  o.max_input_len = 1 << 20;
  o.max_output_len = 1 << 20;
  o.max_model_len = 1 << 22;
  auto w = MakeWorkload(o);
  ASSERT_TRUE(w.ok());
  EXPECT_NEAR(MeanInput(*w), 161, 161 * 0.1);
  EXPECT_NEAR(MeanOutput(*w), 338, 338 * 0.1);

  auto alpaca = MakeWorkload(Options("alpaca-like"));
  ASSERT_TRUE(alpaca.ok());
  EXPECT_NEAR(MeanInput(*alpaca), 19, 19 * 0.1);
  EXPECT_NEAR(MeanOutput(*alpaca), 58, 58 * 0.1);

  auto capped = MakeWorkload(Options("sharegpt-like"));  // 512 / 512
  ASSERT_TRUE(capped.ok());
  for (const BenchRequest& r : *capped) {
    EXPECT_GE(r.prompt_token_ids.size(), 1u);
    EXPECT_LE(r.prompt_token_ids.size(), 512u);
    EXPECT_GE(r.output_len, 1);
    EXPECT_LE(r.output_len, 512);
    for (int32_t id : r.prompt_token_ids) {
      EXPECT_GT(id, 2);
      EXPECT_LT(id, 512);
    }
  }
}

TEST(WorkloadTest, FixedLengthsAndModelLengthLimit) {
  WorkloadOptions o = Options("fixed");
  o.input_len = 7;
  o.output_len = 9;
  auto w = MakeWorkload(o);
  ASSERT_TRUE(w.ok());
  for (const BenchRequest& r : *w) {
    EXPECT_EQ(r.prompt_token_ids.size(), 7u);
    EXPECT_EQ(r.output_len, 9);
  }
  o.max_model_len = 12;  // 7 + 9 does not fit: the prompt gives way
  w = MakeWorkload(o);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)[0].prompt_token_ids.size(), 3u);
  EXPECT_EQ((*w)[0].output_len, 9);
}

TEST(WorkloadTest, BadOptionsAreInvalidArgument) {
  EXPECT_EQ(MakeWorkload(Options("nope")).status().code(), absl::StatusCode::kInvalidArgument);
  WorkloadOptions o = Options("fixed");
  o.output_len = 0;
  EXPECT_EQ(MakeWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options("fixed");
  o.num_requests = 0;
  EXPECT_EQ(MakeWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ArrivalTimesTest, PoissonRateAndInfinity) {
  const std::vector<double> t = ArrivalTimes(4000, 20.0, 0);
  ASSERT_EQ(t.size(), 4000u);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / (t.size() - 1), 1.0 / 20, 0.1 / 20);  // mean gap
  EXPECT_EQ(ArrivalTimes(4000, 20.0, 0), t);
  for (double v : ArrivalTimes(5, INFINITY, 0)) EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace folio::bench

#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

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
  o = Options("shared-prefix");
  o.prefix_len = 0;
  EXPECT_EQ(MakeWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options("beam");
  o.min_width = 4;
  o.max_width = 3;
  EXPECT_EQ(MakeWorkload(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadTest, SharedPrefixIsCommonAndTheRestIsNot) {
  WorkloadOptions o = Options("shared-prefix");
  o.num_requests = 50;
  o.output_len = 20;  // defaults: prefix 1000, suffix 32
  auto w = MakeWorkload(o);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<int32_t>& first = (*w)[0].prompt_token_ids;
  ASSERT_EQ(first.size(), 1032u);
  for (const BenchRequest& r : *w) {
    ASSERT_EQ(r.prompt_token_ids.size(), 1032u);
    EXPECT_EQ(r.output_len, 20);
    EXPECT_EQ(r.n, 1);
    EXPECT_EQ(r.beam_width, 0);
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 1000, r.prompt_token_ids.begin()));
    for (int32_t id : r.prompt_token_ids) {
      EXPECT_GT(id, 2);
      EXPECT_LT(id, 512);
    }
  }
  // The unique parts differ from request to request.
  std::set<std::vector<int32_t>> suffixes;
  for (const BenchRequest& r : *w) {
    suffixes.emplace(r.prompt_token_ids.begin() + 1000, r.prompt_token_ids.end());
  }
  EXPECT_EQ(suffixes.size(), 50u);
  // Same seed, same prompts; another seed, another prefix.
  auto again = MakeWorkload(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[7].prompt_token_ids, (*w)[7].prompt_token_ids);
  o.seed = 9;
  auto other = MakeWorkload(o);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)[0].prompt_token_ids, first);
}

TEST(WorkloadTest, SharedPrefixHeldToModelLength) {
  WorkloadOptions o = Options("shared-prefix");
  o.num_requests = 5;
  o.prefix_len = 100;
  o.suffix_len = 10;
  o.output_len = 30;
  o.max_model_len = 135;  // 105 for the prompt: the unique part gives way first
  auto w = MakeWorkload(o);
  ASSERT_TRUE(w.ok());
  for (const BenchRequest& r : *w) {
    EXPECT_EQ(r.prompt_token_ids.size(), 105u);
    EXPECT_EQ(r.prompt_token_ids.size() + r.output_len, 135u);
  }
  o.max_model_len = 80;  // 50 for the prompt: one unique token, a 49-token prefix
  w = MakeWorkload(o);
  ASSERT_TRUE(w.ok());
  for (const BenchRequest& r : *w) {
    ASSERT_EQ(r.prompt_token_ids.size(), 50u);
    EXPECT_TRUE(std::equal(r.prompt_token_ids.begin(), r.prompt_token_ids.begin() + 49,
                           (*w)[0].prompt_token_ids.begin()));
  }
}

TEST(WorkloadTest, ParallelSamplingAndBeamWidthsCoverTheirRange) {
  for (const std::string name : {"parallel-sampling", "beam"}) {
    SCOPED_TRACE(name);
    WorkloadOptions o = Options(name);
    o.max_model_len = 64;
    auto w = MakeWorkload(o);
    ASSERT_TRUE(w.ok()) << w.status();
    std::map<int, int> widths;
    for (const BenchRequest& r : *w) {
      const int width = name == "beam" ? r.beam_width : r.n;
      ++widths[width];
      EXPECT_GE(width, 2);
      EXPECT_LE(width, 6);
      EXPECT_EQ(r.n, width);  // beam: every beam is returned
      if (name == "parallel-sampling") {
        EXPECT_EQ(r.beam_width, 0);
      }
      EXPECT_GE(r.prompt_token_ids.size(), 1u);
      EXPECT_GE(r.output_len, 1);
      EXPECT_LE(r.prompt_token_ids.size() + r.output_len, 64u);
    }
    EXPECT_EQ(widths.size(), 5u);  // 2..6 all drawn, in about equal numbers
    for (const auto& [width, count] : widths) EXPECT_NEAR(count, 400, 80) << width;
    auto again = MakeWorkload(o);
    ASSERT_TRUE(again.ok());
    for (size_t i = 0; i < w->size(); ++i) {
      EXPECT_EQ((*again)[i].n, (*w)[i].n);
      EXPECT_EQ((*again)[i].beam_width, (*w)[i].beam_width);
      EXPECT_EQ((*again)[i].prompt_token_ids, (*w)[i].prompt_token_ids);
    }
  }
  // Lengths are alpaca-like before the model's limit.
  auto p = MakeWorkload(Options("parallel-sampling"));
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(MeanInput(*p), 19, 19 * 0.1);
  EXPECT_NEAR(MeanOutput(*p), 58, 58 * 0.1);
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

// The article's figures, measured on the real KvCacheManager. The expected values are
// the article's arithmetic, written out here; the scenarios themselves only read the
// manager's state, so a broken policy fails these tests.
#include "services/cachemgr/sim/scenarios.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::cachemgr::sim {
namespace {

using ::testing::HasSubstr;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

SnapshotOptions ArticleSnapshot(PolicyKind policy) {
  return SnapshotOptions{.policy = policy,
                         .block_size = 16,
                         .max_len = 4096,
                         .kib_per_token = 128,
                         .requests = ArticleRequests()};
}

TEST(SnapshotTest, ContiguousMatchesArticle) {
  auto r = RunSnapshot(ArticleSnapshot(PolicyKind::kContiguous));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slots_reserved, 16384);  // 4 * 4,096
  EXPECT_EQ(r->slots_used, 3270);       // 300 + 1,500 + 70 + 1,400
  EXPECT_EQ(r->slots_to_come, 780);
  EXPECT_EQ(r->slots_never_used, 12334);
  EXPECT_EQ(r->blocks_held, 1024);
  const Json json = ToJson(*r);
  EXPECT_NEAR(json["utilization"].get<double>(), 0.1996, 5e-5);
  EXPECT_DOUBLE_EQ(json["utilization_pct"].get<double>(), 19.96);
  EXPECT_DOUBLE_EQ(json["mib_held"].get<double>(), 2048.0);
  EXPECT_DOUBLE_EQ(json["mib_used"].get<double>(), 408.75);
  EXPECT_DOUBLE_EQ(json["to_come_pct"].get<double>(), 4.76);
  EXPECT_DOUBLE_EQ(json["never_used_pct"].get<double>(), 75.28);
  ASSERT_EQ(r->requests.size(), 4u);
  for (const RequestSnapshot& q : r->requests) {
    EXPECT_EQ(q.num_blocks, 256);
    EXPECT_EQ(q.num_tokens, q.spec.prompt_tokens + q.spec.generated_tokens);
    EXPECT_EQ(q.slots_to_come, q.spec.final_tokens - q.num_tokens);
    EXPECT_EQ(q.slots_never_used, 4096 - q.spec.final_tokens);
  }
}

TEST(SnapshotTest, PagedMatchesArticle) {
  auto r = RunSnapshot(ArticleSnapshot(PolicyKind::kPaged));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->blocks_held, 206);
  EXPECT_EQ(r->slots_reserved, 206 * 16);
  EXPECT_EQ(r->slots_used, 3270);
  const Json json = ToJson(*r);
  EXPECT_EQ(json["blocks"].get<int>(), 206);
  EXPECT_DOUBLE_EQ(json["utilization_pct"].get<double>(), 99.21);
  EXPECT_DOUBLE_EQ(json["mib_held"].get<double>(), 412.0);
  ASSERT_EQ(r->requests.size(), 4u);
  const std::vector<RequestSpec> specs = ArticleRequests();
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(r->requests[i].num_blocks,
              CeilDiv(specs[i].prompt_tokens + specs[i].generated_tokens, 16))
        << "request " << i;
  }
  EXPECT_THAT(json.dump(2), HasSubstr("\"blocks\": 206"));
}

TEST(SnapshotTest, PagedWastesLessThanOneBlockPerRequest) {
  for (int32_t block_size : {1, 8, 16, 32, 128}) {
    SnapshotOptions options = ArticleSnapshot(PolicyKind::kPaged);
    options.block_size = block_size;
    auto r = RunSnapshot(options);
    ASSERT_TRUE(r.ok()) << r.status();
    int64_t blocks = 0;
    for (const RequestSpec& s : options.requests) {
      blocks += CeilDiv(s.prompt_tokens + s.generated_tokens, block_size);
    }
    EXPECT_EQ(r->blocks_held, blocks) << "block_size " << block_size;
    EXPECT_LT(r->slots_reserved - r->slots_used, 4 * block_size);
  }
}

TEST(SnapshotTest, RejectsInconsistentRequests) {
  SnapshotOptions options = ArticleSnapshot(PolicyKind::kPaged);
  options.requests = {{500, 100, 450}};
  auto r = RunSnapshot(options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("exceeds FINAL = 450"));

  options.requests = {{200, 100, 5000}};
  r = RunSnapshot(options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("exceeds max_len = 4096"));

  options.requests = {{-1, 10, 20}};
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.requests = {{0, 0, 20}};
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.requests = {};
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = ArticleSnapshot(PolicyKind::kPaged);
  options.block_size = 0;
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ArticleSnapshot(PolicyKind::kPaged);
  options.max_len = 0;
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ArticleSnapshot(PolicyKind::kPaged);
  options.kib_per_token = 0;
  EXPECT_EQ(RunSnapshot(options).status().code(), absl::StatusCode::kInvalidArgument);
  // Too big a pool: 4,096 requests of 2^24 tokens.
  options = ArticleSnapshot(PolicyKind::kPaged);
  options.max_len = kMaxSequenceLength;
  options.requests.assign(4096, RequestSpec{1, 0, 1});
  r = RunSnapshot(options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("limit"));
}

TEST(ParseRequestsTest, ParsesAndRejects) {
  auto r = ParseRequests("200:100:450, 50:20:300");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].prompt_tokens, 50);
  EXPECT_EQ((*r)[1].generated_tokens, 20);
  EXPECT_EQ((*r)[1].final_tokens, 300);
  for (const char* bad : {"", "200:100", "200:100:450:1", "a:b:c", "200:100:450,", "1:2:3x"}) {
    EXPECT_EQ(ParseRequests(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParallelSamplingTest, MatchesArticle) {
  auto r = RunParallelSampling(ParallelSamplingOptions{
      .prompt_tokens = 1000, .num_samples = 4, .generated_tokens = 200, .block_size = 16});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->blocks_without_sharing, 300);  // 4 * ceil(1,200 / 16)
  EXPECT_EQ(r->blocks_with_sharing, 114);     // 62 + 4 * (75 - 62)
  EXPECT_EQ(r->shared_blocks, 62);            // the full prompt blocks
  EXPECT_EQ(r->cow_copies, 3);  // the partial prompt block: the last sample writes in place
  EXPECT_EQ(r->blocks_after_prompt, 63);
  EXPECT_EQ(r->blocks_after_forks, 63);
  const Json json = ToJson(*r);
  EXPECT_DOUBLE_EQ(json["mib_with_sharing"].get<double>(), 228.0);
  EXPECT_DOUBLE_EQ(json["mib_without_sharing"].get<double>(), 600.0);
  EXPECT_DOUBLE_EQ(json["saved_pct"].get<double>(), 62.0);
}

TEST(ParallelSamplingTest, MatchesFormulaOverGrid) {
  for (int32_t p : {1, 15, 16, 17, 100}) {
    for (int32_t n : {1, 2, 5}) {
      for (int32_t g : {0, 1, 16, 40}) {
        const int32_t bs = 16;
        auto r = RunParallelSampling(ParallelSamplingOptions{
            .prompt_tokens = p, .num_samples = n, .generated_tokens = g, .block_size = bs});
        ASSERT_TRUE(r.ok()) << r.status();
        const int64_t full = p / bs;
        const int64_t total = CeilDiv(p + g, bs);
        const int64_t shared = g == 0 ? CeilDiv(p, bs) : full + n * (total - full);
        const int64_t cows = (g > 0 && p % bs != 0) ? n - 1 : 0;
        EXPECT_EQ(r->blocks_with_sharing, shared) << p << " " << n << " " << g;
        EXPECT_EQ(r->blocks_without_sharing, n * total) << p << " " << n << " " << g;
        EXPECT_EQ(r->cow_copies, cows) << p << " " << n << " " << g;
      }
    }
  }
}

TEST(ParallelSamplingTest, RejectsBadValues) {
  EXPECT_EQ(RunParallelSampling({.prompt_tokens = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunParallelSampling({.num_samples = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunParallelSampling({.generated_tokens = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunParallelSampling({.block_size = 4096}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FragmentationTest, ContiguousRefusesPagedServes) {
  for (int32_t block_size : {1, 16, 128}) {
    auto r = RunFragmentation(FragmentationOptions{.block_size = block_size});
    ASSERT_TRUE(r.ok()) << r.status();
    for (const FragmentationRun* run : {&r->contiguous, &r->paged}) {
      EXPECT_EQ(run->free_slots_before_request, 1024);
      EXPECT_EQ(run->layout_before["map"], "AAAAAAAABBBBCCCCCCCCCCCCCCCC....");
      EXPECT_EQ(run->layout_after_free["map"], "AAAAAAAA....CCCCCCCCCCCCCCCC....");
      EXPECT_EQ(run->layout_after_free["free_runs_slots"], Json::parse("[512, 512]"));
      EXPECT_EQ(run->largest_free_run_slots, 512);
    }
    EXPECT_FALSE(r->contiguous.request_served) << block_size;
    EXPECT_EQ(r->contiguous.request_blocks, 0);
    EXPECT_EQ(r->contiguous.layout_after_request["free_slots"], 1024);
    EXPECT_TRUE(r->paged.request_served) << block_size;
    EXPECT_EQ(r->paged.request_blocks, 1024 / block_size);
    EXPECT_EQ(r->paged.layout_after_request["map"], "AAAAAAAADDDDCCCCCCCCCCCCCCCCDDDD");
    EXPECT_EQ(r->paged.layout_after_request["free_slots"], 0);
  }
}

TEST(FragmentationTest, RejectsBlockSizeThatSplitsRuns) {
  for (int32_t block_size : {0, 3, 24, 1024}) {
    EXPECT_EQ(RunFragmentation({.block_size = block_size}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << block_size;
  }
}

TEST(ParseBytesTest, IntegersAndUnits) {
  EXPECT_EQ(*ParseBytes("63900000000"), 63'900'000'000);
  EXPECT_EQ(*ParseBytes("63.9GB"), 63'900'000'000);
  EXPECT_EQ(*ParseBytes("63.9gb"), 63'900'000'000);
  EXPECT_EQ(*ParseBytes("64GiB"), int64_t{64} << 30);
  EXPECT_EQ(*ParseBytes(" 1.5 KB "), 1500);
  EXPECT_EQ(*ParseBytes("0.5KiB"), 512);
  EXPECT_EQ(*ParseBytes("2.5B"), 2);
  EXPECT_EQ(*ParseBytes("1TiB"), int64_t{1} << 40);
  EXPECT_EQ(*ParseBytes(".5MB"), 500'000);
  for (const char* bad :
       {"", "GB", "-5", "12XB", "1.2.3GB", "1e9", "99999999999999999999", "9999999999TB"}) {
    EXPECT_EQ(ParseBytes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PoolTest, MatchesArticle) {
  auto r =
      RunPool(PoolOptions{.free_bytes = 63'900'000'000, .kib_per_token = 128, .block_size = 16});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes_per_block, 2 << 20);
  EXPECT_EQ(r->num_blocks, 30469);  // 63.9e9 / 2 MiB = 30,469.7
  EXPECT_EQ(r->num_tokens, 30469 * 16);
  EXPECT_EQ(r->bytes_left_over, 63'900'000'000 - int64_t{30469} * (2 << 20));
  EXPECT_TRUE(r->configured) << r->not_configured_reason;
  EXPECT_EQ(r->manager_blocks_total, 30469);
  EXPECT_EQ(r->manager_blocks_free, 30469);
}

TEST(PoolTest, ReportsPoolsThatDoNotConfigure) {
  // Under one block.
  auto r = RunPool({.free_bytes = 1000, .kib_per_token = 128, .block_size = 16});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->configured);
  EXPECT_THAT(r->not_configured_reason, HasSubstr("one block"));
  // Past the manager's slot limit: 2^40 bytes at 1 KiB per token are 2^30 blocks of 16.
  r = RunPool({.free_bytes = int64_t{1} << 45, .kib_per_token = 1, .block_size = 16});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->configured);
  EXPECT_THAT(r->not_configured_reason, HasSubstr("limit"));
  Json json = ToJson(*r);
  EXPECT_FALSE(json["configured"].get<bool>());
  EXPECT_TRUE(json.contains("not_configured_reason"));
  // Within the slot limit but too much metadata for the simulator to build.
  r = RunPool({.free_bytes = int64_t{1} << 40, .kib_per_token = 1, .block_size = 1});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->configured);
  EXPECT_THAT(r->not_configured_reason, HasSubstr("host memory"));
  EXPECT_EQ(RunPool({.free_bytes = -1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace folio::cachemgr::sim

#include "common/scheduler_epoch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::HasSubstr;

TEST(EpochFenceTest, NewerEpochTakesOverAndOlderIsRefused) {
  EpochFence fence("worker rank 0");
  EXPECT_EQ(fence.current(), 0u);
  EXPECT_TRUE(fence.Admit(10, "ExecuteStep").ok());
  EXPECT_TRUE(fence.Admit(10, "ExecuteStep").ok());  // the same scheduler again
  EXPECT_EQ(fence.current(), 10u);
  EXPECT_TRUE(fence.Admit(20, "AllocateKvCache").ok());
  EXPECT_EQ(fence.current(), 20u);
  const absl::Status old = fence.Admit(10, "ExecuteStep");
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("epoch 10"));
  EXPECT_THAT(old.message(), HasSubstr("newer scheduler (epoch 20)"));
  EXPECT_TRUE(IsFenced(old));
  EXPECT_EQ(fence.current(), 20u) << "a refused call changes nothing";
}

TEST(EpochFenceTest, ZeroIsUnfenced) {
  EpochFence fence("cache manager");
  EXPECT_TRUE(fence.Admit(5, "Step").ok());
  EXPECT_TRUE(fence.Admit(0, "Step").ok());
  EXPECT_EQ(fence.current(), 5u);
}

TEST(EpochFenceTest, IsFencedOnlyForRefusals) {
  EXPECT_FALSE(IsFenced(absl::OkStatus()));
  EXPECT_FALSE(IsFenced(absl::FailedPreconditionError("the KV cache is not allocated yet")));
  EXPECT_FALSE(IsFenced(absl::UnavailableError("fenced: not this code")));
}

TEST(NewSchedulerEpochTest, NewerThanWhatWasSeen) {
  const absl::Time now = absl::FromUnixMicros(1'000'000);
  EXPECT_EQ(NewSchedulerEpoch(0, now), 1'000'000u);
  EXPECT_EQ(NewSchedulerEpoch(999'999, now), 1'000'000u);
  // A clock behind the previous scheduler's: still newer.
  EXPECT_EQ(NewSchedulerEpoch(5'000'000, now), 5'000'001u);
  EXPECT_GT(NewSchedulerEpoch(0, absl::UnixEpoch()), 0u);
}

}  // namespace
}  // namespace folio

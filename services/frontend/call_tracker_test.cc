#include "services/frontend/call_tracker.h"

#include <memory>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace folio::frontend {
namespace {

TEST(CallTrackerTest, CountsHoldsUntilTheyAreGone) {
  CallTracker tracker;
  EXPECT_EQ(tracker.live(), 0);
  EXPECT_TRUE(tracker.WaitIdle(absl::ZeroDuration()));
  {
    CallTracker::Hold a = CallTracker::Enter(&tracker);
    CallTracker::Hold b = a.Another();
    EXPECT_EQ(tracker.live(), 2);
    EXPECT_FALSE(tracker.WaitIdle(absl::Milliseconds(10)));
    CallTracker::Hold moved = std::move(b);
    EXPECT_EQ(tracker.live(), 2);
    moved = CallTracker::Hold();  // assigning releases what it held
    EXPECT_EQ(tracker.live(), 1);
  }
  EXPECT_EQ(tracker.live(), 0);
  EXPECT_TRUE(tracker.WaitIdle(absl::ZeroDuration()));
}

TEST(CallTrackerTest, AnEmptyHoldTracksNothing) {
  CallTracker::Hold none = CallTracker::Enter(nullptr);
  CallTracker::Hold another = none.Another();
  CallTracker tracker;
  EXPECT_EQ(tracker.live(), 0);
}

TEST(CallTrackerTest, WaitIdleWakesWhenTheLastHoldGoesOnAnotherThread) {
  CallTracker tracker;
  auto hold = std::make_unique<CallTracker::Hold>(CallTracker::Enter(&tracker));
  absl::Notification waiting;
  std::thread releaser([&] {
    waiting.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(20));
    hold.reset();
  });
  waiting.Notify();
  EXPECT_TRUE(tracker.WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(tracker.live(), 0);
  releaser.join();
}

TEST(CallTrackerTest, AHoldMayOutliveItsTracker) {
  CallTracker::Hold hold;
  {
    CallTracker tracker;
    hold = CallTracker::Enter(&tracker);
    EXPECT_FALSE(tracker.WaitIdle(absl::Milliseconds(1)));
  }
  hold = CallTracker::Hold();  // releases into the state the tracker shared; no crash
}

}  // namespace
}  // namespace folio::frontend

// ResumableStream against a FakeScheduler, with a CallTracker: the tracker must count the
// stream until gRPC has let go of it, past the listener's OnEnd (an owner that waits for
// its CallTracker before going must not race gRPC's clean-up of the call).
#include "services/frontend/resumable_stream.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "services/frontend/call_tracker.h"
#include "services/frontend/fake_scheduler.h"

namespace folio::frontend::testing {
namespace {

namespace ipb = folio::internal::v1;

class CountingListener : public ResumableStream::Listener {
 public:
  explicit CountingListener(const CallTracker* tracker) : tracker_(tracker) {}
  void OnEvent(const ipb::ScheduleEvent& event) override {
    events.fetch_add(1);
    stream->Read();
  }
  void OnEnd(const grpc::Status& status) override {
    end_status = status;
    live_at_end = tracker_->live();
    ended.Notify();
  }

  ResumableStream* stream = nullptr;
  std::atomic<int> events{0};
  grpc::Status end_status;
  int live_at_end = -1;
  absl::Notification ended;

 private:
  const CallTracker* const tracker_;
};

TEST(ResumableStreamTest, TheTrackerCountsTheStreamUntilGrpcLetsGoOfIt) {
  std::unique_ptr<FakeScheduler> fake = FakeScheduler::Start(ipb::ClusterInfo());
  ASSERT_NE(fake, nullptr);
  fake->SetScript(TokensScript({5, 6, 7}, ipb::FINISH_REASON_STOP, 3));
  auto stub = ipb::Scheduler::NewStub(
      grpc::CreateChannel(fake->address(), grpc::InsecureChannelCredentials()));
  routing::StubRouter router(stub.get());
  CallTracker tracker;
  CountingListener listener(&tracker);
  ipb::ScheduleRequest request;
  request.add_prompt_token_ids(1);
  request.set_n(1);
  {
    std::shared_ptr<ResumableStream> s = ResumableStream::Start(
        &router, request, absl::InfiniteFuture(), ResumeOptions(), &listener, &tracker);
    listener.stream = s.get();
    EXPECT_GE(tracker.live(), 2);  // the stream and its attempt
    s->Read();
    s->Release();
  }  // the stream holds itself until its end
  ASSERT_TRUE(listener.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(listener.end_status.ok()) << listener.end_status.error_message();
  EXPECT_EQ(listener.events.load(), 3);
  // OnEnd runs inside the call's last callback: the call is not gone yet.
  EXPECT_GE(listener.live_at_end, 1);
  EXPECT_TRUE(tracker.WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(tracker.live(), 0);
}

}  // namespace
}  // namespace folio::frontend::testing

// Test-only: FakeScheduler, an in-process folio.internal.v1.Scheduler that plays scripted
// event streams (with delays, hangs and error statuses) and records what it saw: the
// requests, their deadlines and whether the caller cancelled them. Runs on its own
// grpc::Server (sync API) on a loopback port.
//
// Thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_FAKE_SCHEDULER_H_
#define FOLIO_SERVICES_FRONTEND_FAKE_SCHEDULER_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/server.h"

namespace folio::frontend::testing {

// What one Generate call plays.
struct Script {
  std::vector<folio::internal::v1::ScheduleEvent> events;
  absl::Duration delay_between_events = absl::ZeroDuration();
  // After the events: wait until the caller cancels (or 30 s pass) instead of returning.
  bool hang_after_events = false;
  grpc::Status final_status = grpc::Status::OK;
};

// One event per token; the last carries `finish` and every one carries the prompt counts.
Script TokensScript(const std::vector<int32_t>& tokens, folio::internal::v1::FinishReason finish,
                    int32_t num_prompt_tokens, int32_t num_cached_prompt_tokens = 0);

class FakeScheduler final : public folio::internal::v1::Scheduler::Service {
 public:
  // Starts serving on 127.0.0.1:`port` (0: a free port). Null when the port is taken.
  static std::unique_ptr<FakeScheduler> Start(folio::internal::v1::ClusterInfo info, int port = 0);
  ~FakeScheduler() override;

  std::string address() const;
  // Every following Generate call plays `script`.
  void SetScript(Script script);
  // The next Generate call plays `script` (queued ones first, in order, then SetScript's).
  void QueueScript(Script script);

  struct CallRecord {
    folio::internal::v1::ScheduleRequest request;
    std::optional<absl::Time> deadline;  // nullopt: none
    bool cancelled = false;              // the caller cancelled (or its deadline passed)
    bool done = false;                   // the handler returned
  };
  std::vector<CallRecord> calls() const;
  // Waits until `n` calls have returned; false on timeout.
  bool WaitForDoneCalls(int n, absl::Duration timeout) const;

  // GetReplicaState answers this load, with the block events of `cachemgr` (a cache
  // manager's channel; null: none) relayed as the real scheduler relays them.
  void SetReplicaState(int32_t num_running, int32_t num_waiting, int64_t num_tokens_pending,
                       std::shared_ptr<grpc::ChannelInterface> cachemgr);

  grpc::Status GetClusterInfo(grpc::ServerContext* ctx,
                              const folio::internal::v1::GetClusterInfoRequest* request,
                              folio::internal::v1::ClusterInfo* response) override;
  grpc::Status Generate(grpc::ServerContext* ctx,
                        const folio::internal::v1::ScheduleRequest* request,
                        grpc::ServerWriter<folio::internal::v1::ScheduleEvent>* writer) override;
  grpc::Status GetReplicaState(grpc::ServerContext* ctx,
                               const folio::internal::v1::ReplicaStateRequest* request,
                               folio::internal::v1::ReplicaState* response) override;

 private:
  explicit FakeScheduler(folio::internal::v1::ClusterInfo info) : info_(std::move(info)) {}
  void MarkDone(size_t index, bool cancelled);

  const folio::internal::v1::ClusterInfo info_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
  std::deque<Script> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<CallRecord> calls_ ABSL_GUARDED_BY(mu_);
  folio::internal::v1::ReplicaState load_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<folio::internal::v1::CacheManager::Stub> cachemgr_ ABSL_GUARDED_BY(mu_);
};

}  // namespace folio::frontend::testing

#endif  // FOLIO_SERVICES_FRONTEND_FAKE_SCHEDULER_H_

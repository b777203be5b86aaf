// SchedulerService: the gRPC face of the Scheduler (folio.internal.v1.Scheduler). It
// checks requests, maps them to native types, and streams each request's events back
// through a write reactor. Callbacks never block: Submit and Cancel only post to the
// scheduler's inbox, and events arrive on the scheduler's loop thread, which queues
// them for the reactor.
//
// Thread-safe.
#ifndef FOLIO_SERVICES_SCHEDULER_SERVICE_H_
#define FOLIO_SERVICES_SCHEDULER_SERVICE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <memory>
#include <string>

#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "services/scheduler/scheduler.h"

namespace folio::scheduler {

class SchedulerService final : public folio::internal::v1::Scheduler::CallbackService {
 public:
  // `cachemgr` (may be null: GetReplicaState then reports no block events) is the channel
  // to this replica's cache manager, whose block events GetReplicaState relays.
  explicit SchedulerService(std::shared_ptr<grpc::ChannelInterface> cachemgr = nullptr);

  // Until this is called, every RPC answers UNAVAILABLE ("the cluster is starting").
  // `scheduler` must outlive the service.
  void Start(Scheduler* scheduler, const folio::internal::v1::ClusterInfo& info);

  grpc::ServerUnaryReactor* GetClusterInfo(grpc::CallbackServerContext* ctx,
                                           const folio::internal::v1::GetClusterInfoRequest* req,
                                           folio::internal::v1::ClusterInfo* resp) override;
  grpc::ServerWriteReactor<folio::internal::v1::ScheduleEvent>* Generate(
      grpc::CallbackServerContext* ctx, const folio::internal::v1::ScheduleRequest* req) override;
  grpc::ServerUnaryReactor* GetSchedulerStats(
      grpc::CallbackServerContext* ctx, const folio::internal::v1::GetSchedulerStatsRequest* req,
      folio::internal::v1::SchedulerStats* resp) override;
  // The load, and the cache manager's block events relayed (an asynchronous call of its
  // own, so the handler never blocks; a cache manager that does not answer within 1 s
  // leaves block_events unset and block_events_error set).
  grpc::ServerUnaryReactor* GetReplicaState(grpc::CallbackServerContext* ctx,
                                            const folio::internal::v1::ReplicaStateRequest* req,
                                            folio::internal::v1::ReplicaState* resp) override;

 private:
  // Null until Start().
  Scheduler* ready() const;

  const std::unique_ptr<folio::internal::v1::CacheManager::Stub> cachemgr_;  // may be null
  const std::string incarnation_id_;
  mutable absl::Mutex mu_;
  Scheduler* scheduler_ ABSL_GUARDED_BY(mu_) = nullptr;
  folio::internal::v1::ClusterInfo info_ ABSL_GUARDED_BY(mu_);
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SERVICE_H_

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
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "services/scheduler/scheduler.h"

namespace folio::scheduler {

class SchedulerService final : public folio::internal::v1::Scheduler::CallbackService {
 public:
  SchedulerService() = default;

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

 private:
  // Null until Start().
  Scheduler* ready() const;

  mutable absl::Mutex mu_;
  Scheduler* scheduler_ ABSL_GUARDED_BY(mu_) = nullptr;
  folio::internal::v1::ClusterInfo info_ ABSL_GUARDED_BY(mu_);
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SERVICE_H_

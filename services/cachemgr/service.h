// CacheManagerService: the gRPC face of KvCacheManager (folio.internal.v1.CacheManager).
// It maps protobuf messages to the domain types and back, maps Status to gRPC codes, and
// keeps the service's metrics. No allocation logic lives here.
//
// Thread-safe: every handler takes mu_ for the few microseconds a step needs and never
// waits on anything else, so the callback threads do not block.
#ifndef FOLIO_SERVICES_CACHEMGR_SERVICE_H_
#define FOLIO_SERVICES_CACHEMGR_SERVICE_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/scheduler_epoch.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr {

class CacheManagerService final : public folio::internal::v1::CacheManager::CallbackService {
 public:
  // `defaults` fills what a Configure request leaves unset. `registry` must outlive the
  // service.
  CacheManagerService(const CacheConfig& defaults, MetricsRegistry* registry);

  // Called (outside the lock) each time a pool is configured; the process uses it to
  // report SERVING.
  void SetOnConfigured(std::function<void()> callback);

  // Configures a pool directly (the --num_blocks start-up path).
  absl::Status Configure(const CacheConfig& requested);

  grpc::ServerUnaryReactor* Configure(grpc::CallbackServerContext* ctx,
                                      const folio::internal::v1::ConfigureRequest* request,
                                      folio::internal::v1::ConfigureResponse* response) override;
  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* ctx,
                                 const folio::internal::v1::CacheStepRequest* request,
                                 folio::internal::v1::CacheStepResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const folio::internal::v1::GetStatsRequest* request,
                                     folio::internal::v1::CacheStats* response) override;
  grpc::ServerUnaryReactor* Reset(grpc::CallbackServerContext* ctx,
                                  const folio::internal::v1::ResetRequest* request,
                                  folio::internal::v1::ResetResponse* response) override;
  grpc::ServerUnaryReactor* GetBlockEvents(
      grpc::CallbackServerContext* ctx, const folio::internal::v1::BlockEventsRequest* request,
      folio::internal::v1::BlockEvents* response) override;

 private:
  struct Metrics {
    explicit Metrics(MetricsRegistry* registry);
    Gauge& blocks_total;
    Gauge& blocks_free;
    Gauge& blocks_used;
    Gauge& blocks_cached_evictable;
    Gauge& kv_usage_ratio;
    Gauge& slot_utilization_ratio;
    Gauge& sequences;
    Counter& prefix_query_tokens;
    Counter& prefix_hit_tokens;
    Counter& grant_failures;
    Counter& cow_copies;
    Counter& window_releases;
    Counter& forks;
    Gauge& shared_refs;
    Gauge& blocks_used_peak;
    Gauge& host_blocks_total;
    Gauge& host_blocks_used;
    Counter& host_stores;
    Counter& host_loads;
    Counter& host_evictions;
    Counter& host_dropped;
    Counter& host_partial_loads;
    Counter& swap_outs;
    Gauge& disk_blocks_total;
    Gauge& disk_blocks_used;
    Counter& disk_spills;
    Counter& disk_loads;
    Counter& disk_evictions;
    Counter& disk_adopted;
    Counter& disk_missing;
    Counter& disk_bad_files;
    Counter& disk_banned;
    Family<Counter>& step_errors;
    Histogram& step_latency;
  };

  absl::StatusOr<folio::internal::v1::CacheStepResponse> DoStep(
      const folio::internal::v1::CacheStepRequest& request);
  void RefreshGauges();
  // Builds (or keeps) disk_ as `config` asks and attaches it below `host` (may be null: no
  // disk tier then). A directory this process cannot use leaves the tier off, with a
  // warning: the pool and the host tier work without it.
  void AttachDisk(const CacheConfig& config, HostTier* host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CacheConfig defaults_;
  const std::string incarnation_id_;  // this process's, for GetStats (common/incarnation.h)
  Metrics metrics_;
  std::function<void()> on_configured_;
  absl::Mutex mu_;
  std::unique_ptr<KvCacheManager> manager_ ABSL_GUARDED_BY(mu_);
  // The counts the metrics last saw, of the tier of this generation (HostTier::generation).
  HostTierStats host_seen_ ABSL_GUARDED_BY(mu_);
  uint64_t host_seen_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The disk tier (disk_tier.h): built by Configure when the workers offer one, attached
  // to every host tier built after it; the counts the metrics last saw of it.
  std::shared_ptr<DiskTier> disk_ ABSL_GUARDED_BY(mu_);
  DiskTierStats disk_seen_ ABSL_GUARDED_BY(mu_);
  // Counts the pools built (Configure and Reset each build one): with the incarnation,
  // the pool id of GetBlockEvents.
  int64_t pool_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Refuses Configure, Step and Reset from a scheduler older than the newest one seen
  // (common/scheduler_epoch.h).
  EpochFence fence_{"cache manager"};
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_SERVICE_H_

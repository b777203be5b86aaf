#include "services/scheduler/pool_usage_gauge.h"

#include "absl/time/clock.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"

namespace folio::scheduler {

void AddPoolUsageGauge(MetricsRegistry* registry, std::shared_ptr<grpc::Channel> cachemgr,
                       absl::Duration timeout) {
  Gauge& usage = registry->AddGauge(
      "folio_scheduler_kv_usage_ratio",
      "KV blocks in use over all KV blocks of this replica (0 to 1), read from the cache "
      "manager at scrape time.");
  // gRPC stubs are thread-safe; a shared_ptr keeps this one alive inside the hook.
  std::shared_ptr<folio::internal::v1::CacheManager::Stub> stub =
      folio::internal::v1::CacheManager::NewStub(std::move(cachemgr));
  registry->AddCollectHook([stub, timeout, &usage] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    folio::internal::v1::CacheStats stats;
    grpc::Status status = stub->GetStats(&ctx, folio::internal::v1::GetStatsRequest(), &stats);
    if (!status.ok()) {
      LOG_EVERY_N(WARNING, 100) << "folio_scheduler_kv_usage_ratio: GetStats failed: "
                                << status.error_message();
      return;
    }
    if (stats.configured() && stats.num_blocks_total() > 0) {
      usage.Set(static_cast<double>(stats.num_blocks_used()) / stats.num_blocks_total());
    }
  });
}

}  // namespace folio::scheduler

// Start-up of one model replica, as DESIGN.md orders it: every worker rank reports its
// model and KV budget; the block count is what the smallest rank can hold; the workers
// allocate their KV tensors and the cache manager its pool, with the same count and
// block size. A pool that cannot hold one sequence of the full context is an error.
#ifndef FOLIO_SERVICES_SCHEDULER_CLUSTER_SETUP_H_
#define FOLIO_SERVICES_SCHEDULER_CLUSTER_SETUP_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "folio/internal/v1/scheduler.pb.h"
#include "services/scheduler/grpc_clients.h"

namespace folio::scheduler {

struct ClusterSetupOptions {
  int32_t block_size = 16;
  int32_t max_model_len = 0;   // 0: the model's context length
  int32_t max_num_blocks = 0;  // 0: as many as the smallest rank holds
  folio::internal::v1::AllocationPolicy policy = folio::internal::v1::ALLOCATION_POLICY_PAGED;
  bool disable_prefix_caching = false;
  bool speculative = false;  // every rank must verify proposed tokens
  bool draft_model = false;  // --speculative=draft: every rank must have a draft model
  bool swap_preemption = false;  // --preemption=swap: the workers must have a host KV tier
  absl::Duration startup_timeout = absl::Minutes(5);  // waiting for services to answer
};

// Runs the start-up sequence; returns what the frontends are told.
absl::StatusOr<folio::internal::v1::ClusterInfo> SetUpCluster(const ClusterSetupOptions& options,
                                                              GrpcWorkerClient& workers,
                                                              GrpcCacheClient& cache);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_CLUSTER_SETUP_H_

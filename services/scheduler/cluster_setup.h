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
  // Tokens a step computes at most (--max_num_batched_tokens): with window layer groups, a
  // sequence's window tables hold the blocks of its window and of two steps' grants.
  int32_t max_num_batched_tokens = 512;
  absl::Duration startup_timeout = absl::Minutes(5);  // waiting for services to answer
};

// The most blocks a sequence of up to `max_len` tokens holds at once in the window tables
// of groups with `windows` (cachemgr paged_policy.h): a group keeps the blocks from its
// window's first before the committed tokens to the end of what is granted, at most two
// steps of `max_batched_tokens` past them (pipelined steps), and never more than the
// whole sequence's.
int64_t WindowBlocksPerSequence(const std::vector<int32_t>& windows, int32_t max_len,
                                int32_t block_size, int32_t max_batched_tokens);

// Runs the start-up sequence; returns what the frontends are told.
absl::StatusOr<folio::internal::v1::ClusterInfo> SetUpCluster(const ClusterSetupOptions& options,
                                                              GrpcWorkerClient& workers,
                                                              GrpcCacheClient& cache);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_CLUSTER_SETUP_H_

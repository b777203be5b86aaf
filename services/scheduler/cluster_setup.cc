#include "services/scheduler/cluster_setup.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/scheduler_epoch.h"
#include "glog/logging.h"

namespace folio::scheduler {
namespace pb = folio::internal::v1;

namespace {

// Waits for the service behind the stub to answer (wait_for_ready), up to the deadline.
template <typename Call>
absl::Status CallWithStartupDeadline(absl::Time deadline, const std::string& what, Call call) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(absl::ToChronoTime(deadline));
  grpc::Status s = call(&ctx);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(what, ": ", s.error_message(), " (",
                                               s.error_code(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t WindowBlocksPerSequence(const std::vector<int32_t>& windows, int32_t max_len,
                                int32_t block_size, int32_t max_batched_tokens) {
  const int64_t whole = (int64_t{max_len} + block_size - 1) / block_size;
  int64_t blocks = 0;
  for (int32_t w : windows) {
    // From the block of committed - w + 1 to that of committed + 2 steps, inclusive.
    const int64_t held = (2 * int64_t{max_batched_tokens} + w + block_size - 2) / block_size + 1;
    blocks += std::min(whole, held);
  }
  return blocks;
}

absl::StatusOr<pb::ClusterInfo> SetUpCluster(const ClusterSetupOptions& options,
                                             GrpcWorkerClient& workers, GrpcCacheClient& cache) {
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  std::vector<pb::WorkerInfo> infos(workers.num_ranks());
  for (int rank = 0; rank < workers.num_ranks(); ++rank) {
    LOG(INFO) << "waiting for worker rank " << rank;
    absl::Status s = CallWithStartupDeadline(
        deadline, absl::StrCat("worker rank ", rank, " GetWorkerInfo"), [&](auto* ctx) {
          return workers.stub(rank).GetWorkerInfo(ctx, pb::GetWorkerInfoRequest(), &infos[rank]);
        });
    if (!s.ok()) return s;
  }
  const pb::WorkerInfo& first = infos[0];
  const std::vector<int32_t> windows(first.kv_windows().begin(), first.kv_windows().end());
  if (!windows.empty() && options.policy == pb::ALLOCATION_POLICY_CONTIGUOUS) {
    return absl::FailedPreconditionError(
        "the workers keep their sliding-window layers in window layer groups, which the "
        "contiguous policy does not have: start them with --window_layer_groups=false, or "
        "use --policy=paged");
  }
  int64_t num_blocks = std::numeric_limits<int32_t>::max();
  for (int rank = 0; rank < workers.num_ranks(); ++rank) {
    const pb::WorkerInfo& info = infos[rank];
    if (info.model().name() != first.model().name() ||
        info.model().num_layers() != first.model().num_layers()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker rank ", rank, " serves a different model"));
    }
    if (info.tp_size() != workers.num_ranks() || info.tp_rank() != rank) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker rank ", rank, " (address #", rank + 1, " of --workers) reports itself "
          "as tensor-parallel rank ", info.tp_rank(), " of ", info.tp_size(), ", but the "
          "scheduler has ", workers.num_ranks(), " worker(s): list every rank of the replica, "
          "rank 0 first, and start each with --tp_size=", workers.num_ranks()));
    }
    if (absl::Status s = CheckSpeculativeRank(info, first, rank, options.speculative,
                                              options.draft_model, /*came_back=*/false);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckLayerGroups(info, windows, rank, /*came_back=*/false); !s.ok()) {
      return s;
    }
    if (info.kv_bytes_per_token() <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker rank ", rank, " reports no KV bytes per token"));
    }
    const int64_t bytes_per_block = info.kv_bytes_per_token() * options.block_size;
    num_blocks = std::min(num_blocks, info.kv_cache_budget_bytes() / bytes_per_block);
  }
  if (options.max_num_blocks > 0) num_blocks = std::min<int64_t>(num_blocks, options.max_num_blocks);

  int32_t max_model_len = first.model().max_seq_len();
  if (options.max_model_len > 0) {
    if (options.max_model_len > max_model_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max_model_len ", options.max_model_len, " exceeds the model's context of ",
                       max_model_len, " tokens"));
    }
    max_model_len = options.max_model_len;
  }
  const int64_t window_blocks = WindowBlocksPerSequence(
      windows, max_model_len, options.block_size, options.max_num_batched_tokens);
  const int64_t needed =
      (max_model_len + options.block_size - 1) / options.block_size + window_blocks;
  if (num_blocks < needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the KV pool holds ", num_blocks, " blocks of ", options.block_size, " tokens (",
        num_blocks * options.block_size, " tokens), but one sequence of the full context (",
        max_model_len, " tokens) needs ", needed, " blocks",
        window_blocks > 0 ? absl::StrCat(" (", window_blocks, " of its window layer groups)")
                          : "",
        "; give the workers more --kv_cache_bytes or lower --max_model_len"));
  }

  // A scheduler that restarted finds the replica its predecessor left (workers allocated,
  // the pool configured, perhaps with its sequences): it adopts it under a newer epoch, so
  // that the predecessor, should it still run, is refused from here on
  // (common/scheduler_epoch.h), then allocates and resets as on a first start.
  pb::CacheStats before;
  absl::Status s = CallWithStartupDeadline(deadline, "cache manager GetStats", [&](auto* ctx) {
    return cache.stub().GetStats(ctx, pb::GetStatsRequest(), &before);
  });
  if (!s.ok()) return s;
  uint64_t newest = before.scheduler_epoch();
  int adopted = before.configured() ? 1 : 0;
  for (const pb::WorkerInfo& w : infos) {
    newest = std::max<uint64_t>(newest, w.scheduler_epoch());
    if (w.num_blocks() > 0) ++adopted;
  }
  const uint64_t epoch = NewSchedulerEpoch(newest, absl::Now());
  workers.set_epoch(epoch);
  cache.set_epoch(epoch);
  if (adopted > 0 || newest > 0) {
    LOG(WARNING) << "adopting a replica set up by an earlier scheduler (epoch " << newest
                 << "): " << adopted << " of " << infos.size() + 1
                 << " processes already set up; taking over as epoch " << epoch;
  } else {
    LOG(INFO) << "scheduler epoch " << epoch;
  }

  // What recovery sets up again when a process comes back (recovery.h).
  std::vector<std::string> incarnations;
  int64_t newest_group = 0;
  for (const pb::WorkerInfo& w : infos) {
    incarnations.push_back(w.incarnation_id());
    newest_group = std::max(newest_group, w.group().generation());
  }
  workers.SetAllocation(static_cast<int32_t>(num_blocks), options.block_size,
                        std::move(incarnations), windows);
  if (workers.num_ranks() > 1) {
    // The ranks join no group at start-up: a rank that restarts must not read an old
    // group's addresses, so every group is formed here, with a generation of its own.
    LOG(INFO) << "forming the tensor-parallel group of " << workers.num_ranks() << " ranks";
    if (absl::Status st = workers.FormGroup(newest_group, deadline); !st.ok()) return st;
  }
  // Under the epoch: from here on the predecessor's steps are refused.
  if (absl::Status st = workers.AllocateEveryRank(deadline); !st.ok()) return st;
  // The predecessor's sequences are nobody's now, and its prefix cache names KV the
  // workers no longer hold: the pool starts again from scratch (Configure refuses live
  // sequences).
  if (before.configured()) {
    LOG(WARNING) << "the cache manager holds " << before.num_sequences()
                 << " sequences of an earlier scheduler; resetting its pool";
    pb::ResetRequest reset_request;
    reset_request.set_scheduler_epoch(epoch);
    pb::ResetResponse reset;
    s = CallWithStartupDeadline(deadline, "cache manager Reset", [&](auto* ctx) {
      return cache.stub().Reset(ctx, reset_request, &reset);
    });
    if (!s.ok()) return s;
  }
  pb::ConfigureRequest configure;
  configure.set_num_blocks(static_cast<int32_t>(num_blocks));
  configure.set_block_size(options.block_size);
  configure.set_policy(options.policy);
  configure.set_disable_prefix_caching(options.disable_prefix_caching);
  configure.set_scheduler_epoch(epoch);
  configure.mutable_windows()->Add(windows.begin(), windows.end());
  if (!windows.empty()) {
    LOG(INFO) << "window layer groups: " << windows.size() << " (window "
              << windows.front() << " tokens): their blocks go back to the pool as "
              << "sequences outgrow the window";
  }
  // Set whether or not the disk tier is on: a worker may come back with one (recovery).
  configure.set_disk_tier_ranks(workers.num_ranks());
  const OffloadTiers tiers = workers.tiers();
  if (tiers.host_blocks > 0) {
    if (options.policy == pb::ALLOCATION_POLICY_CONTIGUOUS || options.disable_prefix_caching) {
      LOG(WARNING) << "the workers have a host KV tier (--kv_host_bytes), but it needs the "
                      "paged policy with prefix caching on: it stays unused";
    } else {
      configure.set_host_tier_blocks(tiers.host_blocks);
      configure.set_host_tier_id(tiers.host_tier_id);
      LOG(INFO) << "host KV tier: " << tiers.host_blocks << " blocks (segments "
                << tiers.host_tier_id << ")";
      if (tiers.disk_blocks > 0) {
        configure.set_disk_tier_dir(tiers.disk_dir);
        configure.set_disk_tier_blocks(tiers.disk_blocks);
        LOG(INFO) << "disk KV tier: " << tiers.disk_blocks << " blocks in " << tiers.disk_dir;
      }
    }
  }
  if (options.swap_preemption && configure.host_tier_blocks() == 0) {
    return absl::FailedPreconditionError(
        "--preemption=swap keeps a preempted request's KV in the host KV tier, but this "
        "replica has none: start the workers with --kv_host_bytes (the tier also needs "
        "--policy=paged and prefix caching), or use --preemption=recompute");
  }
  pb::ConfigureResponse configured;
  LOG(INFO) << "waiting for the cache manager";
  s = CallWithStartupDeadline(deadline, "cache manager Configure", [&](auto* ctx) {
    return cache.stub().Configure(ctx, configure, &configured);
  });
  if (!s.ok()) return s;
  pb::CacheStats stats;
  s = CallWithStartupDeadline(deadline, "cache manager GetStats", [&](auto* ctx) {
    return cache.stub().GetStats(ctx, pb::GetStatsRequest(), &stats);
  });
  if (!s.ok()) return s;
  cache.SetConfiguration(configure, stats.incarnation_id());

  pb::ClusterInfo info;
  *info.mutable_model() = first.model();
  *info.mutable_tokenizer() = first.tokenizer();
  info.set_max_model_len(max_model_len);
  info.set_block_size(options.block_size);
  info.set_num_blocks(static_cast<int32_t>(num_blocks));
  info.set_tp_size(workers.num_ranks());
  info.mutable_kv_windows()->Add(windows.begin(), windows.end());
  for (int32_t w : windows) {
    info.add_window_held_blocks(static_cast<int32_t>(WindowBlocksPerSequence(
        {w}, max_model_len, options.block_size, options.max_num_batched_tokens)));
  }
  LOG(INFO) << "cluster ready: model " << first.model().name() << ", " << num_blocks
            << " KV blocks of " << options.block_size << " tokens, max_model_len "
            << max_model_len << ", " << workers.num_ranks() << " worker rank(s)";
  return info;
}

}  // namespace folio::scheduler

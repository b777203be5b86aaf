#include "services/cachemgr/service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/incarnation.h"
#include "common/grpc_status.h"
#include "glog/logging.h"

namespace folio::cachemgr {
namespace pb = folio::internal::v1;

namespace {

StepRequest FromProto(const pb::CacheStepRequest& in) {
  StepRequest out;
  for (const pb::Resolve& r : in.resolves()) {
    out.resolves.push_back(ResolveOp{SeqId{r.seq_id()}, r.pos(), r.token_id()});
  }
  for (const pb::Commit& c : in.commits()) {
    out.commits.push_back(CommitOp{SeqId{c.seq_id()}, c.num_computed_tokens()});
  }
  for (const pb::Truncate& t : in.truncates()) {
    out.truncates.push_back(TruncateOp{SeqId{t.seq_id()}, t.num_tokens()});
  }
  for (uint64_t id : in.frees()) out.frees.push_back(SeqId{id});
  for (uint64_t id : in.swap_outs()) out.swap_outs.push_back(SeqId{id});
  for (const pb::Fork& f : in.forks()) {
    out.forks.push_back(ForkOp{SeqId{f.parent_seq_id()}, SeqId{f.child_seq_id()}});
  }
  for (const pb::Create& c : in.creates()) {
    out.creates.push_back(CreateOp{.seq = SeqId{c.seq_id()},
                                   .max_len = c.max_len(),
                                   .prompt = {c.prompt_token_ids().begin(),
                                              c.prompt_token_ids().end()},
                                   .request_id = c.request_id()});
  }
  for (const pb::Grant& g : in.grants()) {
    out.grants.push_back(GrantOp{.seq = SeqId{g.seq_id()},
                                 .start_pos = g.start_pos(),
                                 .token_ids = {g.token_ids().begin(), g.token_ids().end()}});
  }
  out.transfers_done = in.transfers_done();
  return out;
}

// A host tier the pool cannot take (the contiguous policy, or prefix caching off, say by
// this process's own flags) is left unused rather than refused: the workers keep their
// segments, nothing is stored.
CacheConfig WithUsableHostTier(CacheConfig config) {
  if (config.host_blocks > 0 && !KvCacheManager::TakesHostTier(config)) {
    LOG(WARNING) << "the workers offer a host KV tier of " << config.host_blocks
                 << " blocks, but it needs the paged policy with prefix caching on: unused";
    config.host_blocks = 0;
    config.host_tier_id.clear();
  }
  return config;
}

void ToProto(const BlockTransfer& in, pb::BlockTransfer* out) {
  switch (in.kind) {
    case BlockTransfer::Kind::kStore: out->set_kind(pb::BlockTransfer::STORE); break;
    case BlockTransfer::Kind::kLoad: out->set_kind(pb::BlockTransfer::LOAD); break;
    case BlockTransfer::Kind::kSpill: out->set_kind(pb::BlockTransfer::SPILL); break;
    case BlockTransfer::Kind::kLoadDisk: out->set_kind(pb::BlockTransfer::LOAD_DISK); break;
  }
  out->set_block(in.block.value);
  out->set_host_slot(in.host_slot);
  out->set_ticket(in.ticket);
  out->set_hash_hi(in.hash_hi);
  out->set_hash_lo(in.hash_lo);
  out->mutable_tokens()->Add(in.tokens.begin(), in.tokens.end());
}

void ToProto(const SeqResult& in, pb::SequenceResult* out) {
  out->set_seq_id(in.seq.value);
  out->set_status(in.status == SeqStatus::kOk ? pb::SequenceResult::OK
                                              : pb::SequenceResult::NO_ROOM);
  out->set_table_offset(in.table_offset);
  for (BlockId b : in.entries) out->add_entries(b.value);
  for (const BlockCopy& c : in.copies) {
    pb::BlockCopy* copy = out->add_copies();
    copy->set_src(c.src.value);
    copy->set_dst(c.dst.value);
  }
  out->set_num_tokens(in.num_tokens);
  out->set_num_cached_tokens(in.num_cached_tokens);
  for (const WindowResult& w : in.windows) {
    pb::WindowTableResult* window = out->add_windows();
    window->set_first_block(w.first_block);
    window->set_table_offset(w.table_offset);
    for (BlockId b : w.entries) window->add_entries(b.value);
  }
}

pb::AllocationPolicy ToProto(PolicyKind kind) {
  return kind == PolicyKind::kPaged ? pb::ALLOCATION_POLICY_PAGED
                                    : pb::ALLOCATION_POLICY_CONTIGUOUS;
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

CacheManagerService::Metrics::Metrics(MetricsRegistry* r)
    : blocks_total(r->AddGauge("folio_cachemgr_blocks_capacity", "KV blocks in the pool (total).")),
      blocks_free(r->AddGauge("folio_cachemgr_blocks_free",
                              "Free KV blocks, including cached-evictable ones.")),
      blocks_used(r->AddGauge("folio_cachemgr_blocks_used", "KV blocks held by sequences.")),
      blocks_cached_evictable(r->AddGauge(
          "folio_cachemgr_blocks_cached_evictable",
          "Free KV blocks that still hold a prefix-cache entry (reusable until evicted).")),
      kv_usage_ratio(r->AddGauge("folio_cachemgr_kv_usage_ratio",
                                 "Used blocks over total blocks (0 to 1).")),
      slot_utilization_ratio(r->AddGauge(
          "folio_cachemgr_slot_utilization_ratio",
          "Token slots that hold a token over token slots allocated to sequences (0 to 1).")),
      sequences(r->AddGauge("folio_cachemgr_sequences", "Live sequences.")),
      prefix_query_tokens(r->AddCounter("folio_cachemgr_prefix_cache_queries_total",
                                        "Prompt tokens looked up in the prefix cache.")),
      prefix_hit_tokens(r->AddCounter("folio_cachemgr_prefix_cache_hits_total",
                                      "Prompt tokens found in the prefix cache.")),
      grant_failures(r->AddCounter("folio_cachemgr_grant_failures_total",
                                   "Creates, forks and grants answered NO_ROOM.")),
      cow_copies(r->AddCounter("folio_cachemgr_cow_copies_total",
                               "Blocks copied before a write (copy-on-write).")),
      window_releases(r->AddCounter(
          "folio_cachemgr_window_releases_total",
          "KV blocks window layer groups gave back as sequences outgrew their sliding "
          "window (Gemma's local layers).")),
      forks(r->AddCounter("folio_cachemgr_forks_total",
                          "Sequences forked (a child sharing its parent's blocks).")),
      shared_refs(r->AddGauge("folio_cachemgr_blocks_shared_refs",
                              "Blocks saved by sharing: over blocks in use, the sum of "
                              "(reference count - 1).")),
      blocks_used_peak(r->AddGauge("folio_cachemgr_blocks_used_peak",
                                   "The most KV blocks in use after any step since the pool "
                                   "was configured.")),
      host_blocks_total(r->AddGauge("folio_cachemgr_host_blocks_capacity",
                                    "Blocks the host-memory KV tier holds (0: no tier).")),
      host_blocks_used(r->AddGauge("folio_cachemgr_host_blocks_used",
                                   "Blocks of the host-memory KV tier holding a cached block.")),
      host_stores(r->AddCounter("folio_cachemgr_host_stores_total",
                                "Computed blocks written through to the host-memory tier.")),
      host_loads(r->AddCounter("folio_cachemgr_host_loads_total",
                               "Blocks a prefix lookup loaded back from the host-memory tier "
                               "instead of recomputing them.")),
      host_evictions(r->AddCounter("folio_cachemgr_host_evictions_total",
                                   "Host-tier entries dropped to make room (least recently "
                                   "used first).")),
      host_dropped(r->AddCounter("folio_cachemgr_host_dropped_unconfirmed_total",
                                 "Host-tier stores dropped at a reset because no answered "
                                 "step confirmed them.")),
      host_partial_loads(r->AddCounter(
          "folio_cachemgr_host_partial_loads_total",
          "Partly filled last blocks of swapped-out sequences loaded back from the "
          "host-memory tier (--preemption=swap).")),
      swap_outs(r->AddCounter("folio_cachemgr_swap_outs_total",
                              "Preempted sequences freed with their KV kept in the host-memory "
                              "tier (--preemption=swap).")),
      disk_blocks_total(r->AddGauge("folio_cachemgr_disk_blocks_capacity",
                                    "Blocks the disk KV tier may hold (0: no tier).")),
      disk_blocks_used(r->AddGauge("folio_cachemgr_disk_blocks_used",
                                   "Blocks the disk KV tier's index holds.")),
      disk_spills(r->AddCounter("folio_cachemgr_disk_spills_total",
                                "Blocks the host tier evicted, written to the disk tier.")),
      disk_loads(r->AddCounter("folio_cachemgr_disk_loads_total",
                               "Blocks a prefix lookup loaded from the disk tier into the pool.")),
      disk_evictions(r->AddCounter("folio_cachemgr_disk_evictions_total",
                                   "Disk-tier blocks removed to make room (least recently used).")),
      disk_adopted(r->AddCounter("folio_cachemgr_disk_adopted_total",
                                 "Blocks found on disk that the index did not hold (written "
                                 "by another replica or an earlier run).")),
      disk_missing(r->AddCounter("folio_cachemgr_disk_missing_total",
                                 "Indexed disk blocks whose files were gone at a lookup (a "
                                 "spill that failed, a file another replica removed): misses.")),
      disk_bad_files(r->AddCounter("folio_cachemgr_disk_bad_files_total",
                                   "Disk block files found damaged or written for another "
                                   "model at a lookup: removed, misses.")),
      disk_banned(r->AddCounter("folio_cachemgr_disk_banned_total",
                                "Disk blocks a worker could not load (a damaged payload, an "
                                "unreadable file): dropped with their files, never found "
                                "again; each one cost a pool reset and a recompute.")),
      step_errors(r->AddCounterFamily("folio_cachemgr_step_errors_total",
                                      "Step RPCs rejected, by gRPC status code.", {"code"})),
      step_latency(r->AddHistogram("folio_cachemgr_step_latency_seconds",
                                   "Time to apply one step RPC, in seconds.",
                                   ExponentialBuckets(1e-6, 2.5, 16))) {}

CacheManagerService::CacheManagerService(const CacheConfig& defaults, MetricsRegistry* registry)
    : defaults_(defaults), incarnation_id_(NewIncarnationId()), metrics_(registry) {
  registry->AddCollectHook([this] { RefreshGauges(); });
  LOG(INFO) << "cache manager incarnation " << incarnation_id_;
}

void CacheManagerService::SetOnConfigured(std::function<void()> callback) {
  on_configured_ = std::move(callback);
}

void CacheManagerService::RefreshGauges() {
  absl::MutexLock lock(&mu_);
  if (manager_ == nullptr) return;
  const CacheStats s = manager_->Stats();
  metrics_.blocks_total.Set(s.pool.num_blocks_total);
  metrics_.blocks_free.Set(s.pool.num_blocks_free);
  metrics_.blocks_used.Set(s.pool.num_blocks_used);
  metrics_.blocks_cached_evictable.Set(s.pool.num_blocks_cached_evictable);
  metrics_.kv_usage_ratio.Set(static_cast<double>(s.pool.num_blocks_used) /
                              s.pool.num_blocks_total);
  metrics_.slot_utilization_ratio.Set(
      s.pool.num_slots_allocated == 0
          ? 0.0
          : static_cast<double>(s.pool.num_tokens_stored) / s.pool.num_slots_allocated);
  metrics_.sequences.Set(static_cast<double>(s.num_sequences));
  metrics_.shared_refs.Set(static_cast<double>(s.pool.num_shared_refs));
  metrics_.blocks_used_peak.Set(s.num_blocks_used_peak);
  metrics_.host_blocks_total.Set(s.host.num_slots);
  metrics_.host_blocks_used.Set(s.host.num_used);
  // The tier's own counts start again when it is built anew: count what is new since the
  // last look at the same tier.
  const HostTier* tier = manager_->host_tier().get();
  const uint64_t generation = tier == nullptr ? 0 : tier->generation();
  if (generation != host_seen_generation_) {
    host_seen_ = HostTierStats{};
    host_seen_generation_ = generation;
  }
  auto add = [](Counter& counter, int64_t now, int64_t* last) {
    counter.Increment(static_cast<double>(now - *last));
    *last = now;
  };
  add(metrics_.host_stores, s.host.num_stores, &host_seen_.num_stores);
  add(metrics_.host_loads, s.host.num_loads, &host_seen_.num_loads);
  add(metrics_.host_evictions, s.host.num_evictions, &host_seen_.num_evictions);
  add(metrics_.host_dropped, s.host.num_dropped_unconfirmed, &host_seen_.num_dropped_unconfirmed);
  add(metrics_.host_partial_loads, s.host.num_partial_loads, &host_seen_.num_partial_loads);
  metrics_.disk_blocks_total.Set(disk_ == nullptr ? 0 : disk_->num_blocks());
  if (disk_ != nullptr) {
    const DiskTierStats d = disk_->Stats();
    metrics_.disk_blocks_used.Set(d.num_used);
    add(metrics_.disk_spills, d.num_spills, &disk_seen_.num_spills);
    add(metrics_.disk_loads, d.num_loads, &disk_seen_.num_loads);
    add(metrics_.disk_evictions, d.num_evictions, &disk_seen_.num_evictions);
    add(metrics_.disk_adopted, d.num_adopted, &disk_seen_.num_adopted);
    add(metrics_.disk_missing, d.num_missing, &disk_seen_.num_missing);
    add(metrics_.disk_bad_files, d.num_bad_files, &disk_seen_.num_bad_files);
    add(metrics_.disk_banned, d.num_banned, &disk_seen_.num_banned);
  } else {
    metrics_.disk_blocks_used.Set(0);
  }
}

void CacheManagerService::AttachDisk(const CacheConfig& config, HostTier* host) {
  if (config.disk_blocks <= 0 || config.disk_dir.empty()) {
    disk_.reset();
  } else if (host == nullptr) {
    LOG(WARNING) << "the workers offer a disk KV tier (" << config.disk_dir
                 << "), but it lies below the host tier, which this pool does not use: unused";
    disk_.reset();
  } else if (disk_ == nullptr || disk_->dir() != config.disk_dir ||
             disk_->num_blocks() != config.disk_blocks || disk_->num_ranks() != config.disk_ranks) {
    absl::StatusOr<std::unique_ptr<DiskTier>> disk =
        DiskTier::Open(config.disk_dir, config.disk_ranks, config.block_size, config.disk_blocks);
    if (disk.ok()) {
      disk_ = *std::move(disk);
      disk_seen_ = DiskTierStats{};
      LOG(INFO) << "disk KV tier: " << config.disk_blocks << " blocks of " << config.disk_ranks
                << " file(s) each in " << config.disk_dir;
    } else {
      LOG(WARNING) << "the disk KV tier is off: " << disk.status().message();
      disk_.reset();
    }
  }
  if (host != nullptr) host->set_disk(disk_);
}

absl::Status CacheManagerService::Configure(const CacheConfig& requested) {
  const CacheConfig config = WithUsableHostTier(requested);
  // Checked whole before anything is built or changed.
  if (absl::Status s = KvCacheManager::CheckConfig(config, config.host_blocks > 0); !s.ok()) {
    return s;
  }
  bool kept = false;
  {
    absl::MutexLock lock(&mu_);
    if (manager_ != nullptr && manager_->Stats().num_sequences > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the pool has ", manager_->Stats().num_sequences,
          " live sequences; call Reset before configuring a new pool"));
    }
    // The host tier outlives the pool while it still describes the same segments.
    std::shared_ptr<HostTier> old = manager_ == nullptr ? nullptr : manager_->host_tier();
    kept = config.host_blocks > 0 && old != nullptr && old->num_slots() == config.host_blocks &&
           old->id() == config.host_tier_id && manager_->config().block_size == config.block_size;
    std::shared_ptr<HostTier> host;
    if (kept) {
      old->DropUnconfirmed();
      host = old;
    } else if (config.host_blocks > 0) {
      host = std::make_shared<HostTier>(config.host_blocks, config.block_size,
                                        config.host_tier_id);
    }
    AttachDisk(config, host.get());
    absl::StatusOr<std::unique_ptr<KvCacheManager>> manager = KvCacheManager::Create(config, host);
    CHECK(manager.ok()) << manager.status();  // CheckConfig passed
    manager_ = std::move(*manager);
    ++pool_generation_;
  }
  LOG(INFO) << "pool configured: " << config.num_blocks << " blocks of " << config.block_size
            << " tokens, policy " << PolicyKindName(config.policy)
            << (config.host_blocks > 0
                    ? absl::StrCat("; host tier of ", config.host_blocks, " blocks (segment ",
                                   config.host_tier_id, kept ? ", kept" : ", new", ")")
                    : std::string());
  if (on_configured_) on_configured_();
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* CacheManagerService::Configure(grpc::CallbackServerContext* ctx,
                                                         const pb::ConfigureRequest* request,
                                                         pb::ConfigureResponse* response) {
  CacheConfig config = defaults_;
  config.num_blocks = request->num_blocks();
  if (request->block_size() != 0) config.block_size = request->block_size();
  if (request->policy() == pb::ALLOCATION_POLICY_PAGED) config.policy = PolicyKind::kPaged;
  if (request->policy() == pb::ALLOCATION_POLICY_CONTIGUOUS) {
    config.policy = PolicyKind::kContiguous;
  }
  if (request->disable_prefix_caching()) {
    config.prefix_caching = PagedPolicy::PrefixCaching::kDisabled;
  }
  if (request->round_to_power_of_two()) config.rounding = ContiguousPolicy::Rounding::kPowerOfTwo;
  config.host_blocks = request->host_tier_blocks();
  config.host_tier_id = request->host_tier_id();
  config.disk_dir = request->disk_tier_dir();
  config.disk_blocks = request->disk_tier_blocks();
  config.disk_ranks = std::max(1, request->disk_tier_ranks());
  config.windows.assign(request->windows().begin(), request->windows().end());
  if (absl::Status fenced = fence_.Admit(request->scheduler_epoch(), "Configure"); !fenced.ok()) {
    LOG(WARNING) << fenced;
    return Finish(ctx, fenced);
  }
  if (request->block_size() < 0) {
    return Finish(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "block_size must be positive, got ", request->block_size())));
  }
  const absl::Status status = Configure(config);
  if (status.ok()) {
    response->set_num_blocks(config.num_blocks);
    response->set_block_size(config.block_size);
    response->set_policy(ToProto(config.policy));
  }
  return Finish(ctx, status);
}

absl::StatusOr<pb::CacheStepResponse> CacheManagerService::DoStep(
    const pb::CacheStepRequest& request) {
  if (absl::Status fenced = fence_.Admit(request.scheduler_epoch(), "Step"); !fenced.ok()) {
    return fenced;
  }
  const StepRequest native = FromProto(request);
  absl::StatusOr<StepResponse> result;
  int64_t swap_outs = 0;
  int64_t window_releases = 0;
  {
    absl::MutexLock lock(&mu_);
    if (manager_ == nullptr) {
      return absl::FailedPreconditionError("the block pool is not configured yet");
    }
    const int64_t swapped = manager_->num_swap_outs();
    const int64_t released = manager_->num_window_releases();
    result = manager_->Step(native);
    swap_outs = manager_->num_swap_outs() - swapped;
    window_releases = manager_->num_window_releases() - released;
  }
  if (!result.ok()) return result.status();
  metrics_.swap_outs.Increment(static_cast<double>(swap_outs));
  metrics_.window_releases.Increment(static_cast<double>(window_releases));
  pb::CacheStepResponse response;
  auto count = [&](const SeqResult& r) {
    if (r.status == SeqStatus::kNoRoom) metrics_.grant_failures.Increment();
    metrics_.cow_copies.Increment(static_cast<double>(r.copies.size()));
  };
  for (const SeqResult& r : result->forks) {
    count(r);
    if (r.status == SeqStatus::kOk) metrics_.forks.Increment();
    ToProto(r, response.add_forks());
  }
  for (size_t i = 0; i < result->creates.size(); ++i) {
    const SeqResult& r = result->creates[i];
    count(r);
    metrics_.prefix_query_tokens.Increment(static_cast<double>(native.creates[i].prompt.size()));
    metrics_.prefix_hit_tokens.Increment(r.num_cached_tokens);
    LOG(INFO) << "request " << (native.creates[i].request_id.empty() ? "-" : native.creates[i].request_id)
              << ": sequence " << r.seq.value
              << (r.status == SeqStatus::kOk
                      ? absl::StrCat(" created, ", r.num_cached_tokens, " of ",
                                     native.creates[i].prompt.size(), " prompt tokens cached")
                      : std::string(" refused: no room"));
    ToProto(r, response.add_creates());
  }
  for (const SeqResult& r : result->grants) {
    count(r);
    ToProto(r, response.add_grants());
  }
  for (const BlockTransfer& t : result->transfers) ToProto(t, response.add_transfers());
  return response;
}

grpc::ServerUnaryReactor* CacheManagerService::Step(grpc::CallbackServerContext* ctx,
                                                    const pb::CacheStepRequest* request,
                                                    pb::CacheStepResponse* response) {
  const absl::Time start = absl::Now();
  absl::StatusOr<pb::CacheStepResponse> result = DoStep(*request);
  metrics_.step_latency.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (!result.ok()) {
    metrics_.step_errors.WithLabels({absl::StatusCodeToString(result.status().code())})
        .Increment();
    LOG(WARNING) << "step " << request->step_id() << " rejected: " << result.status();
    return Finish(ctx, result.status());
  }
  *response = std::move(*result);
  return Finish(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheManagerService::GetStats(grpc::CallbackServerContext* ctx,
                                                        const pb::GetStatsRequest* request,
                                                        pb::CacheStats* response) {
  response->set_incarnation_id(incarnation_id_);
  response->set_scheduler_epoch(fence_.current());
  absl::MutexLock lock(&mu_);
  if (manager_ == nullptr) {
    response->set_configured(false);
    return Finish(ctx, absl::OkStatus());
  }
  const CacheStats s = manager_->Stats();
  response->set_configured(true);
  response->set_policy(ToProto(manager_->config().policy));
  response->set_block_size(manager_->config().block_size);
  response->set_num_blocks_total(s.pool.num_blocks_total);
  response->set_num_blocks_free(s.pool.num_blocks_free);
  response->set_num_blocks_used(s.pool.num_blocks_used);
  response->set_num_blocks_cached_evictable(s.pool.num_blocks_cached_evictable);
  response->set_num_slots_allocated(s.pool.num_slots_allocated);
  response->set_num_tokens_stored(s.pool.num_tokens_stored);
  response->set_num_sequences(s.num_sequences);
  response->set_prefix_query_tokens(s.prefix_query_tokens);
  response->set_prefix_hit_tokens(s.prefix_hit_tokens);
  response->set_num_grant_failures(s.num_grant_failures);
  response->set_num_cow_copies(s.num_cow_copies);
  response->set_num_evictions(s.pool.num_evictions);
  response->set_num_forks(s.num_forks);
  response->set_num_shared_block_refs(s.pool.num_shared_refs);
  response->set_num_blocks_used_peak(s.num_blocks_used_peak);
  response->set_num_swap_outs(s.num_swap_outs);
  response->set_num_window_releases(s.pool.num_window_releases);
  if (manager_->host_tier() != nullptr) {
    response->set_host_tier_partial_stores(s.host.num_partial_stores);
    response->set_host_tier_partial_loads(s.host.num_partial_loads);
    response->set_host_tier_blocks_total(s.host.num_slots);
    response->set_host_tier_blocks_used(s.host.num_used);
    response->set_host_tier_stores(s.host.num_stores);
    response->set_host_tier_loads(s.host.num_loads);
    response->set_host_tier_evictions(s.host.num_evictions);
    response->set_host_tier_dropped_unconfirmed(s.host.num_dropped_unconfirmed);
    response->set_host_tier_id(manager_->host_tier()->id());
  }
  if (s.disk.num_blocks > 0) {
    response->set_disk_tier_blocks_total(s.disk.num_blocks);
    response->set_disk_tier_blocks_used(s.disk.num_used);
    response->set_disk_tier_spills(s.disk.num_spills);
    response->set_disk_tier_loads(s.disk.num_loads);
    response->set_disk_tier_evictions(s.disk.num_evictions);
    response->set_disk_tier_adopted(s.disk.num_adopted);
    response->set_disk_tier_missing(s.disk.num_missing);
    response->set_disk_tier_bad_files(s.disk.num_bad_files);
    response->set_disk_tier_banned(s.disk.num_banned);
  }
  return Finish(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheManagerService::Reset(grpc::CallbackServerContext* ctx,
                                                     const pb::ResetRequest* request,
                                                     pb::ResetResponse* response) {
  if (absl::Status fenced = fence_.Admit(request->scheduler_epoch(), "Reset"); !fenced.ok()) {
    LOG(WARNING) << fenced;
    return Finish(ctx, fenced);
  }
  absl::MutexLock lock(&mu_);
  if (manager_ == nullptr) {
    return Finish(ctx, absl::FailedPreconditionError("the block pool is not configured yet"));
  }
  // A fresh manager with the same configuration: every block free, no cached prefix. The
  // host tier stays (its bytes are in segments that outlive the workers), less the stores
  // never confirmed; a new segment id means its bytes are gone.
  CacheConfig config = manager_->config();
  std::shared_ptr<HostTier> host = manager_->host_tier();
  std::string tier;
  if (request->bad_disk_blocks_size() > 0 && disk_ != nullptr) {
    for (const pb::BlockHashId& b : request->bad_disk_blocks()) disk_->Ban(BlockHash{b.hi(), b.lo()});
    LOG(WARNING) << "disk KV tier: " << request->bad_disk_blocks_size()
                 << " block(s) the workers could not load dropped for good";
  }
  if (request->set_host_tier()) {
    // The workers' segments changed: what the tier held is gone.
    config.host_blocks = request->host_tier_blocks();
    config.host_tier_id = request->host_tier_id();
    config = WithUsableHostTier(config);
    if (absl::Status s = KvCacheManager::CheckConfig(config, config.host_blocks > 0); !s.ok()) {
      return Finish(ctx, s);
    }
    host = config.host_blocks > 0 ? std::make_shared<HostTier>(config.host_blocks,
                                                               config.block_size,
                                                               config.host_tier_id)
                                  : nullptr;
    tier = absl::StrCat("; host tier now ", config.host_blocks, " empty blocks (segments ",
                        config.host_tier_id.empty() ? "none" : config.host_tier_id, ")");
    if (host != nullptr) host->set_disk(disk_);  // the disk keeps its blocks
  } else if (host != nullptr) {
    host->DropUnconfirmed();
    tier = absl::StrCat("; host tier kept: ", host->Stats().num_used, " blocks");
  }
  if (request->set_disk_tier()) {
    // The workers' disk settings changed: the tier is opened where they now write (what
    // the files there hold is indexed again), or is gone.
    config.disk_dir = request->disk_tier_dir();
    config.disk_blocks = request->disk_tier_blocks();
    AttachDisk(config, host.get());
    absl::StrAppend(&tier, "; disk tier ",
                    disk_ == nullptr ? std::string("off")
                                     : absl::StrCat("of ", disk_->num_blocks(), " blocks in ",
                                                    disk_->dir()));
  }
  absl::StatusOr<std::unique_ptr<KvCacheManager>> manager =
      KvCacheManager::Create(config, std::move(host));
  CHECK(manager.ok()) << manager.status();  // the configuration it had, or checked above
  manager_ = std::move(*manager);
  ++pool_generation_;
  LOG(INFO) << "pool reset" << tier;
  return Finish(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* CacheManagerService::GetBlockEvents(
    grpc::CallbackServerContext* ctx, const pb::BlockEventsRequest* request,
    pb::BlockEvents* response) {
  constexpr int32_t kDefaultMaxEvents = 4096;
  if (request->max_events() < 0) {
    return Finish(ctx, absl::InvalidArgumentError(absl::StrCat(
                           "max_events must be >= 0, got ", request->max_events())));
  }
  const int32_t max_events = request->max_events() > 0 ? request->max_events() : kDefaultMaxEvents;
  absl::MutexLock lock(&mu_);
  if (manager_ == nullptr) {
    response->set_configured(false);
    return Finish(ctx, absl::OkStatus());
  }
  const CacheStats s = manager_->Stats();
  response->set_configured(true);
  response->set_pool_id(absl::StrCat(incarnation_id_, "/", pool_generation_));
  response->set_block_size(manager_->config().block_size);
  response->set_num_blocks_total(s.pool.num_blocks_total);
  response->set_num_blocks_free(s.pool.num_blocks_free);
  response->set_num_blocks_cached_evictable(s.pool.num_blocks_cached_evictable);
  const BlockPool* pool = manager_->prefix_pool();
  if (pool == nullptr) {  // no prefix cache: always the (empty) snapshot
    response->set_snapshot(true);
    return Finish(ctx, absl::OkStatus());
  }
  const BlockEventLog& log = pool->events();
  response->set_last_seq(log.last_seq());
  std::optional<std::vector<BlockEvent>> events;
  if (request->pool_id() == response->pool_id()) {
    events = log.ReadAfter(request->after_seq(), max_events);
  }
  if (!events.has_value()) {  // another pool, or fallen behind the log: the whole index
    response->set_snapshot(true);
    for (const BlockHash& hash : manager_->CachedHashes()) {
      pb::BlockEvent* e = response->add_events();
      e->set_seq(log.last_seq());
      e->set_kind(pb::BlockEvent::STORED);
      e->set_hash_hi(hash.hi);
      e->set_hash_lo(hash.lo);
    }
    const std::vector<BlockHash> disk_only =
        request->disk_events() ? manager_->DiskOnlyHashes() : std::vector<BlockHash>{};
    for (const BlockHash& hash : disk_only) {
      pb::BlockEvent* e = response->add_events();
      e->set_seq(log.last_seq());
      e->set_kind(pb::BlockEvent::STORED_ON_DISK);
      e->set_hash_hi(hash.hi);
      e->set_hash_lo(hash.lo);
    }
    return Finish(ctx, absl::OkStatus());
  }
  for (const BlockEvent& event : *events) {
    pb::BlockEvent* e = response->add_events();
    e->set_seq(event.seq);
    switch (event.kind) {
      case BlockEvent::Kind::kStored: e->set_kind(pb::BlockEvent::STORED); break;
      case BlockEvent::Kind::kRemoved: e->set_kind(pb::BlockEvent::REMOVED); break;
      case BlockEvent::Kind::kStoredOnDisk:
        e->set_kind(request->disk_events() ? pb::BlockEvent::STORED_ON_DISK
                                           : pb::BlockEvent::REMOVED);
        break;
    }
    e->set_hash_hi(event.hash.hi);
    e->set_hash_lo(event.hash.lo);
  }
  if (!events->empty()) response->set_last_seq(events->back().seq);
  response->set_more(response->last_seq() < log.last_seq());
  return Finish(ctx, absl::OkStatus());
}

}  // namespace folio::cachemgr

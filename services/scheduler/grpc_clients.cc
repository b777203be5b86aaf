#include "services/scheduler/grpc_clients.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/kv_block_file.h"
#include "common/scheduler_epoch.h"
#include "glog/logging.h"

namespace folio::scheduler {
namespace pb = folio::internal::v1;

namespace {

// Recovery's probes (GetStats, GetWorkerInfo) answer at once from a live process.
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

cachemgr::SeqResult FromProto(const pb::SequenceResult& in) {
  cachemgr::SeqResult out;
  out.seq = cachemgr::SeqId{in.seq_id()};
  out.status = in.status() == pb::SequenceResult::OK ? cachemgr::SeqStatus::kOk
                                                     : cachemgr::SeqStatus::kNoRoom;
  out.table_offset = in.table_offset();
  for (int32_t b : in.entries()) out.entries.push_back(cachemgr::BlockId{b});
  for (const pb::BlockCopy& c : in.copies()) {
    out.copies.push_back({cachemgr::BlockId{c.src()}, cachemgr::BlockId{c.dst()}});
  }
  out.num_tokens = in.num_tokens();
  out.num_cached_tokens = in.num_cached_tokens();
  for (const pb::WindowTableResult& w : in.windows()) {
    cachemgr::WindowResult& window = out.windows.emplace_back();
    window.first_block = w.first_block();
    window.table_offset = w.table_offset();
    for (int32_t b : w.entries()) window.entries.push_back(cachemgr::BlockId{b});
  }
  return out;
}

}  // namespace

GrpcCacheClient::GrpcCacheClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
    : stub_(pb::CacheManager::NewStub(channel)), timeout_(timeout) {}

absl::StatusOr<cachemgr::StepResponse> GrpcCacheClient::Step(const cachemgr::StepRequest& request) {
  pb::CacheStepRequest req;
  req.set_step_id(absl::StrCat("s", next_step_++));
  req.set_scheduler_epoch(epoch_);
  for (const cachemgr::ResolveOp& r : request.resolves) {
    pb::Resolve* out = req.add_resolves();
    out->set_seq_id(r.seq.value);
    out->set_pos(r.pos);
    out->set_token_id(r.token_id);
  }
  for (const cachemgr::CommitOp& c : request.commits) {
    pb::Commit* out = req.add_commits();
    out->set_seq_id(c.seq.value);
    out->set_num_computed_tokens(c.num_computed_tokens);
  }
  for (const cachemgr::TruncateOp& t : request.truncates) {
    pb::Truncate* out = req.add_truncates();
    out->set_seq_id(t.seq.value);
    out->set_num_tokens(t.num_tokens);
  }
  for (cachemgr::SeqId id : request.frees) req.add_frees(id.value);
  for (cachemgr::SeqId id : request.swap_outs) req.add_swap_outs(id.value);
  for (const cachemgr::ForkOp& f : request.forks) {
    pb::Fork* out = req.add_forks();
    out->set_parent_seq_id(f.parent.value);
    out->set_child_seq_id(f.child.value);
  }
  for (const cachemgr::CreateOp& c : request.creates) {
    pb::Create* out = req.add_creates();
    out->set_seq_id(c.seq.value);
    out->set_max_len(c.max_len);
    out->mutable_prompt_token_ids()->Add(c.prompt.begin(), c.prompt.end());
    out->set_request_id(c.request_id);
  }
  for (const cachemgr::GrantOp& g : request.grants) {
    pb::Grant* out = req.add_grants();
    out->set_seq_id(g.seq.value);
    out->set_start_pos(g.start_pos);
    out->mutable_token_ids()->Add(g.token_ids.begin(), g.token_ids.end());
  }
  req.set_transfers_done(request.transfers_done);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  pb::CacheStepResponse resp;
  grpc::Status status = stub_->Step(&ctx, req, &resp);
  if (!status.ok()) return FromGrpcStatus(status);
  cachemgr::StepResponse out;
  for (const auto& r : resp.forks()) out.forks.push_back(FromProto(r));
  for (const auto& r : resp.creates()) out.creates.push_back(FromProto(r));
  for (const auto& r : resp.grants()) out.grants.push_back(FromProto(r));
  for (const pb::BlockTransfer& t : resp.transfers()) {
    cachemgr::BlockTransfer::Kind kind;
    switch (t.kind()) {
      case pb::BlockTransfer::STORE: kind = cachemgr::BlockTransfer::Kind::kStore; break;
      case pb::BlockTransfer::LOAD: kind = cachemgr::BlockTransfer::Kind::kLoad; break;
      case pb::BlockTransfer::SPILL: kind = cachemgr::BlockTransfer::Kind::kSpill; break;
      case pb::BlockTransfer::LOAD_DISK: kind = cachemgr::BlockTransfer::Kind::kLoadDisk; break;
      default:
        return absl::InternalError(
            absl::StrCat("cache manager sent a transfer of unknown kind ", t.kind()));
    }
    out.transfers.push_back(cachemgr::BlockTransfer{
        .kind = kind,
        .block = cachemgr::BlockId{t.block()},
        .host_slot = t.host_slot(),
        .ticket = t.ticket(),
        .hash_hi = t.hash_hi(),
        .hash_lo = t.hash_lo(),
        .tokens = std::vector<int32_t>(t.tokens().begin(), t.tokens().end())});
  }
  if (out.forks.size() != request.forks.size() || out.creates.size() != request.creates.size() ||
      out.grants.size() != request.grants.size()) {
    return absl::InternalError("cache manager answered a different number of results");
  }
  return out;
}

absl::Status GrpcCacheClient::Reset() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout_);
  pb::ResetRequest req;
  req.set_scheduler_epoch(epoch_);
  pb::ResetResponse resp;
  return FromGrpcStatus(stub_->Reset(&ctx, req, &resp));
}

void GrpcCacheClient::SetConfiguration(const pb::ConfigureRequest& configure,
                                       const std::string& incarnation_id) {
  configure_ = configure;
  incarnation_id_ = incarnation_id;
  host_tier_allowed_ = configure.policy() != pb::ALLOCATION_POLICY_CONTIGUOUS &&
                       !configure.disable_prefix_caching();
}

void GrpcCacheClient::NoteBadDiskBlocks(std::vector<std::pair<uint64_t, uint64_t>> blocks) {
  absl::MutexLock lock(&bad_mu_);
  bad_disk_blocks_.insert(bad_disk_blocks_.end(), blocks.begin(), blocks.end());
}

absl::Status GrpcCacheClient::ResetPool(pb::ResetRequest request) {
  request.set_scheduler_epoch(epoch_);
  std::vector<std::pair<uint64_t, uint64_t>> bad;
  {
    absl::MutexLock lock(&bad_mu_);
    bad.swap(bad_disk_blocks_);
  }
  for (const auto& [hi, lo] : bad) {
    pb::BlockHashId* b = request.add_bad_disk_blocks();
    b->set_hi(hi);
    b->set_lo(lo);
  }
  pb::ResetResponse reset;
  grpc::Status s = Cancellable(timeout_, [&](grpc::ClientContext* ctx) {
    return stub_->Reset(ctx, request, &reset);
  });
  if (!s.ok()) {
    absl::MutexLock lock(&bad_mu_);  // kept for the next try
    bad_disk_blocks_.insert(bad_disk_blocks_.end(), bad.begin(), bad.end());
    if (absl::Status st = FromGrpcStatus(s); IsFenced(st)) return st;
    return absl::UnavailableError(absl::StrCat("cache manager Reset: ", s.error_message()));
  }
  return absl::OkStatus();
}

absl::Status GrpcCacheClient::SetTiers(const OffloadTiers& offered) {
  // What the pool takes of them, as start-up does (cluster_setup.cc): no host tier when
  // --policy or prefix caching rule it out, no disk tier without the host tier.
  OffloadTiers tiers = offered;
  if (!host_tier_allowed_ || tiers.host_blocks <= 0) tiers = OffloadTiers{};
  if (tiers.disk_blocks <= 0 || tiers.disk_dir.empty()) {
    tiers.disk_blocks = 0;
    tiers.disk_dir.clear();
  }
  const bool host_changed = tiers.host_blocks != configure_.host_tier_blocks() ||
                            tiers.host_tier_id != configure_.host_tier_id();
  const bool disk_changed = tiers.disk_blocks != configure_.disk_tier_blocks() ||
                            tiers.disk_dir != configure_.disk_tier_dir();
  if (!host_changed && !disk_changed) return absl::OkStatus();
  pb::ResetRequest reset_request;
  reset_request.set_set_host_tier(host_changed);
  reset_request.set_host_tier_blocks(tiers.host_blocks);
  reset_request.set_host_tier_id(tiers.host_tier_id);
  reset_request.set_set_disk_tier(disk_changed);
  reset_request.set_disk_tier_dir(tiers.disk_dir);
  reset_request.set_disk_tier_blocks(tiers.disk_blocks);
  if (absl::Status s = ResetPool(reset_request); !s.ok()) return s;
  if (host_changed) {
    LOG(WARNING) << "the workers' host KV segments changed (" << tiers.host_blocks
                 << " blocks, " << (tiers.host_tier_id.empty() ? "none" : tiers.host_tier_id)
                 << "; were " << configure_.host_tier_blocks() << " blocks, "
                 << configure_.host_tier_id() << "): the host tier starts empty";
  }
  if (disk_changed) {
    LOG(WARNING) << "the workers' disk KV tier changed (" << tiers.disk_blocks << " blocks in "
                 << (tiers.disk_dir.empty() ? "none" : tiers.disk_dir) << "; were "
                 << configure_.disk_tier_blocks() << " blocks in "
                 << configure_.disk_tier_dir() << ")";
  }
  configure_.set_host_tier_blocks(tiers.host_blocks);
  configure_.set_host_tier_id(tiers.host_tier_id);
  configure_.set_disk_tier_blocks(tiers.disk_blocks);
  configure_.set_disk_tier_dir(tiers.disk_dir);
  return absl::OkStatus();
}

template <typename Call>
grpc::Status GrpcCacheClient::Cancellable(absl::Duration timeout, Call call) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  {
    absl::MutexLock lock(&cancel_mu_);
    if (cancelled_) return grpc::Status(grpc::StatusCode::CANCELLED, "the scheduler is stopping");
    in_flight_ = &ctx;
  }
  grpc::Status s = call(&ctx);
  absl::MutexLock lock(&cancel_mu_);
  in_flight_ = nullptr;
  return s;
}

void GrpcCacheClient::CancelRestore() {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_ = true;
  if (in_flight_ != nullptr) in_flight_->TryCancel();
}

absl::Status GrpcCacheClient::Restore() {
  pb::CacheStats stats;
  {
    grpc::Status s = Cancellable(std::min(timeout_, kProbeTimeout), [&](grpc::ClientContext* ctx) {
      return stub_->GetStats(ctx, pb::GetStatsRequest(), &stats);
    });
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("cache manager: ", s.error_message()));
    }
  }
  if (stats.configured() && stats.incarnation_id() == incarnation_id_) {
    if (absl::Status s = ResetPool(pb::ResetRequest()); !s.ok()) return s;
    LOG(INFO) << "cache manager answers again (same incarnation " << incarnation_id_
              << "); pool reset";
    return absl::OkStatus();
  }
  pb::ConfigureResponse configured;
  pb::ConfigureRequest configure = configure_;
  configure.set_scheduler_epoch(epoch_);
  grpc::Status s = Cancellable(timeout_, [&](grpc::ClientContext* ctx) {
    return stub_->Configure(ctx, configure, &configured);
  });
  if (!s.ok()) {
    if (absl::Status st = FromGrpcStatus(s); IsFenced(st)) return st;
    return absl::UnavailableError(absl::StrCat("cache manager Configure: ", s.error_message()));
  }
  LOG(INFO) << "cache manager is back (incarnation " << stats.incarnation_id() << ", was "
            << incarnation_id_ << "); pool configured again: " << configure_.num_blocks()
            << " blocks of " << configure_.block_size() << " tokens";
  incarnation_id_ = stats.incarnation_id();
  bool bad_blocks = false;
  {
    absl::MutexLock lock(&bad_mu_);
    bad_blocks = !bad_disk_blocks_.empty();
  }
  if (bad_blocks) {  // its disk index was rebuilt from the files: the bad ones go now
    if (absl::Status s = ResetPool(pb::ResetRequest()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

pb::ExecuteStepRequest ToProto(const worker::StepInput& step) {
  pb::ExecuteStepRequest req;
  for (const worker::BlockCopy& c : step.block_copies) {
    pb::BlockCopy* out = req.add_copies();
    out->set_src(c.src_block);
    out->set_dst(c.dst_block);
  }
  for (const worker::HostTransfer& t : step.host_transfers) {
    pb::BlockTransfer* out = req.add_transfers();
    switch (t.kind) {
      case worker::HostTransfer::Kind::kStore: out->set_kind(pb::BlockTransfer::STORE); break;
      case worker::HostTransfer::Kind::kLoad: out->set_kind(pb::BlockTransfer::LOAD); break;
      case worker::HostTransfer::Kind::kSpill: out->set_kind(pb::BlockTransfer::SPILL); break;
      case worker::HostTransfer::Kind::kLoadDisk:
        out->set_kind(pb::BlockTransfer::LOAD_DISK);
        break;
    }
    out->set_block(t.block);
    out->set_host_slot(t.host_slot);
    out->set_hash_hi(t.hash_hi);
    out->set_hash_lo(t.hash_lo);
    out->mutable_tokens()->Add(t.tokens.begin(), t.tokens.end());
  }
  for (const worker::SequenceStep& s : step.seqs) {
    pb::StepSequence* out = req.add_sequences();
    out->set_seq_id(s.seq_id);
    out->mutable_token_ids()->Add(s.token_ids.begin(), s.token_ids.end());
    out->set_start_pos(s.start_pos);
    out->mutable_block_table()->Add(s.block_table.begin(), s.block_table.end());
    for (const worker::WindowBlockTable& w : s.window_tables) {
      pb::WindowBlockTable* table = out->add_window_tables();
      table->set_first_block(w.first_block);
      table->mutable_blocks()->Add(w.blocks.begin(), w.blocks.end());
    }
    pb::SamplingParams* sp = out->mutable_sampling();
    sp->set_temperature(s.sampling.temperature);
    sp->set_top_p(s.sampling.top_p);
    sp->set_top_k(s.sampling.top_k);
    sp->set_min_p(s.sampling.min_p);
    sp->set_seed(s.sampling.seed);
    sp->set_presence_penalty(s.sampling.presence_penalty);
    sp->set_frequency_penalty(s.sampling.frequency_penalty);
    sp->set_repetition_penalty(s.sampling.repetition_penalty);
    for (const worker::LogitBias& b : s.sampling.logit_bias) {
      pb::LogitBias* out_bias = sp->add_logit_bias();
      out_bias->set_token_id(b.token_id);
      out_bias->set_bias(b.bias);
    }
    const worker::TokenHistory& h = s.history;
    if (!h.prompt_token_ids.empty() || !h.output_token_ids.empty() ||
        !h.suppressed_token_ids.empty() || !h.allowed_token_bitmask.empty()) {
      pb::TokenHistory* out_h = out->mutable_history();
      out_h->mutable_prompt_token_ids()->Add(h.prompt_token_ids.begin(), h.prompt_token_ids.end());
      out_h->mutable_output_token_ids()->Add(h.output_token_ids.begin(), h.output_token_ids.end());
      out_h->mutable_output_counts()->Add(h.output_counts.begin(), h.output_counts.end());
      out_h->mutable_suppressed_token_ids()->Add(h.suppressed_token_ids.begin(),
                                                 h.suppressed_token_ids.end());
      out_h->mutable_allowed_token_bitmask()->Add(h.allowed_token_bitmask.begin(),
                                                  h.allowed_token_bitmask.end());
    }
    out->set_num_samples(s.num_samples);
    out->set_num_logprobs(s.num_logprobs);
    out->set_num_candidates(s.num_candidates);
    out->set_sample_index(s.first_sample_index);
    if (s.num_draft_tokens > 0) out->set_num_draft_tokens(s.num_draft_tokens);
    if (s.synthetic_accepts >= 0) out->set_synthetic_accepts(s.synthetic_accepts);
    if (s.draft_by_model) out->set_draft_by_model(true);
    if (s.decode_from_pos >= 0) out->set_decode_from_pos(s.decode_from_pos);
  }
  return req;
}

worker::StepOutput FromProto(const pb::ExecuteStepResponse& response) {
  worker::StepOutput out;
  for (const pb::SequenceOutput& s : response.outputs()) {
    worker::SequenceOutput seq;
    seq.seq_id = s.seq_id();
    for (const pb::SampledToken& t : s.samples()) {
      worker::SampledToken token{t.token_id(), t.logprob(), {}};
      for (const auto& lp : t.top_logprobs()) token.top_logprobs.push_back({lp.token_id(), lp.logprob()});
      seq.samples.push_back(std::move(token));
    }
    for (const auto& c : s.candidates()) seq.candidates.push_back({c.token_id(), c.logprob()});
    out.seqs.push_back(std::move(seq));
  }
  return out;
}

absl::Status CheckLayerGroups(const pb::WorkerInfo& info, const std::vector<int32_t>& windows,
                              int rank, bool came_back) {
  const std::vector<int32_t> own(info.kv_windows().begin(), info.kv_windows().end());
  if (own == windows) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "worker rank ", rank, came_back ? " came back and" : "", " keeps ", own.size(),
      " window layer groups (windows ", absl::StrJoin(own, ","), "), the replica ",
      windows.size(), " (", absl::StrJoin(windows, ","), "): start every rank with the same "
      "--window_layer_groups and --kv_host_bytes"));
}

absl::Status CheckSpeculativeRank(const pb::WorkerInfo& info, const pb::WorkerInfo& rank0,
                                  int rank, bool verification, bool draft, bool came_back) {
  const std::string who = absl::StrCat("worker rank ", rank, came_back ? " came back and" : "");
  if (verification && !info.verifies_drafts()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " does not verify proposed tokens (speculative decoding runs on CPU workers; "
        "the CUDA backend and older binaries do not have it), and --speculative is on: start "
        "the scheduler with --speculative=off"));
  }
  if (draft && info.draft_model().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " has no draft model, and --speculative=draft is on: start the workers with "
        "--draft_model=FILE, or the scheduler with --speculative=ngram"));
  }
  if (draft && info.draft_model() != rank0.draft_model()) {
    // Rank 0 drafts for the group; the others must agree on which sequences it drafts.
    return absl::FailedPreconditionError(absl::StrCat(
        who, " has the draft model ", info.draft_model(), ", rank 0 ", rank0.draft_model(),
        ": give every rank the same --draft_model"));
  }
  return absl::OkStatus();
}

GrpcWorkerClient::GrpcWorkerClient(std::vector<std::shared_ptr<grpc::Channel>> ranks,
                                   absl::Duration timeout)
    : timeout_(timeout) {
  for (auto& channel : ranks) stubs_.push_back(pb::Worker::NewStub(channel));
}

void GrpcWorkerClient::SetAllocation(int32_t num_blocks, int32_t block_size,
                                     std::vector<std::string> incarnation_ids,
                                     std::vector<int32_t> windows) {
  windows_ = std::move(windows);
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  incarnation_ids_ = std::move(incarnation_ids);
  incarnation_ids_.resize(stubs_.size());
}

void GrpcWorkerClient::Track(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&cancel_mu_);
  in_flight_.push_back(ctx);
  if (cancelled_) ctx->TryCancel();
}

void GrpcWorkerClient::Untrack(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&cancel_mu_);
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), ctx), in_flight_.end());
}

void GrpcWorkerClient::CancelRestore() {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
}

namespace {

// One call to each rank at once, all under one deadline; their statuses by rank.
// `start(rank, ctx, done)` starts rank's async call with `done` as its callback.
template <typename Start>
std::vector<grpc::Status> CallEveryRank(int n, absl::Time deadline,
                                        const std::function<void(grpc::ClientContext*)>& track,
                                        const std::function<void(grpc::ClientContext*)>& untrack,
                                        Start start) {
  std::vector<grpc::ClientContext> ctxs(n);
  std::vector<grpc::Status> status(n);
  absl::BlockingCounter pending(n);
  for (int rank = 0; rank < n; ++rank) {
    ctxs[rank].set_deadline(absl::ToChronoTime(deadline));
    track(&ctxs[rank]);
    start(rank, &ctxs[rank], [&status, &pending, rank](grpc::Status s) {
      status[rank] = std::move(s);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  for (grpc::ClientContext& ctx : ctxs) untrack(&ctx);
  return status;
}

// The first failure of `status` as UNAVAILABLE "worker rank R <what>: ...", or OK.
absl::Status FirstFailure(const std::vector<grpc::Status>& status, absl::string_view what) {
  for (size_t rank = 0; rank < status.size(); ++rank) {
    if (!status[rank].ok()) {
      // A fencing refusal stays one (common/scheduler_epoch.h): this scheduler must stop.
      if (absl::Status s = FromGrpcStatus(status[rank]); IsFenced(s)) {
        return absl::FailedPreconditionError(
            absl::StrCat("worker rank ", rank, " ", what, ": ", s.message()));
      }
      return absl::UnavailableError(absl::StrCat("worker rank ", rank, " ", what, ": ",
                                                 status[rank].error_message()));
    }
  }
  return absl::OkStatus();
}

// A join among processes that all answer is quick; one that fails holds a rank's step
// thread until its deadline, so it is bounded well below a step's.
constexpr absl::Duration kJoinTimeout = absl::Seconds(10);

}  // namespace

absl::Status GrpcWorkerClient::FormGroup(int64_t newest, absl::Time deadline) {
  // Newer than any generation sent before too: a join of a failed attempt may still be
  // queued on a rank, not yet in its WorkerInfo.
  const int64_t generation = std::max({newest, group_generation_, last_generation_sent_}) + 1;
  last_generation_sent_ = generation;
  pb::JoinGroupRequest req;
  req.set_generation(generation);
  req.set_scheduler_epoch(epoch_);
  std::vector<pb::JoinGroupResponse> resps(num_ranks());
  const std::vector<grpc::Status> status = CallEveryRank(
      num_ranks(), deadline, [this](grpc::ClientContext* c) { Track(c); },
      [this](grpc::ClientContext* c) { Untrack(c); },
      [&](int rank, grpc::ClientContext* ctx, std::function<void(grpc::Status)> done) {
        stubs_[rank]->async()->JoinGroup(ctx, &req, &resps[rank], std::move(done));
      });
  if (absl::Status s = FirstFailure(status, absl::StrCat("JoinGroup(", generation, ")"));
      !s.ok()) {
    return s;
  }
  group_generation_ = generation;
  LOG(INFO) << "the " << num_ranks() << " worker ranks formed their tensor-parallel group "
            << "(generation " << generation << ")";
  return absl::OkStatus();
}

absl::Status GrpcWorkerClient::AllocateEveryRank(absl::Time deadline) {
  pb::AllocateKvCacheRequest req;
  req.set_num_blocks(num_blocks_);
  req.set_block_size(block_size_);
  req.set_scheduler_epoch(epoch_);
  std::vector<pb::AllocateKvCacheResponse> resps(num_ranks());
  const std::vector<grpc::Status> status = CallEveryRank(
      num_ranks(), deadline, [this](grpc::ClientContext* c) { Track(c); },
      [this](grpc::ClientContext* c) { Untrack(c); },
      [&](int rank, grpc::ClientContext* ctx, std::function<void(grpc::Status)> done) {
        stubs_[rank]->async()->AllocateKvCache(ctx, &req, &resps[rank], std::move(done));
      });
  if (absl::Status s = FirstFailure(status, "AllocateKvCache"); !s.ok()) return s;
  std::vector<std::string> ids;
  OffloadTiers tiers;
  tiers.host_blocks = resps.empty() ? 0 : resps[0].kv_host_blocks();
  for (const pb::AllocateKvCacheResponse& r : resps) {
    tiers.host_blocks = std::min(tiers.host_blocks, r.kv_host_blocks());
    ids.push_back(r.kv_host_segment_id());
  }
  if (tiers.host_blocks > 0) tiers.host_tier_id = absl::StrJoin(ids, ",");
  // The disk tier: one directory (the model's namespace) for every rank, the fewest blocks
  // a rank's budget holds; none unless every rank has it in the same place.
  tiers.disk_dir = resps.empty() ? "" : resps[0].kv_disk_dir();
  tiers.disk_blocks = resps.empty() ? 0 : resps[0].kv_disk_blocks();
  for (const pb::AllocateKvCacheResponse& r : resps) {
    if (r.kv_disk_dir() != tiers.disk_dir) {
      LOG(WARNING) << "the worker ranks' disk KV tiers differ (" << tiers.disk_dir << " and "
                   << r.kv_disk_dir() << "): the disk tier stays unused";
      tiers.disk_blocks = 0;
    }
    tiers.disk_blocks = std::min(tiers.disk_blocks, r.kv_disk_blocks());
  }
  if (tiers.disk_blocks <= 0) {
    tiers.disk_blocks = 0;
    tiers.disk_dir.clear();
  }
  tiers_ = std::move(tiers);
  return absl::OkStatus();
}

absl::Status GrpcWorkerClient::Restore() {
  const int n = num_ranks();
  std::vector<pb::WorkerInfo> infos(n);
  for (int rank = 0; rank < n; ++rank) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::min(timeout_, kProbeTimeout));
    Track(&ctx);
    grpc::Status s = stubs_[rank]->GetWorkerInfo(&ctx, pb::GetWorkerInfoRequest(), &infos[rank]);
    Untrack(&ctx);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("worker rank ", rank, ": ", s.error_message()));
    }
    if (absl::Status s = CheckSpeculativeRank(infos[rank], infos[0], rank,
                                              requires_verification_, requires_draft_model_,
                                              /*came_back=*/true);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckLayerGroups(infos[rank], windows_, rank, /*came_back=*/true);
        !s.ok()) {
      return s;
    }
  }
  bool regroup = false;
  bool regroup_for_new_process = false;
  bool reallocate = false;
  int64_t newest = 0;
  std::string why;
  for (int rank = 0; rank < n; ++rank) {
    const pb::WorkerInfo& info = infos[rank];
    const bool new_process = info.incarnation_id() != incarnation_ids_[rank];
    reallocate = reallocate || new_process || info.num_blocks() != num_blocks_ ||
                 info.block_size() != block_size_;
    if (n == 1) continue;
    newest = std::max(newest, info.group().generation());
    const bool group_ok = info.group().joined() && info.group().generation() == group_generation_;
    // The reason logged: a new process first, else the first rank whose group broke.
    if (new_process && !regroup_for_new_process) {
      why = absl::StrCat("rank ", rank, " is a new process (incarnation ", info.incarnation_id(),
                         ")");
      regroup_for_new_process = true;
    } else if (!group_ok && why.empty()) {
      why = absl::StrCat("rank ", rank, "'s group of generation ", info.group().generation(),
                         " is not usable: ", info.group().error());
    }
    regroup = regroup || new_process || !group_ok;
  }
  if (n > 1 && !regroup) {
    // A step that reached only some ranks leaves the others' collectives waiting for it
    // (until --tp_timeout_ms): a new group ends that wait, since each rank's join first
    // closes its old connections, which fails the peers' waiting collectives at once.
    for (int rank = 1; rank < n && !regroup; ++rank) {
      if (infos[rank].group().last_step_id() != infos[0].group().last_step_id()) {
        regroup = true;
        why = absl::StrCat("the ranks are out of step: rank 0 last started step \"",
                           infos[0].group().last_step_id(), "\", rank ", rank, " step \"",
                           infos[rank].group().last_step_id(), "\"");
      }
    }
  }
  if (!regroup && !reallocate) return absl::OkStatus();  // the same processes, pools in place
  if (regroup) {
    LOG(INFO) << "forming the tensor-parallel group of the " << n << " worker ranks again: "
              << why;
    if (absl::Status s = FormGroup(newest, absl::Now() + std::min(timeout_, kJoinTimeout));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = AllocateEveryRank(absl::Now() + timeout_); !s.ok()) return s;
  for (int rank = 0; rank < n; ++rank) {
    if (infos[rank].incarnation_id() != incarnation_ids_[rank]) {
      LOG(INFO) << "worker rank " << rank << " is back (incarnation " << infos[rank].incarnation_id()
                << ", was " << incarnation_ids_[rank] << ")";
    }
    incarnation_ids_[rank] = infos[rank].incarnation_id();
  }
  LOG(INFO) << "KV cache allocated again on " << n << " worker rank(s): " << num_blocks_
            << " blocks of " << block_size_ << " tokens";
  return absl::OkStatus();
}

// A step sent to every rank: the request, one call per rank, and how many are left.
// Allocated once per step and never moved: the calls' callbacks hold pointers into it.
struct GrpcWorkerClient::StepCalls {
  struct Call {
    grpc::ClientContext ctx;
    pb::ExecuteStepResponse resp;
    grpc::Status status;
  };
  explicit StepCalls(int n) : calls(n) {}
  pb::ExecuteStepRequest req;
  size_t num_seqs = 0;
  std::vector<Call> calls;
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  int first_failure ABSL_GUARDED_BY(mu) = -1;
};

GrpcWorkerClient::~GrpcWorkerClient() {
  CHECK(step_calls_ == nullptr) << "a worker step is still in flight";
}

absl::StatusOr<worker::StepOutput> GrpcWorkerClient::Execute(
    const worker::StepInput& step, const std::vector<std::string>& request_ids) {
  Start(step, request_ids);
  return Finish();
}

void GrpcWorkerClient::Start(const worker::StepInput& step,
                             const std::vector<std::string>& request_ids) {
  CHECK(step_calls_ == nullptr) << "a step is already in flight";
  const int n = num_ranks();
  step_calls_ = std::make_unique<StepCalls>(n);
  StepCalls& c = *step_calls_;
  c.req = ToProto(step);
  c.num_seqs = step.seqs.size();
  for (size_t i = 0; i < request_ids.size() && i < step.seqs.size(); ++i) {
    c.req.mutable_sequences(static_cast<int>(i))->set_request_id(request_ids[i]);
  }
  c.req.set_step_id(absl::StrCat("w", next_step_++));
  c.req.set_scheduler_epoch(epoch_);
  // Every rank runs the step at once (tensor-parallel ranks all-reduce with each other),
  // each call under the same deadline. The first rank to fail cancels the others (Finish):
  // a rank blocked in a collective on a dead peer would otherwise hold the step until the
  // deadline. A rank that does not answer fails the step with DEADLINE_EXCEEDED.
  {
    absl::MutexLock lock(&c.mu);
    c.pending = n;
  }
  const absl::Time deadline = absl::Now() + timeout_;
  for (int rank = 0; rank < n; ++rank) {
    StepCalls::Call& call = c.calls[rank];
    call.ctx.set_deadline(absl::ToChronoTime(deadline));
    stubs_[rank]->async()->ExecuteStep(
        &call.ctx, &c.req, &call.resp, [&c, &call, rank](grpc::Status s) {
          absl::MutexLock lock(&c.mu);
          call.status = std::move(s);
          if (!call.status.ok() && c.first_failure < 0) c.first_failure = rank;
          --c.pending;
        });
  }
}

absl::StatusOr<worker::StepOutput> GrpcWorkerClient::Finish() {
  CHECK(step_calls_ != nullptr) << "no step in flight";
  std::unique_ptr<StepCalls> done = std::move(step_calls_);
  StepCalls& c = *done;
  const int n = static_cast<int>(c.calls.size());
  int first_failure = -1;
  {
    absl::MutexLock lock(&c.mu);
    c.mu.Await(absl::Condition(
        +[](StepCalls* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return p->pending == 0 || p->first_failure >= 0;
        },
        &c));
  }
  // Cancel outside the lock (a cancelled call's callback takes it); a finished call
  // ignores it.
  for (StepCalls::Call& call : c.calls) call.ctx.TryCancel();
  {
    absl::MutexLock lock(&c.mu);
    c.mu.Await(absl::Condition(
        +[](StepCalls* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->pending == 0; }, &c));
    first_failure = c.first_failure;
  }
  if (first_failure >= 0) {
    // The first failure is the cause; the others are usually its echo (cancelled, or a
    // collective that lost its peer), listed after it.
    const grpc::Status& cause = c.calls[first_failure].status;
    std::string message = absl::StrCat("worker rank ", first_failure, " of ", n, ": ",
                                       cause.error_message());
    if (cause.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      absl::StrAppend(&message, " (no answer within the step deadline of ",
                      absl::FormatDuration(timeout_), ")");
    }
    // The disk blocks any rank could not load (every rank's, each once).
    std::vector<absl::Status> refusals;
    for (int rank = 0; rank < n; ++rank) {
      const grpc::Status& s = c.calls[rank].status;
      refusals.push_back(FromGrpcStatus(s));
      if (rank == first_failure || s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) {
        continue;
      }
      absl::StrAppend(&message, "; rank ", rank, ": ", s.error_message());
    }
    return WithKvDiskBlocksOf(
        absl::Status(static_cast<absl::StatusCode>(cause.error_code()), message), refusals);
  }
  const pb::ExecuteStepResponse& resp = c.calls[0].resp;
  if (resp.outputs_size() != static_cast<int>(c.num_seqs)) {
    return absl::InternalError("worker answered a different number of sequences");
  }
  return FromProto(resp);
}

}  // namespace folio::scheduler

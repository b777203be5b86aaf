#include "services/cachemgr/kv_cache_manager.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::cachemgr {

absl::StatusOr<PolicyKind> ParsePolicyKind(const std::string& name) {
  if (name == "paged") return PolicyKind::kPaged;
  if (name == "contiguous") return PolicyKind::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown allocation policy '", name, "' (expected paged or contiguous)"));
}

const char* PolicyKindName(PolicyKind kind) {
  return kind == PolicyKind::kPaged ? "paged" : "contiguous";
}

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(
    const CacheConfig& config, std::shared_ptr<HostTier> host) {
  if (absl::Status s = CheckConfig(config, host != nullptr); !s.ok()) return s;
  std::unique_ptr<AllocationPolicy> policy;
  if (config.policy == PolicyKind::kPaged) {
    policy = std::make_unique<PagedPolicy>(config.num_blocks, config.block_size,
                                           config.prefix_caching, host.get(), config.windows);
  } else {
    policy = std::make_unique<ContiguousPolicy>(config.num_blocks, config.block_size,
                                                config.rounding);
  }
  return absl::WrapUnique(new KvCacheManager(config, std::move(policy), std::move(host)));
}

absl::Status KvCacheManager::CheckConfig(const CacheConfig& config, bool with_host) {
  if (config.block_size <= 0 || config.block_size > kMaxBlockSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size must be in [1, ", kMaxBlockSize, "], got ", config.block_size));
  }
  if (config.num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks must be positive, got ", config.num_blocks));
  }
  if (int64_t{config.num_blocks} * config.block_size > kMaxPoolSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_blocks * block_size must be at most ", kMaxPoolSlots, ", got ",
        int64_t{config.num_blocks} * config.block_size));
  }
  if (!config.windows.empty()) {
    if (config.policy != PolicyKind::kPaged) {
      return absl::InvalidArgumentError(
          "window layer groups need the paged policy (the contiguous baseline keeps every "
          "layer's whole context)");
    }
    if (static_cast<int32_t>(config.windows.size()) > kMaxWindowGroups) {
      return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxWindowGroups,
                                                     " window layer groups, got ",
                                                     config.windows.size()));
    }
    for (size_t g = 0; g < config.windows.size(); ++g) {
      if (config.windows[g] <= 0 || config.windows[g] > kMaxSequenceLength) {
        return absl::InvalidArgumentError(absl::StrCat(
            "window layer group ", g, ": the window must be in [1, ", kMaxSequenceLength,
            "] tokens, got ", config.windows[g]));
      }
    }
    if (with_host) {
      return absl::InvalidArgumentError(
          "the host KV tier does not hold window layer groups' blocks yet");
    }
  }
  if (with_host) {
    if (!TakesHostTier(config)) {
      return absl::InvalidArgumentError(
          "the host KV tier needs the paged policy with prefix caching on");
    }
    if (config.host_blocks < 0 || config.host_blocks > kMaxHostBlocks ||
        int64_t{config.host_blocks} * config.block_size > kMaxPoolSlots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host_tier_blocks must be in [0, ", kMaxHostBlocks, "] and host_tier_blocks * "
          "block_size at most ", kMaxPoolSlots, ", got ", config.host_blocks, " * ",
          config.block_size));
    }
  }
  return absl::OkStatus();
}

KvCacheManager::KvCacheManager(const CacheConfig& config, std::unique_ptr<AllocationPolicy> policy,
                               std::shared_ptr<HostTier> host)
    : config_(config), host_(std::move(host)), policy_(std::move(policy)) {}

const Sequence* KvCacheManager::Find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

absl::Status KvCacheManager::Validate(const StepRequest& request) const {
  // What each touched sequence would look like as the request's phases apply.
  struct Planned {
    bool live = false;
    int32_t num_tokens = 0;
    int32_t max_len = 0;
  };
  absl::flat_hash_map<SeqId, Planned> planned;
  auto state = [&](SeqId id) -> Planned {
    if (auto it = planned.find(id); it != planned.end()) return it->second;
    const Sequence* seq = Find(id);
    if (seq == nullptr) return Planned{};
    return Planned{true, seq->num_tokens(), seq->max_len};
  };
  auto check_tokens = [](SeqId id, absl::Span<const int32_t> tokens,
                         bool may_be_pending = false) -> absl::Status {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 && !(may_be_pending && tokens[i] == kPendingToken)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", id.value, ": token id ", tokens[i], " at index ", i, " is negative"));
      }
    }
    return absl::OkStatus();
  };

  // Resolves apply first, to the sequences as they are.
  absl::flat_hash_map<SeqId, std::vector<int32_t>> resolved;  // positions, per sequence
  for (const ResolveOp& op : request.resolves) {
    const Sequence* seq = Find(op.seq);
    if (seq == nullptr) {
      return absl::NotFoundError(absl::StrCat("resolve: sequence ", op.seq.value, " is unknown"));
    }
    if (!std::binary_search(seq->pending.begin(), seq->pending.end(), op.pos)) {
      return absl::InvalidArgumentError(absl::StrCat("resolve: sequence ", op.seq.value,
                                                     " has no pending token at position ",
                                                     op.pos));
    }
    std::vector<int32_t>& positions = resolved[op.seq];
    if (std::find(positions.begin(), positions.end(), op.pos) != positions.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resolve: sequence ", op.seq.value, " position ", op.pos, " appears twice"));
    }
    positions.push_back(op.pos);
    if (op.token_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("resolve: sequence ", op.seq.value,
                                                     " token id ", op.token_id,
                                                     " is negative"));
    }
  }
  absl::flat_hash_set<SeqId> committed;
  for (const CommitOp& op : request.commits) {
    const Sequence* seq = Find(op.seq);
    if (seq == nullptr) {
      return absl::NotFoundError(absl::StrCat("commit: sequence ", op.seq.value, " is unknown"));
    }
    if (!committed.insert(op.seq).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("commit: sequence ", op.seq.value, " appears twice"));
    }
    if (op.num_computed_tokens < seq->num_computed || op.num_computed_tokens > seq->num_tokens()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "commit: sequence ", op.seq.value, " num_computed_tokens ", op.num_computed_tokens,
          " must be in [", seq->num_computed, ", ", seq->num_tokens(), "]"));
    }
    // The KV of a token is computed before it is committed, and a token is known by then:
    // a prefix-cache block must never hash a placeholder.
    auto left = resolved.find(op.seq);
    for (int32_t pos : seq->pending) {
      if (pos >= op.num_computed_tokens) break;
      if (left != resolved.end() &&
          std::find(left->second.begin(), left->second.end(), pos) != left->second.end()) {
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "commit: sequence ", op.seq.value, " position ", pos,
          " still holds a pending token (resolve it first)"));
    }
  }
  absl::flat_hash_set<SeqId> truncated;
  for (const TruncateOp& op : request.truncates) {
    const Sequence* seq = Find(op.seq);
    if (seq == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("truncate: sequence ", op.seq.value, " is unknown"));
    }
    if (!truncated.insert(op.seq).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("truncate: sequence ", op.seq.value, " appears twice"));
    }
    int32_t computed = seq->num_computed;
    for (const CommitOp& c : request.commits) {
      if (c.seq == op.seq) computed = c.num_computed_tokens;
    }
    if (op.num_tokens < computed || op.num_tokens > seq->num_tokens()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "truncate: sequence ", op.seq.value, " num_tokens ", op.num_tokens, " must be in [",
          computed, ", ", seq->num_tokens(), "] (its computed tokens stay)"));
    }
    if (absl::Status s = policy_->CheckTruncate(*seq, op.num_tokens); !s.ok()) return s;
    planned[op.seq] = Planned{true, op.num_tokens, seq->max_len};
  }
  for (const auto& [ids, what] : {std::pair{&request.frees, "free"},
                                  std::pair{&request.swap_outs, "swap-out"}}) {
    for (SeqId id : *ids) {
      if (!state(id).live) {
        return absl::NotFoundError(absl::StrCat(what, ": sequence ", id.value,
                                                " is unknown (never created, or already freed)"));
      }
      planned[id] = Planned{};
    }
  }
  for (const ForkOp& op : request.forks) {
    const Planned parent = state(op.parent);
    if (!parent.live) {
      return absl::NotFoundError(
          absl::StrCat("fork: parent sequence ", op.parent.value, " is unknown"));
    }
    if (state(op.child).live) {
      return absl::InvalidArgumentError(
          absl::StrCat("fork: child sequence ", op.child.value, " already exists"));
    }
    planned[op.child] = parent;
  }
  for (const CreateOp& op : request.creates) {
    if (state(op.seq).live) {
      return absl::InvalidArgumentError(
          absl::StrCat("create: sequence ", op.seq.value, " already exists"));
    }
    if (op.max_len <= 0 || op.max_len > kMaxSequenceLength) {
      return absl::InvalidArgumentError(absl::StrCat("create: sequence ", op.seq.value,
                                                     " max_len must be in [1, ",
                                                     kMaxSequenceLength, "], got ", op.max_len));
    }
    if (static_cast<int32_t>(op.prompt.size()) > op.max_len) {
      return absl::InvalidArgumentError(absl::StrCat("create: sequence ", op.seq.value,
                                                     " prompt of ", op.prompt.size(),
                                                     " tokens exceeds max_len ", op.max_len));
    }
    if (absl::Status s = check_tokens(op.seq, op.prompt); !s.ok()) return s;
    planned[op.seq] = Planned{true, policy_->CountCachedTokens(op.prompt), op.max_len};
  }
  absl::flat_hash_set<SeqId> granted;
  for (const GrantOp& op : request.grants) {
    const Planned seq = state(op.seq);
    if (!seq.live) {
      return absl::NotFoundError(absl::StrCat("grant: sequence ", op.seq.value, " is unknown"));
    }
    if (!granted.insert(op.seq).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("grant: sequence ", op.seq.value, " appears twice"));
    }
    if (op.token_ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grant: sequence ", op.seq.value, " asks for zero tokens"));
    }
    if (op.start_pos != seq.num_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("grant: sequence ", op.seq.value, " start_pos ", op.start_pos,
                       " is not its token count ", seq.num_tokens));
    }
    const int64_t end = int64_t{op.start_pos} + static_cast<int64_t>(op.token_ids.size());
    if (end > seq.max_len) {
      return absl::InvalidArgumentError(absl::StrCat("grant: sequence ", op.seq.value,
                                                     " would reach ", end,
                                                     " tokens, past its max_len ", seq.max_len));
    }
    if (absl::Status s = check_tokens(op.seq, op.token_ids, /*may_be_pending=*/true); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResponse> KvCacheManager::Step(const StepRequest& request) {
  if (absl::Status s = Validate(request); !s.ok()) return s;

  StepResponse response;
  if (host_ != nullptr) {
    host_->Confirm(request.transfers_done);
    policy_->OnTransfersConfirmed();
  }
  auto record = [&](const SeqResult& r) {
    if (r.status == SeqStatus::kNoRoom) ++counters_.num_grant_failures;
    counters_.num_cow_copies += static_cast<int64_t>(r.copies.size());
  };
  for (const ResolveOp& op : request.resolves) {
    Sequence& seq = seqs_.at(op.seq);
    seq.tokens[op.pos] = op.token_id;
    seq.pending.erase(std::find(seq.pending.begin(), seq.pending.end(), op.pos));
  }
  for (const CommitOp& op : request.commits) {
    policy_->Commit(seqs_.at(op.seq), op.num_computed_tokens);
  }
  for (const TruncateOp& op : request.truncates) {
    Sequence& seq = seqs_.at(op.seq);
    policy_->Truncate(seq, op.num_tokens);
    seq.pending.erase(std::lower_bound(seq.pending.begin(), seq.pending.end(), op.num_tokens),
                      seq.pending.end());
  }
  for (SeqId id : request.frees) {
    auto it = seqs_.find(id);
    policy_->Free(it->second);
    seqs_.erase(it);
  }
  for (SeqId id : request.swap_outs) {
    auto it = seqs_.find(id);
    policy_->SwapOut(it->second);
    policy_->Free(it->second);
    seqs_.erase(it);
    if (host_ != nullptr && host_->num_slots() > 0) ++counters_.num_swap_outs;  // else a free
  }
  for (const ForkOp& op : request.forks) {
    Sequence child{.id = op.child, .max_len = seqs_.at(op.parent).max_len};
    SeqResult r = policy_->Fork(seqs_.at(op.parent), child);
    if (r.status == SeqStatus::kOk) {
      child.pending = seqs_.at(op.parent).pending;
      seqs_.emplace(op.child, std::move(child));
      ++counters_.num_forks;
    }
    record(r);
    response.forks.push_back(std::move(r));
  }
  for (const CreateOp& op : request.creates) {
    Sequence seq{.id = op.seq, .max_len = op.max_len};
    SeqResult r = policy_->Create(seq, op.prompt);
    counters_.prefix_query_tokens += static_cast<int64_t>(op.prompt.size());
    counters_.prefix_hit_tokens += r.num_cached_tokens;
    if (r.status == SeqStatus::kOk) seqs_.emplace(op.seq, std::move(seq));
    record(r);
    response.creates.push_back(std::move(r));
  }
  for (const GrantOp& op : request.grants) {
    auto it = seqs_.find(op.seq);
    SeqResult r;
    if (it == seqs_.end()) {
      // Its create or fork in this request found no room.
      r = SeqResult{.seq = op.seq, .status = SeqStatus::kNoRoom};
    } else if (op.start_pos != it->second.num_tokens()) {
      // Created in this request with fewer cached tokens than validation predicted (a
      // host-tier load found no free block): the grant starts elsewhere, so it is not
      // served and the sequence stays as created.
      r = SeqResult{.seq = op.seq, .status = SeqStatus::kNoRoom,
                    .table_offset = static_cast<int32_t>(it->second.table.size()),
                    .num_tokens = it->second.num_tokens()};
    } else {
      r = policy_->Grant(it->second, op.token_ids);
      if (r.status == SeqStatus::kOk) {
        for (size_t i = 0; i < op.token_ids.size(); ++i) {
          if (op.token_ids[i] == kPendingToken) {
            it->second.pending.push_back(op.start_pos + static_cast<int32_t>(i));
          }
        }
      }
    }
    record(r);
    response.grants.push_back(std::move(r));
  }
  // Frees come first in a step and everything after them only adds, so the end of a step
  // is its high-water mark.
  counters_.num_blocks_used_peak =
      std::max(counters_.num_blocks_used_peak, policy_->Stats().num_blocks_used);
  response.transfers = policy_->TakeTransfers();
  return response;
}

std::vector<BlockHash> KvCacheManager::CachedHashes() const {
  const BlockPool* pool = policy_->prefix_pool();
  std::vector<BlockHash> hashes = pool == nullptr ? std::vector<BlockHash>{} : pool->SnapshotHashes();
  if (host_ != nullptr && pool != nullptr) {
    for (const BlockHash& h : host_->Hashes()) {
      if (!pool->holds(h)) hashes.push_back(h);
    }
  }
  return hashes;
}

std::vector<BlockHash> KvCacheManager::DiskOnlyHashes() const {
  const BlockPool* pool = policy_->prefix_pool();
  std::vector<BlockHash> hashes;
  if (pool == nullptr || host_ == nullptr || host_->disk() == nullptr) return hashes;
  for (const BlockHash& h : host_->disk()->Hashes()) {
    if (!pool->holds(h) && !host_->Contains(h)) hashes.push_back(h);
  }
  return hashes;
}

CacheStats KvCacheManager::Stats() const {
  CacheStats stats = counters_;
  stats.pool = policy_->Stats();
  stats.num_sequences = static_cast<int64_t>(seqs_.size());
  if (host_ != nullptr) stats.host = host_->Stats();
  if (host_ != nullptr && host_->disk() != nullptr) stats.disk = host_->disk()->Stats();
  return stats;
}

absl::Status KvCacheManager::CheckInvariants() const {
  for (const auto& [id, seq] : seqs_) {
    for (size_t i = 0; i < seq.pending.size(); ++i) {
      const int32_t pos = seq.pending[i];
      if (pos < 0 || pos >= seq.num_tokens() || seq.tokens[pos] != kPendingToken ||
          pos < seq.num_computed || (i > 0 && pos <= seq.pending[i - 1])) {
        return absl::InternalError(absl::StrCat("sequence ", id.value,
                                                " has a bad pending position ", pos));
      }
    }
    const int64_t placeholders = std::count(seq.tokens.begin(), seq.tokens.end(), kPendingToken);
    if (placeholders != static_cast<int64_t>(seq.pending.size())) {
      return absl::InternalError(absl::StrCat("sequence ", id.value, " holds ", placeholders,
                                              " placeholder tokens but ", seq.pending.size(),
                                              " pending positions"));
    }
  }
  if (host_ != nullptr) {
    if (absl::Status s = host_->CheckInvariants(); !s.ok()) return s;
    if (host_->disk() != nullptr) {
      if (absl::Status s = host_->disk()->CheckInvariants(); !s.ok()) return s;
    }
  }
  return policy_->CheckInvariants(seqs_);
}

}  // namespace folio::cachemgr

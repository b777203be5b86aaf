// KvCacheManager: the cache manager's domain object and the only API the service layer
// sees. It owns every sequence's record and the allocation policy (paged or contiguous),
// and applies the batched step of DESIGN.md: commits (and truncates, speculative
// decoding's rollback), frees, forks, creates with prefix lookups, then grants.
//
// A step is planned before it is applied: every operation is validated against the
// state the earlier operations of the same request would leave, so a bad request returns
// an error and changes nothing. Running out of blocks is not an error: the affected
// sequence's result says kNoRoom and the sequence is left exactly as it was.
//
// Thread-compatible: the service serializes calls.
#ifndef FOLIO_SERVICES_CACHEMGR_KV_CACHE_MANAGER_H_
#define FOLIO_SERVICES_CACHEMGR_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/cachemgr/allocation_policy.h"
#include "services/cachemgr/contiguous_policy.h"
#include "services/cachemgr/host_tier.h"
#include "services/cachemgr/paged_policy.h"
#include "services/cachemgr/step_types.h"

namespace folio::cachemgr {

enum class PolicyKind { kPaged, kContiguous };

// Parses "paged" or "contiguous".
absl::StatusOr<PolicyKind> ParsePolicyKind(const std::string& name);
const char* PolicyKindName(PolicyKind kind);

struct CacheConfig {
  PolicyKind policy = PolicyKind::kPaged;
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
  PagedPolicy::PrefixCaching prefix_caching = PagedPolicy::PrefixCaching::kEnabled;
  ContiguousPolicy::Rounding rounding = ContiguousPolicy::Rounding::kExact;
  // Window layer groups (paged_policy.h): each group's sliding window in tokens, whose
  // blocks go back to the pool as sequences outgrow it. Empty: every layer attends to the
  // whole context (one table per sequence). Paged policy only, no host tier yet.
  std::vector<int32_t> windows;
  // The host offload tier (host_tier.h): blocks the workers' host segments hold (0: no
  // tier), and the segments' id. Read by the service, which owns the tier.
  int32_t host_blocks = 0;
  std::string host_tier_id;
  // The disk tier below the host tier (disk_tier.h): the workers' directory of block
  // files, its budget in blocks (0: no tier) and the ranks (files per block). Read by the
  // service, which owns the tier.
  std::string disk_dir;
  int32_t disk_blocks = 0;
  int32_t disk_ranks = 1;
};
inline constexpr int32_t kMaxHostBlocks = 1 << 24;
inline constexpr int32_t kMaxWindowGroups = 64;

// Limits that keep a bad configure request from allocating without bound.
inline constexpr int32_t kMaxBlockSize = 1024;
inline constexpr int64_t kMaxPoolSlots = int64_t{1} << 31;
inline constexpr int32_t kMaxSequenceLength = 1 << 24;

struct CacheStats {
  PoolStats pool;
  int64_t num_sequences = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up
  int64_t prefix_hit_tokens = 0;    // of those, found in the cache
  int64_t num_grant_failures = 0;   // creates, forks and grants answered kNoRoom
  int64_t num_cow_copies = 0;       // blocks copied on write (and by baseline forks)
  int64_t num_forks = 0;            // forks applied
  int64_t num_swap_outs = 0;        // swap-outs applied with a host tier (else plain frees)
  int32_t num_blocks_used_peak = 0; // the most blocks in use at the end of any step
  HostTierStats host;               // all zero without a host tier
  DiskTierStats disk;               // all zero without a disk tier
};

class KvCacheManager {
 public:
  // InvalidArgument for a block size or block count out of range, or a host tier with a
  // policy other than paged with prefix caching. `host` (may be null) is the offload tier
  // below the pool; it outlives a manager (Reset builds a new manager over the same tier).
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(
      const CacheConfig& config, std::shared_ptr<HostTier> host = nullptr);
  // Create's checks of `config` (with_host: of a host tier too, config.host_blocks of it),
  // without allocating anything.
  static absl::Status CheckConfig(const CacheConfig& config, bool with_host);
  // Whether `config`'s pool can have a host tier (the paged policy with prefix caching).
  static bool TakesHostTier(const CacheConfig& config) {
    return config.policy == PolicyKind::kPaged &&
           config.prefix_caching == PagedPolicy::PrefixCaching::kEnabled;
  }

  // Applies one batched step; see the class comment.
  absl::StatusOr<StepResponse> Step(const StepRequest& request);

  CacheStats Stats() const;
  // The prefix cache's pool (index and event log), or null without one (contiguous).
  const BlockPool* prefix_pool() const { return policy_->prefix_pool(); }
  const CacheConfig& config() const { return config_; }
  const std::shared_ptr<HostTier>& host_tier() const { return host_; }
  // The hashes routers count as cached: the pool's index and the host tier's, each once
  // (the state prefix_pool()->events() describes, as of its last_seq()), and apart, the
  // ones only the disk tier holds (kStoredOnDisk in the log).
  std::vector<BlockHash> CachedHashes() const;
  // CacheStats::num_swap_outs, without the rest of Stats.
  int64_t num_swap_outs() const { return counters_.num_swap_outs; }
  // PoolStats::num_window_releases, without the rest of Stats.
  int64_t num_window_releases() const { return policy_->Stats().num_window_releases; }
  std::vector<BlockHash> DiskOnlyHashes() const;

  // How many leading tokens of `prompt` a create's prefix lookup would attach now.
  int32_t CountCachedTokens(absl::Span<const int32_t> prompt) const {
    return policy_->CountCachedTokens(prompt);
  }

  // The record of a live sequence, or nullptr.
  const Sequence* Find(SeqId id) const;

  // Verifies the pool against every live sequence (for tests).
  absl::Status CheckInvariants() const;

 private:
  KvCacheManager(const CacheConfig& config, std::unique_ptr<AllocationPolicy> policy,
                 std::shared_ptr<HostTier> host);

  absl::Status Validate(const StepRequest& request) const;

  const CacheConfig config_;
  std::shared_ptr<HostTier> host_;  // declared before policy_, which points into it
  std::unique_ptr<AllocationPolicy> policy_;
  SequenceMap seqs_;
  CacheStats counters_;  // the pool figures in here are filled in by Stats()
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_KV_CACHE_MANAGER_H_

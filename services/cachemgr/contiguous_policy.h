// ContiguousPolicy: the pre-PagedAttention baseline. At creation a sequence reserves
// enough consecutive blocks for its max_len (optionally rounded up to a power of two, as
// buddy-style allocators do), chosen first-fit over the block space. Nothing is shared:
// a fork reserves a fresh run and copies every filled block. Reserved-but-unused slots
// (internal fragmentation) and free runs too short to use (external fragmentation) are
// both real here, which is what the benchmark compares PagedPolicy against.
// Thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_CONTIGUOUS_POLICY_H_
#define FOLIO_SERVICES_CACHEMGR_CONTIGUOUS_POLICY_H_

#include <cstdint>
#include <map>

#include "services/cachemgr/allocation_policy.h"

namespace folio::cachemgr {

class ContiguousPolicy final : public AllocationPolicy {
 public:
  enum class Rounding { kExact, kPowerOfTwo };

  ContiguousPolicy(int32_t num_blocks, int32_t block_size, Rounding rounding);

  int32_t CountCachedTokens(absl::Span<const int32_t> prompt) const override { return 0; }
  SeqResult Create(Sequence& seq, absl::Span<const int32_t> prompt) override;
  SeqResult Fork(const Sequence& parent, Sequence& child) override;
  SeqResult Grant(Sequence& seq, absl::Span<const int32_t> tokens) override;
  void Commit(Sequence& seq, int32_t num_computed) override { seq.num_computed = num_computed; }
  absl::Status CheckTruncate(const Sequence& seq, int32_t num_tokens) const override;
  void Truncate(Sequence& seq, int32_t num_tokens) override;
  void Free(Sequence& seq) override;
  PoolStats Stats() const override;
  absl::Status CheckInvariants(const SequenceMap& seqs) const override;

  // The largest run a new sequence could get now, in blocks.
  int32_t LargestFreeRun() const;

 private:
  // First fit; returns the run's start or -1.
  int32_t Reserve(int32_t num_blocks);
  void Unreserve(int32_t start, int32_t num_blocks);
  int32_t RunBlocksFor(int32_t max_len) const;

  const int32_t num_blocks_;
  const int32_t block_size_;
  const Rounding rounding_;
  std::map<int32_t, int32_t> free_runs_;  // start -> length, disjoint and coalesced
  int32_t num_reserved_ = 0;
  int64_t num_tokens_stored_ = 0;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_CONTIGUOUS_POLICY_H_

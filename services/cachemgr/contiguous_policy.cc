#include "services/cachemgr/contiguous_policy.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::cachemgr {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

ContiguousPolicy::ContiguousPolicy(int32_t num_blocks, int32_t block_size, Rounding rounding)
    : num_blocks_(num_blocks), block_size_(block_size), rounding_(rounding) {
  if (num_blocks > 0) free_runs_.emplace(0, num_blocks);
}

int32_t ContiguousPolicy::RunBlocksFor(int32_t max_len) const {
  int32_t blocks = CeilDiv(max_len, block_size_);
  if (rounding_ == Rounding::kPowerOfTwo) {
    int32_t p = 1;
    while (p < blocks) p <<= 1;
    blocks = p;
  }
  return blocks;
}

int32_t ContiguousPolicy::Reserve(int32_t num_blocks) {
  for (auto it = free_runs_.begin(); it != free_runs_.end(); ++it) {
    if (it->second < num_blocks) continue;
    const int32_t start = it->first;
    const int32_t rest = it->second - num_blocks;
    free_runs_.erase(it);
    if (rest > 0) free_runs_.emplace(start + num_blocks, rest);
    num_reserved_ += num_blocks;
    return start;
  }
  return -1;
}

void ContiguousPolicy::Unreserve(int32_t start, int32_t num_blocks) {
  auto [it, inserted] = free_runs_.emplace(start, num_blocks);
  CHECK(inserted) << "run at " << start << " released twice";
  // Coalesce with the following and the preceding free runs.
  if (auto next = std::next(it); next != free_runs_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_runs_.erase(next);
  }
  if (it != free_runs_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_runs_.erase(it);
    }
  }
  num_reserved_ -= num_blocks;
}

int32_t ContiguousPolicy::LargestFreeRun() const {
  int32_t best = 0;
  for (const auto& [start, len] : free_runs_) best = std::max(best, len);
  return best;
}

SeqResult ContiguousPolicy::Create(Sequence& seq, absl::Span<const int32_t> prompt) {
  SeqResult result{.seq = seq.id};
  const int32_t run = RunBlocksFor(seq.max_len);
  const int32_t start = Reserve(run);
  if (start < 0) {
    result.status = SeqStatus::kNoRoom;
    return result;
  }
  seq.run_start = start;
  seq.run_blocks = run;
  return result;
}

SeqResult ContiguousPolicy::Fork(const Sequence& parent, Sequence& child) {
  SeqResult result{.seq = child.id};
  const int32_t start = Reserve(parent.run_blocks);
  if (start < 0) {
    result.status = SeqStatus::kNoRoom;
    return result;
  }
  child.run_start = start;
  child.run_blocks = parent.run_blocks;
  child.tokens = parent.tokens;
  child.num_computed = parent.num_computed;
  for (size_t i = 0; i < parent.table.size(); ++i) {
    const BlockId dst{start + static_cast<int32_t>(i)};
    child.table.push_back(dst);
    result.copies.push_back(BlockCopy{parent.table[i], dst});
  }
  num_tokens_stored_ += child.num_tokens();
  result.entries = child.table;
  result.num_tokens = child.num_tokens();
  return result;
}

absl::Status ContiguousPolicy::CheckTruncate(const Sequence&, int32_t) const {
  return absl::OkStatus();  // a run is one sequence's alone
}

void ContiguousPolicy::Truncate(Sequence& seq, int32_t num_tokens) {
  CHECK_GE(num_tokens, seq.num_computed);
  CHECK_LE(num_tokens, seq.num_tokens());
  num_tokens_stored_ -= seq.num_tokens() - num_tokens;
  seq.tokens.resize(num_tokens);
  seq.table.resize(CeilDiv(num_tokens, block_size_));  // the run stays reserved
}

SeqResult ContiguousPolicy::Grant(Sequence& seq, absl::Span<const int32_t> tokens) {
  SeqResult result{.seq = seq.id};
  result.table_offset = static_cast<int32_t>(seq.table.size());
  seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
  num_tokens_stored_ += static_cast<int64_t>(tokens.size());
  const int32_t needed = CeilDiv(seq.num_tokens(), block_size_);
  CHECK_LE(needed, seq.run_blocks) << "grant past the reserved run";
  while (static_cast<int32_t>(seq.table.size()) < needed) {
    seq.table.push_back(BlockId{seq.run_start + static_cast<int32_t>(seq.table.size())});
  }
  result.entries.assign(seq.table.begin() + result.table_offset, seq.table.end());
  result.num_tokens = seq.num_tokens();
  return result;
}

void ContiguousPolicy::Free(Sequence& seq) {
  if (seq.run_start < 0) return;
  Unreserve(seq.run_start, seq.run_blocks);
  num_tokens_stored_ -= seq.num_tokens();
  seq.run_start = -1;
  seq.run_blocks = 0;
  seq.table.clear();
}

PoolStats ContiguousPolicy::Stats() const {
  PoolStats s;
  s.num_blocks_total = num_blocks_;
  s.num_blocks_used = num_reserved_;
  s.num_blocks_free = num_blocks_ - num_reserved_;
  s.num_slots_allocated = static_cast<int64_t>(num_reserved_) * block_size_;
  s.num_tokens_stored = num_tokens_stored_;
  return s;
}

absl::Status ContiguousPolicy::CheckInvariants(const SequenceMap& seqs) const {
  // Every block is in exactly one place: a free run or one sequence's reservation.
  std::vector<int32_t> owners(num_blocks_, 0);
  int32_t free_blocks = 0;
  for (const auto& [start, len] : free_runs_) {
    for (int32_t b = start; b < start + len; ++b) ++owners[b];
    free_blocks += len;
  }
  int64_t stored = 0;
  for (const auto& [id, seq] : seqs) {
    for (int32_t b = seq.run_start; b < seq.run_start + seq.run_blocks; ++b) ++owners[b];
    if (static_cast<int32_t>(seq.table.size()) != CeilDiv(seq.num_tokens(), block_size_)) {
      return absl::InternalError(absl::StrCat("sequence ", id.value, " table size mismatch"));
    }
    for (size_t i = 0; i < seq.table.size(); ++i) {
      if (seq.table[i].value != seq.run_start + static_cast<int32_t>(i)) {
        return absl::InternalError(absl::StrCat("sequence ", id.value, " table leaves its run"));
      }
    }
    stored += seq.num_tokens();
  }
  for (int32_t b = 0; b < num_blocks_; ++b) {
    if (owners[b] != 1) {
      return absl::InternalError(absl::StrCat("block ", b, " has ", owners[b], " owners"));
    }
  }
  if (free_blocks + num_reserved_ != num_blocks_ || stored != num_tokens_stored_) {
    return absl::InternalError("contiguous pool counters disagree");
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

// PagedPolicy's table helpers: growing, cutting and checking one block table (the
// full-attention layers' or a window layer group's), and the window groups' prefix
// lookups (paged_policy.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "services/cachemgr/paged_policy.h"

namespace folio::cachemgr {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

int32_t PagedPolicy::FirstNeededBlock(int32_t group, int32_t num_computed) const {
  return std::max(0, num_computed - windows_[group] + 1) / block_size_;
}

BlockHash PagedPolicy::WindowHash(const BlockHash& hash, int32_t group) {
  // A different key per group for the same tokens, never a full-attention block's (the
  // salt is hashed in as a block of its own).
  const int32_t salt[] = {-1 - group};
  return HashBlock(hash, salt);
}

int32_t PagedPolicy::WindowedHits(absl::Span<const int32_t> prompt,
                                  absl::Span<const BlockHash> hashes,
                                  std::vector<std::vector<BlockId>>* found) const {
  const int32_t k = static_cast<int32_t>(hashes.size());
  std::vector<std::vector<BlockId>> have(num_windows(), std::vector<BlockId>(k));
  for (int32_t g = 0; g < num_windows(); ++g) {
    for (int32_t j = 0; j < k; ++j) {
      auto tokens = prompt.subspan(static_cast<size_t>(j) * block_size_, block_size_);
      if (std::optional<BlockId> b = pool_.FindCached(WindowHash(hashes[j], g), tokens)) {
        have[g][j] = *b;
      }
    }
  }
  // n blocks may be attached when no group misses a block in [FirstNeeded(n), n).
  std::vector<int32_t> last_miss(num_windows(), -1);  // below n
  int32_t best = 0;
  for (int32_t n = 1; n <= k; ++n) {
    bool ok = true;
    for (int32_t g = 0; g < num_windows(); ++g) {
      if (have[g][n - 1].value < 0) last_miss[g] = n - 1;
      if (last_miss[g] >= FirstNeededBlock(g, n * block_size_)) ok = false;
    }
    if (ok) best = n;
  }
  if (found != nullptr) *found = std::move(have);
  return best;
}

void PagedPolicy::AttachPrefix(Sequence& seq, absl::Span<const BlockId> blocks,
                               absl::Span<const BlockHash> hashes,
                               const std::vector<std::vector<BlockId>>& found, int32_t k) {
  seq.table.assign(blocks.begin(), blocks.begin() + k);
  seq.hashes.assign(hashes.begin(), hashes.begin() + k);
  for (BlockId id : seq.table) Acquire(id);
  seq.windows.assign(num_windows(), WindowTable{});
  for (int32_t g = 0; g < num_windows(); ++g) {
    WindowTable& w = seq.windows[g];
    w.first_block = std::min(k, FirstNeededBlock(g, k * block_size_));
    for (int32_t j = w.first_block; j < k; ++j) {
      CHECK_GE(found[g][j].value, 0);
      w.blocks.push_back(found[g][j]);
      Acquire(found[g][j]);
    }
  }
}

int32_t PagedPolicy::BlocksToGrow(absl::Span<const BlockId> table, int32_t first_block,
                                  int32_t old_len, int32_t new_len) const {
  const int32_t end = first_block + static_cast<int32_t>(table.size());
  // A partial last block held by others must be copied before this sequence writes.
  const bool copy_on_write = old_len % block_size_ != 0 && pool_.ref_count(table.back()) > 1;
  return CeilDiv(new_len, block_size_) - end + (copy_on_write ? 1 : 0);
}

int32_t PagedPolicy::GrowTable(std::vector<BlockId>& table, int32_t first_block,
                               int32_t old_len, int32_t new_len,
                               std::vector<BlockCopy>* copies) {
  const int32_t end = first_block + static_cast<int32_t>(table.size());
  int32_t changed = end;
  if (old_len % block_size_ != 0 && pool_.ref_count(table.back()) > 1) {
    const BlockId src = table.back();
    const BlockId dst = AllocateEmpty();
    fill_[dst.value] = fill_[src.value];
    num_tokens_stored_ += fill_[dst.value];
    Drop(src);
    table.back() = dst;
    copies->push_back(BlockCopy{src, dst});
    changed = end - 1;
  }
  for (int32_t pos = old_len; pos < new_len; ++pos) {
    const int32_t at = pos / block_size_ - first_block;
    if (at == static_cast<int32_t>(table.size())) table.push_back(AllocateEmpty());
    ++fill_[table[at].value];
  }
  num_tokens_stored_ += new_len - old_len;
  return changed;
}

absl::Status PagedPolicy::CheckCut(const Sequence& seq, const std::vector<BlockId>& table,
                                   int32_t first_block, int32_t num_tokens) const {
  // The kept last block loses tokens only if it was partly cut: its fill is every
  // holder's, so it must be this sequence's alone (a grant after a fork copies it first,
  // so tokens granted since the fork are always in blocks of its own), and not cached.
  if (num_tokens % block_size_ == 0 || num_tokens == seq.num_tokens()) return absl::OkStatus();
  const BlockId last = table[num_tokens / block_size_ - first_block];
  if (pool_.ref_count(last) > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "truncate: sequence ", seq.id.value, " would cut tokens out of block ", last.value,
        ", which other sequences share"));
  }
  // A block that was shared when a fork of this sequence computed and committed it is in
  // the prefix cache now: its tokens are that fork's, cached for others to find.
  if (pool_.is_cached(last)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "truncate: sequence ", seq.id.value, " would cut tokens out of block ", last.value,
        ", which the prefix cache holds"));
  }
  return absl::OkStatus();
}

void PagedPolicy::CutTable(std::vector<BlockId>& table, int32_t first_block, int32_t old_len,
                           int32_t num_tokens) {
  const int32_t keep = CeilDiv(num_tokens, block_size_) - first_block;
  if (num_tokens % block_size_ != 0) {
    const BlockId last = table[keep - 1];
    const int32_t cut = std::min(old_len, (first_block + keep) * block_size_) - num_tokens;
    fill_[last.value] -= cut;
    num_tokens_stored_ -= cut;
  }
  // Tail first, as Free gives blocks back.
  while (static_cast<int32_t>(table.size()) > keep) {
    Drop(table.back());
    table.pop_back();
  }
}

absl::Status PagedPolicy::CheckTable(SeqId id, absl::Span<const BlockId> table,
                                     int32_t first_block, int32_t n,
                                     std::vector<int32_t>* holders) const {
  if (first_block + static_cast<int32_t>(table.size()) != CeilDiv(n, block_size_)) {
    return absl::InternalError(absl::StrCat("sequence ", id.value, " holds blocks ",
                                            first_block, " .. ", first_block + table.size(),
                                            " for ", n, " tokens"));
  }
  for (size_t i = 0; i < table.size(); ++i) {
    const BlockId b = table[i];
    ++(*holders)[b.value];
    // Every holder of a block sees the same fill: a shared block written in place
    // would break this for its other holders.
    const int32_t logical = first_block + static_cast<int32_t>(i);
    const int32_t expected = std::min(block_size_, n - logical * block_size_);
    if (fill_[b.value] != expected) {
      return absl::InternalError(absl::StrCat("block ", b.value, " of sequence ", id.value,
                                              " has ", fill_[b.value], " tokens, expected ",
                                              expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

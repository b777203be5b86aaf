#include "services/frontend/routing/prefix_index.h"

namespace folio::frontend::routing {

PrefixIndex::ApplyResult PrefixIndex::Apply(const BlockEventBatch& batch) {
  if (batch.snapshot) {
    if (static_cast<int64_t>(batch.events.size()) > max_blocks_) return Resync();
    hashes_.clear();
    for (const BlockEventBatch::Event& e : batch.events) {
      if (!e.stored) return Resync();  // a snapshot lists only what is held
      hashes_[e.hash] = e.on_disk;
    }
    pool_id_ = batch.pool_id;
    last_seq_ = batch.last_seq;
    block_size_ = batch.block_size;
    return ApplyResult::kApplied;
  }
  if (pool_id_.empty() || batch.pool_id != pool_id_) return Resync();
  uint64_t seq = last_seq_;
  for (const BlockEventBatch::Event& e : batch.events) {
    if (e.seq != seq + 1) return Resync();
    seq = e.seq;
    if (e.stored) {
      if (static_cast<int64_t>(hashes_.size()) >= max_blocks_ && !hashes_.contains(e.hash)) {
        return Resync();
      }
      hashes_[e.hash] = e.on_disk;
    } else {
      hashes_.erase(e.hash);
    }
  }
  if (batch.last_seq != seq) return Resync();
  last_seq_ = seq;
  return ApplyResult::kApplied;
}

void PrefixIndex::Clear() {
  hashes_.clear();
  pool_id_.clear();
  last_seq_ = 0;
}

PrefixIndex::ApplyResult PrefixIndex::Resync() {
  Clear();
  ++num_resyncs_;
  return ApplyResult::kResync;
}

int32_t PrefixIndex::Match(absl::Span<const BlockHash> hashes, int32_t* on_disk) const {
  int32_t n = 0;
  int32_t disk = 0;
  for (; n < static_cast<int32_t>(hashes.size()); ++n) {
    auto it = hashes_.find(hashes[n]);
    if (it == hashes_.end()) break;
    disk += it->second ? 1 : 0;
  }
  if (on_disk != nullptr) *on_disk = disk;
  return n;
}

}  // namespace folio::frontend::routing

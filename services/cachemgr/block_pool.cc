#include "services/cachemgr/block_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::cachemgr {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      sentinel_(num_blocks),
      blocks_(num_blocks + 1),
      block_tokens_(static_cast<size_t>(num_blocks) * block_size),
      events_(std::clamp(8 * num_blocks, 1024, BlockEventLog::kDefaultCapacity)) {
  CHECK_GE(num_blocks, 0);
  CHECK_GT(block_size, 0);
  Reset();
}

void BlockPool::Reset() {
  Block& s = blocks_[sentinel_];
  s.prev = s.next = sentinel_;
  for (const auto& [hash, id] : cached_) {
    if (blocks_[id.value].logged) LogLeaving(hash);
  }
  for (int32_t i = 0; i < num_blocks_; ++i) {
    blocks_[i] = Block{};
    PushBack(i);
  }
  cached_.clear();
  num_free_ = num_blocks_;
  num_cached_free_ = 0;
}

void BlockPool::LogLeaving(const BlockHash& hash) {
  switch (BelowOf(hash)) {
    case Below::kMemory: break;
    case Below::kDisk: events_.Append(BlockEvent::Kind::kStoredOnDisk, hash); break;
    case Below::kNone: events_.Append(BlockEvent::Kind::kRemoved, hash); break;
  }
}

void BlockPool::PushBack(int32_t id) {
  Block& s = blocks_[sentinel_];
  const int32_t last = s.prev;
  blocks_[id].prev = last;
  blocks_[id].next = sentinel_;
  blocks_[last].next = id;
  s.prev = id;
}

void BlockPool::Unlink(int32_t id) {
  Block& b = blocks_[id];
  blocks_[b.prev].next = b.next;
  blocks_[b.next].prev = b.prev;
  b.prev = b.next = -1;
}

void BlockPool::EvictHash(int32_t id) {
  Block& b = blocks_[id];
  cached_.erase(b.hash);
  if (b.logged) LogLeaving(b.hash);
  b.hashed = false;
  b.logged = false;
  b.hash = BlockHash{};
  ++num_evictions_;
}

BlockId BlockPool::Allocate() {
  CHECK_GT(num_free_, 0) << "Allocate() on an empty pool";
  const int32_t id = blocks_[sentinel_].next;
  Unlink(id);
  --num_free_;
  if (blocks_[id].hashed) {
    --num_cached_free_;
    EvictHash(id);
  }
  blocks_[id].ref_count = 1;
  return BlockId{id};
}

void BlockPool::AddRef(BlockId id) {
  Block& b = blocks_[id.value];
  if (b.ref_count == 0) {
    Unlink(id.value);
    --num_free_;
    if (b.hashed) --num_cached_free_;
  }
  ++b.ref_count;
}

void BlockPool::Release(BlockId id) {
  Block& b = blocks_[id.value];
  CHECK_GT(b.ref_count, 0) << "release of free block " << id.value;
  if (--b.ref_count == 0) {
    PushBack(id.value);
    ++num_free_;
    if (b.hashed) ++num_cached_free_;
  }
}

std::optional<BlockId> BlockPool::FindCached(const BlockHash& hash,
                                             absl::Span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end() || static_cast<int32_t>(tokens.size()) != block_size_) {
    return std::nullopt;
  }
  const int32_t* stored = &block_tokens_[static_cast<size_t>(it->second.value) * block_size_];
  if (!std::equal(tokens.begin(), tokens.end(), stored)) return std::nullopt;
  return it->second;
}

std::vector<BlockHash> BlockPool::SnapshotHashes() const {
  std::vector<BlockHash> hashes;
  hashes.reserve(cached_.size());
  for (const auto& [hash, id] : cached_) {
    if (blocks_[id.value].logged) hashes.push_back(hash);
  }
  return hashes;
}

bool BlockPool::Register(BlockId id, const BlockHash& hash, absl::Span<const int32_t> tokens,
                         Logged logged) {
  Block& b = blocks_[id.value];
  CHECK_GT(b.ref_count, 0) << "register of free block " << id.value;
  CHECK_EQ(static_cast<int32_t>(tokens.size()), block_size_);
  if (b.hashed || cached_.contains(hash)) return false;
  b.hashed = true;
  b.hash = hash;
  b.logged = logged == Logged::kLogged;
  cached_.emplace(hash, id);
  // Entering memory (from nowhere, or from the disk alone).
  if (b.logged && BelowOf(hash) != Below::kMemory) {
    events_.Append(BlockEvent::Kind::kStored, hash);
  }
  std::copy(tokens.begin(), tokens.end(),
            &block_tokens_[static_cast<size_t>(id.value) * block_size_]);
  return true;
}

absl::Status BlockPool::CheckInvariants() const {
  int32_t in_queue = 0;
  int32_t cached_in_queue = 0;
  int32_t prev = sentinel_;
  for (int32_t id = blocks_[sentinel_].next; id != sentinel_; id = blocks_[id].next) {
    if (id < 0 || id >= num_blocks_ || in_queue > num_blocks_) {
      return absl::InternalError("free queue is corrupt");
    }
    if (blocks_[id].prev != prev) {
      return absl::InternalError(absl::StrCat("free queue back link broken at ", id));
    }
    if (blocks_[id].ref_count != 0) {
      return absl::InternalError(absl::StrCat("block ", id, " is queued with ref count ",
                                              blocks_[id].ref_count));
    }
    ++in_queue;
    if (blocks_[id].hashed) ++cached_in_queue;
    prev = id;
  }
  int32_t zero_refs = 0;
  int32_t hashed = 0;
  for (int32_t id = 0; id < num_blocks_; ++id) {
    const Block& b = blocks_[id];
    if (b.ref_count < 0) return absl::InternalError(absl::StrCat("block ", id, " ref < 0"));
    if (b.ref_count == 0) ++zero_refs;
    if (b.hashed) {
      ++hashed;
      auto it = cached_.find(b.hash);
      if (it == cached_.end() || it->second.value != id) {
        return absl::InternalError(absl::StrCat("hashed block ", id, " missing from index"));
      }
    }
  }
  if (zero_refs != in_queue || in_queue != num_free_) {
    return absl::InternalError(absl::StrCat("free count mismatch: queue ", in_queue,
                                            ", ref 0 ", zero_refs, ", counter ", num_free_));
  }
  if (cached_in_queue != num_cached_free_) {
    return absl::InternalError("cached-evictable counter mismatch");
  }
  if (hashed != static_cast<int32_t>(cached_.size())) {
    return absl::InternalError("prefix index has entries for unhashed blocks");
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

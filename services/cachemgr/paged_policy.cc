#include "services/cachemgr/paged_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::cachemgr {

PagedPolicy::PagedPolicy(int32_t num_blocks, int32_t block_size, PrefixCaching prefix_caching,
                         HostTier* host, std::vector<int32_t> windows)
    : block_size_(block_size),
      prefix_caching_(prefix_caching),
      windows_(std::move(windows)),
      pool_(num_blocks, block_size),
      host_(host),
      fill_(num_blocks, 0) {
  CHECK(host == nullptr || prefix_caching == PrefixCaching::kEnabled);
  CHECK(host == nullptr || windows_.empty()) << "host tiers do not hold window groups yet";
  for (int32_t w : windows_) CHECK_GT(w, 0);
  // Routers see the pool and the host tier as one cache (a block in either is a hit in
  // memory), and the disk tier below them as a cheaper kind of miss.
  if (host != nullptr) {
    pool_.set_below([host](const BlockHash& h) {
      if (host->Contains(h)) return BlockPool::Below::kMemory;
      if (host->disk() != nullptr && host->disk()->Announced(h)) return BlockPool::Below::kDisk;
      return BlockPool::Below::kNone;
    });
  }
}

void PagedPolicy::Lookup(absl::Span<const int32_t> prompt, std::vector<BlockId>* blocks,
                         std::vector<BlockHash>* hashes) const {
  if (prefix_caching_ == PrefixCaching::kDisabled || prompt.empty()) return;
  // Never cover the last prompt token: its logits must be computed.
  const int32_t max_blocks = (static_cast<int32_t>(prompt.size()) - 1) / block_size_;
  BlockHash parent = kRootBlockHash;
  for (int32_t i = 0; i < max_blocks; ++i) {
    auto tokens = prompt.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    const BlockHash hash = HashBlock(parent, tokens);
    std::optional<BlockId> hit = pool_.FindCached(hash, tokens);
    if (!hit.has_value()) break;
    blocks->push_back(*hit);
    hashes->push_back(hash);
    parent = hash;
  }
}

int32_t PagedPolicy::CountCachedTokens(absl::Span<const int32_t> prompt) const {
  if (prefix_caching_ == PrefixCaching::kDisabled || prompt.empty()) return 0;
  if (!windows_.empty()) {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;
    Lookup(prompt, &blocks, &hashes);
    return WindowedHits(prompt, hashes, nullptr) * block_size_;
  }
  const int32_t max_blocks = (static_cast<int32_t>(prompt.size()) - 1) / block_size_;
  BlockHash parent = kRootBlockHash;
  int32_t found = 0;
  for (; found < max_blocks; ++found) {
    auto tokens = prompt.subspan(static_cast<size_t>(found) * block_size_, block_size_);
    const BlockHash hash = HashBlock(parent, tokens);
    if (!pool_.FindCached(hash, tokens).has_value() &&
        (host_ == nullptr || !host_->Find(hash, tokens).has_value()) &&
        (host_ == nullptr || host_->disk() == nullptr || !host_->disk()->Peek(hash, tokens))) {
      break;
    }
    parent = hash;
  }
  int32_t cached = found * block_size_;
  if (std::optional<PartialHit> partial = FindPartial(prompt, cached, parent)) {
    cached += partial->num_tokens;
  }
  return cached;
}

void PagedPolicy::LogDiskRemovals() {
  DiskTier* const disk = host_ == nullptr ? nullptr : host_->disk();
  if (disk == nullptr) return;
  for (const BlockHash& h : disk->TakeRemoved()) {
    // Gone for the routers unless memory still holds it (LogBelow: not the pool).
    if (!host_->Contains(h)) pool_.LogBelow(BlockEvent::Kind::kRemoved, h);
  }
  for (const BlockHash& h : disk->TakeAnnounced()) {
    // On disk for the routers unless memory holds it (then it already counts).
    if (!host_->Contains(h) && disk->Announced(h)) {
      pool_.LogBelow(BlockEvent::Kind::kStoredOnDisk, h);
    }
  }
}

void PagedPolicy::OnTransfersConfirmed() { LogDiskRemovals(); }

std::optional<PagedPolicy::PartialHit> PagedPolicy::FindPartial(
    absl::Span<const int32_t> prompt, int32_t start, const BlockHash& parent) const {
  if (host_ == nullptr || !host_->has_partial()) return std::nullopt;
  const int32_t longest =
      std::min(block_size_ - 1, static_cast<int32_t>(prompt.size()) - 1 - start);
  for (int32_t n = longest; n > 0; --n) {
    auto tokens = prompt.subspan(static_cast<size_t>(start), static_cast<size_t>(n));
    if (std::optional<int32_t> slot = host_->Find(HashBlock(parent, tokens), tokens)) {
      return PartialHit{.slot = *slot, .num_tokens = n};
    }
  }
  return std::nullopt;
}

int32_t PagedPolicy::LookupThroughHost(absl::Span<const int32_t> prompt, Sequence& seq) {
  if (prompt.empty()) return 0;
  const int32_t max_blocks = (static_cast<int32_t>(prompt.size()) - 1) / block_size_;
  // First the chain as it stands: each block a pool hit, a host slot or a block on disk,
  // up to the first block none holds.
  struct Hit {
    BlockHash hash;
    std::optional<BlockId> pool;
    int32_t slot = -1;
    bool disk = false;
  };
  DiskTier* const disk = host_->disk();
  std::vector<Hit> hits;
  BlockHash parent = kRootBlockHash;
  for (int32_t i = 0; i < max_blocks; ++i) {
    auto tokens = prompt.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    const BlockHash hash = HashBlock(parent, tokens);
    Hit hit{.hash = hash, .pool = pool_.FindCached(hash, tokens)};
    if (!hit.pool.has_value()) {
      if (std::optional<int32_t> slot = host_->Find(hash, tokens); slot.has_value()) {
        hit.slot = *slot;
      } else if (disk != nullptr && disk->Find(hash, tokens)) {
        hit.disk = true;
      } else {
        break;
      }
    }
    hits.push_back(hit);
    parent = hash;
  }
  LogDiskRemovals();  // files the walk found gone or bad
  // Every pool hit is held before any load allocates: an allocation takes the head of the
  // free queue, which could otherwise be a later block of this very chain.
  for (const Hit& h : hits) {
    if (h.pool.has_value()) Acquire(*h.pool);
  }
  size_t kept = hits.size();
  for (size_t i = 0; i < hits.size(); ++i) {
    const Hit& h = hits[i];
    if (h.pool.has_value()) continue;
    if (pool_.num_free() == 0) {
      kept = i;  // no block to load into: the chain is cached up to here
      break;
    }
    // A fresh block, filled by the load before any step reads it; it enters the pool's
    // index now, as a block another sequence committed would.
    const BlockId id = AllocateEmpty();
    auto tokens = prompt.subspan(i * static_cast<size_t>(block_size_), block_size_);
    if (!pool_.Register(id, h.hash, tokens)) {
      // Another pool block holds this hash with other tokens (a collision): a miss.
      pool_.Release(id);
      kept = i;
      break;
    }
    fill_[id.value] = block_size_;
    num_tokens_stored_ += block_size_;
    if (h.disk) {
      // The load holds the entry until it is confirmed (disk_tier.h).
      const uint64_t ticket = host_->NextTicket();
      disk->NoteLoad(h.hash, ticket);
      transfers_.push_back(BlockTransfer{.kind = BlockTransfer::Kind::kLoadDisk,
                                         .block = id,
                                         .ticket = ticket,
                                         .hash_hi = h.hash.hi,
                                         .hash_lo = h.hash.lo});
    } else {
      host_->NoteLoad(h.slot);
      transfers_.push_back(BlockTransfer{.kind = BlockTransfer::Kind::kLoad,
                                         .block = id,
                                         .host_slot = h.slot});
    }
    hits[i].pool = id;
  }
  // Pool hits past the cut were held above: given back (nothing past it was loaded), tail
  // first as Free does, so the earlier blocks of a prefix stay cached longest.
  for (size_t i = hits.size(); i-- > kept;) {
    if (hits[i].slot < 0 && !hits[i].disk) Drop(*hits[i].pool);
  }
  for (size_t i = 0; i < kept; ++i) {
    seq.table.push_back(*hits[i].pool);
    seq.hashes.push_back(hits[i].hash);
  }
  if (disk != nullptr) disk->EndLookup();
  int32_t cached = static_cast<int32_t>(kept) * block_size_;
  // A chain that ended at a miss (not cut short for want of blocks) may go on through a
  // swapped-out sequence's partial last block: a fresh block, loaded, never hashed (its
  // sequence writes on into it).
  if (kept == hits.size() && pool_.num_free() > 0) {
    const BlockHash parent = kept == 0 ? kRootBlockHash : hits[kept - 1].hash;
    if (std::optional<PartialHit> partial = FindPartial(prompt, cached, parent)) {
      const BlockId id = AllocateEmpty();
      fill_[id.value] = partial->num_tokens;
      num_tokens_stored_ += partial->num_tokens;
      host_->NoteLoad(partial->slot);
      transfers_.push_back(BlockTransfer{.kind = BlockTransfer::Kind::kLoad,
                                         .block = id,
                                         .host_slot = partial->slot});
      seq.table.push_back(id);
      cached += partial->num_tokens;
    }
  }
  return cached;
}

BlockId PagedPolicy::AllocateEmpty() {
  const BlockId id = pool_.Allocate();
  fill_[id.value] = 0;
  return id;
}

void PagedPolicy::Acquire(BlockId id) {
  if (pool_.ref_count(id) == 0) {
    num_tokens_stored_ += fill_[id.value];
  } else {
    ++num_shared_refs_;
  }
  pool_.AddRef(id);
}

void PagedPolicy::Drop(BlockId id) {
  if (pool_.ref_count(id) == 1) {
    num_tokens_stored_ -= fill_[id.value];
  } else {
    --num_shared_refs_;
  }
  pool_.Release(id);
}

SeqResult PagedPolicy::Create(Sequence& seq, absl::Span<const int32_t> prompt) {
  int32_t cached = 0;
  if (host_ == nullptr) {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;
    Lookup(prompt, &blocks, &hashes);
    std::vector<std::vector<BlockId>> found;
    const int32_t k = windows_.empty() ? static_cast<int32_t>(blocks.size())
                                       : WindowedHits(prompt, hashes, &found);
    AttachPrefix(seq, blocks, hashes, found, k);
    cached = k * block_size_;
  } else {
    cached = LookupThroughHost(prompt, seq);
  }
  seq.tokens.assign(prompt.begin(), prompt.begin() + cached);
  seq.num_computed = cached;
  SeqResult result{.seq = seq.id};
  result.entries = seq.table;
  result.num_tokens = cached;
  result.num_cached_tokens = cached;
  for (const WindowTable& w : seq.windows) {
    result.windows.push_back(
        WindowResult{.first_block = w.first_block, .table_offset = w.first_block,
                     .entries = w.blocks});
  }
  return result;
}

SeqResult PagedPolicy::Fork(const Sequence& parent, Sequence& child) {
  child.tokens = parent.tokens;
  child.table = parent.table;
  child.num_computed = parent.num_computed;
  child.hashes = parent.hashes;
  child.windows = parent.windows;
  for (BlockId id : child.table) Acquire(id);
  SeqResult result{.seq = child.id};
  result.entries = child.table;
  result.num_tokens = child.num_tokens();
  for (const WindowTable& w : child.windows) {
    for (BlockId id : w.blocks) Acquire(id);
    result.windows.push_back(
        WindowResult{.first_block = w.first_block, .table_offset = w.first_block,
                     .entries = w.blocks});
  }
  return result;
}

SeqResult PagedPolicy::Grant(Sequence& seq, absl::Span<const int32_t> tokens) {
  const int32_t old_len = seq.num_tokens();
  const int32_t new_len = old_len + static_cast<int32_t>(tokens.size());
  int32_t blocks_needed = BlocksToGrow(seq.table, 0, old_len, new_len);
  // Window groups give back what no later query sees before they grow; blocks only
  // this sequence holds are free again at once.
  std::vector<int32_t> release(num_windows(), 0);
  int32_t freed = 0;
  for (int32_t g = 0; g < num_windows(); ++g) {
    const WindowTable& w = seq.windows[g];
    release[g] = std::max(0, FirstNeededBlock(g, seq.num_computed) - w.first_block);
    for (int32_t j = 0; j < release[g]; ++j) freed += pool_.ref_count(w.blocks[j]) == 1;
    blocks_needed += BlocksToGrow(w.blocks, w.first_block, old_len, new_len);
  }

  SeqResult result{.seq = seq.id};
  if (blocks_needed > pool_.num_free() + freed) {
    result.status = SeqStatus::kNoRoom;
    result.table_offset = static_cast<int32_t>(seq.table.size());
    result.num_tokens = old_len;
    return result;
  }
  for (int32_t g = 0; g < num_windows(); ++g) {
    WindowTable& w = seq.windows[g];
    // Oldest first: the free queue evicts them first.
    for (int32_t j = 0; j < release[g]; ++j) Drop(w.blocks[j]);
    w.blocks.erase(w.blocks.begin(), w.blocks.begin() + release[g]);
    w.first_block += release[g];
    num_window_releases_ += release[g];
  }
  result.table_offset = GrowTable(seq.table, 0, old_len, new_len, &result.copies);
  result.entries.assign(seq.table.begin() + result.table_offset, seq.table.end());
  for (WindowTable& w : seq.windows) {
    WindowResult& r = result.windows.emplace_back(WindowResult{.first_block = w.first_block});
    r.table_offset = GrowTable(w.blocks, w.first_block, old_len, new_len, &result.copies);
    r.entries.assign(w.blocks.begin() + (r.table_offset - w.first_block), w.blocks.end());
  }
  seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
  result.num_tokens = new_len;
  return result;
}

void PagedPolicy::Commit(Sequence& seq, int32_t num_computed) {
  seq.num_computed = num_computed;
  if (prefix_caching_ == PrefixCaching::kDisabled) return;
  const int32_t full_blocks = num_computed / block_size_;
  for (int32_t i = static_cast<int32_t>(seq.hashes.size()); i < full_blocks; ++i) {
    auto tokens = absl::MakeConstSpan(seq.tokens).subspan(
        static_cast<size_t>(i) * block_size_, block_size_);
    const BlockHash hash = HashBlock(i == 0 ? kRootBlockHash : seq.hashes.back(), tokens);
    // A block whose content another block already caches stays unhashed; the chain
    // goes on regardless, so later blocks still hash by content.
    pool_.Register(seq.table[i], hash, tokens);
    for (int32_t g = 0; g < num_windows(); ++g) {
      const WindowTable& w = seq.windows[g];
      if (i >= w.first_block) {
        pool_.Register(w.blocks[i - w.first_block], WindowHash(hash, g), tokens,
                       BlockPool::Logged::kUnlogged);
      }
    }
    seq.hashes.push_back(hash);
    if (host_ != nullptr && host_->num_slots() > 0) {
      // Write-through: the tier gets every computed block once (host_tier.h).
      StoreInHost(seq.table[i], hash, tokens);
    }
  }
}

void PagedPolicy::StoreInHost(BlockId block, const BlockHash& hash,
                              absl::Span<const int32_t> tokens) {
  const bool partial = static_cast<int32_t>(tokens.size()) < block_size_;
  if (std::optional<int32_t> slot = host_->Find(hash, tokens); slot.has_value()) {
    host_->Touch(*slot);
    return;
  }
  if (host_->Contains(hash)) return;  // another entry's tokens under this hash: kept
  HostTier::Stored stored = host_->Store(hash, tokens);
  if (stored.evicted.has_value() && !stored.evicted_partial) {
    // Leaving memory: for the routers, on disk if the disk keeps it, else gone.
    DiskTier* const disk = host_->disk();
    const bool spill =
        disk != nullptr && disk->Spill(*stored.evicted, stored.evicted_tokens, stored.ticket);
    LogDiskRemovals();
    // Leaving memory: on disk for the routers once a file holds it (a spill decided
    // now is announced when its step is confirmed: OnTransfersConfirmed).
    pool_.LogBelow(disk != nullptr && disk->Announced(*stored.evicted)
                       ? BlockEvent::Kind::kStoredOnDisk
                       : BlockEvent::Kind::kRemoved,
                   *stored.evicted);
    if (spill) {
      // Before the store that reuses the slot (transfers run in order).
      transfers_.push_back(BlockTransfer{.kind = BlockTransfer::Kind::kSpill,
                                         .host_slot = stored.slot,
                                         .ticket = stored.ticket,
                                         .hash_hi = stored.evicted->hi,
                                         .hash_lo = stored.evicted->lo,
                                         .tokens = std::move(stored.evicted_tokens)});
    }
  }
  // A no-op while the pool holds it; partial entries are this replica's own.
  if (!partial) pool_.LogBelow(BlockEvent::Kind::kStored, hash);
  transfers_.push_back(BlockTransfer{.kind = BlockTransfer::Kind::kStore,
                                     .block = block,
                                     .host_slot = stored.slot,
                                     .ticket = stored.ticket});
}

void PagedPolicy::SwapOut(Sequence& seq) {
  if (host_ == nullptr || host_->num_slots() == 0) return;
  const int32_t full = seq.num_computed / block_size_;
  const int32_t rest = seq.num_computed % block_size_;
  CHECK_GE(static_cast<int32_t>(seq.hashes.size()), full);
  auto tokens_of = [&](int32_t i, int32_t n) {
    return absl::MakeConstSpan(seq.tokens).subspan(static_cast<size_t>(i) * block_size_, n);
  };
  // The least valuable first, so that under LRU it also goes first: the partial tail,
  // then the full blocks from the last to the first (a chain is cut from its end).
  if (rest > 0) {
    const BlockHash& parent = full == 0 ? kRootBlockHash : seq.hashes[full - 1];
    auto tokens = tokens_of(full, rest);
    StoreInHost(seq.table[full], HashBlock(parent, tokens), tokens);
  }
  for (int32_t i = full; i-- > 0;) {
    StoreInHost(seq.table[i], seq.hashes[i], tokens_of(i, block_size_));
  }
}

absl::Status PagedPolicy::CheckTruncate(const Sequence& seq, int32_t num_tokens) const {
  if (absl::Status s = CheckCut(seq, seq.table, 0, num_tokens); !s.ok()) return s;
  for (const WindowTable& w : seq.windows) {
    if (absl::Status s = CheckCut(seq, w.blocks, w.first_block, num_tokens); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void PagedPolicy::Truncate(Sequence& seq, int32_t num_tokens) {
  const int32_t old_len = seq.num_tokens();
  CHECK_GE(num_tokens, seq.num_computed);
  CHECK_LE(num_tokens, old_len);
  CutTable(seq.table, 0, old_len, num_tokens);
  for (WindowTable& w : seq.windows) CutTable(w.blocks, w.first_block, old_len, num_tokens);
  seq.tokens.resize(num_tokens);
}

void PagedPolicy::Free(Sequence& seq) {
  // Tail blocks first: in the free queue they come before the prefix blocks, so they are
  // evicted first, and the shared prefixes live longest.
  // The window groups' blocks go first: a prefix hit needs the full-attention blocks of
  // the whole prefix and only the windows' last blocks.
  for (WindowTable& w : seq.windows) {
    for (auto it = w.blocks.rbegin(); it != w.blocks.rend(); ++it) Drop(*it);
    w.blocks.clear();
  }
  for (auto it = seq.table.rbegin(); it != seq.table.rend(); ++it) Drop(*it);
  seq.table.clear();
}

PoolStats PagedPolicy::Stats() const {
  PoolStats s;
  s.num_blocks_total = pool_.num_blocks();
  s.num_blocks_free = pool_.num_free();
  s.num_blocks_used = pool_.num_used();
  s.num_blocks_cached_evictable = pool_.num_cached_evictable();
  s.num_slots_allocated = static_cast<int64_t>(pool_.num_used()) * block_size_;
  s.num_tokens_stored = num_tokens_stored_;
  s.num_evictions = pool_.num_evictions();
  s.num_shared_refs = num_shared_refs_;
  s.num_window_releases = num_window_releases_;
  return s;
}

absl::Status PagedPolicy::CheckInvariants(const SequenceMap& seqs) const {
  if (absl::Status s = pool_.CheckInvariants(); !s.ok()) return s;
  std::vector<int32_t> holders(pool_.num_blocks(), 0);
  for (const auto& [id, seq] : seqs) {
    const int32_t n = seq.num_tokens();
    if (absl::Status s = CheckTable(id, seq.table, 0, n, &holders); !s.ok()) return s;
    if (static_cast<int32_t>(seq.windows.size()) != num_windows()) {
      return absl::InternalError(absl::StrCat("sequence ", id.value, " has ",
                                              seq.windows.size(), " window tables, not ",
                                              num_windows()));
    }
    for (int32_t g = 0; g < num_windows(); ++g) {
      const WindowTable& w = seq.windows[g];
      // Nothing a later query could see was given back.
      if (w.first_block > FirstNeededBlock(g, seq.num_computed)) {
        return absl::InternalError(absl::StrCat(
            "sequence ", id.value, " window group ", g, " released block ", w.first_block - 1,
            " with ", seq.num_computed, " tokens computed (window ", windows_[g], ")"));
      }
      if (absl::Status s = CheckTable(id, w.blocks, w.first_block, n, &holders); !s.ok()) {
        return s;
      }
    }
  }
  int64_t stored = 0;
  int64_t shared = 0;
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    // A block in the prefix cache holds a whole block of computed tokens.
    if (pool_.is_cached(BlockId{b}) && fill_[b] != block_size_) {
      return absl::InternalError(absl::StrCat("cached block ", b, " has ", fill_[b],
                                              " tokens of ", block_size_));
    }
    if (holders[b] > 1) shared += holders[b] - 1;
    if (holders[b] != pool_.ref_count(BlockId{b})) {
      return absl::InternalError(absl::StrCat("block ", b, " has ref count ",
                                              pool_.ref_count(BlockId{b}), " but ",
                                              holders[b], " tables hold it"));
    }
    if (holders[b] > 0) stored += fill_[b];
  }
  if (shared != num_shared_refs_) {
    return absl::InternalError(absl::StrCat("shared references counter ", num_shared_refs_,
                                            " != ", shared));
  }
  if (stored != num_tokens_stored_) {
    return absl::InternalError(absl::StrCat("tokens stored counter ", num_tokens_stored_,
                                            " != ", stored));
  }
  if (pool_.num_free() + pool_.num_used() != pool_.num_blocks()) {
    return absl::InternalError("free + used != total");
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

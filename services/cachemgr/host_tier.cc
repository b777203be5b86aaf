#include "services/cachemgr/host_tier.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"

namespace folio::cachemgr {

namespace {

std::atomic<uint64_t> g_generations{0};

uint64_t TicketBase() {
  return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())) << 12;
}

}  // namespace

HostTier::HostTier(int32_t num_slots, int32_t block_size, std::string id)
    : HostTier(num_slots, block_size, std::move(id), TicketBase()) {}

HostTier::HostTier(int32_t num_slots, int32_t block_size, std::string id, uint64_t first_ticket)
    : num_slots_(num_slots),
      block_size_(block_size),
      id_(std::move(id)),
      slots_(num_slots),
      tokens_(static_cast<size_t>(num_slots) * block_size, 0),
      generation_(++g_generations),
      first_ticket_(first_ticket),
      last_ticket_(first_ticket),
      confirmed_(first_ticket) {
  CHECK_GE(num_slots, 0);
  CHECK_GT(block_size, 0);
  // Taken from the back: slot 0 first.
  for (int32_t s = num_slots - 1; s >= 0; --s) free_.push_back(s);
  counters_.num_slots = num_slots;
}

std::optional<int32_t> HostTier::Find(const BlockHash& hash,
                                      absl::Span<const int32_t> tokens) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const int32_t slot = it->second;
  if (tokens.size() != static_cast<size_t>(slots_[slot].length) ||
      !std::equal(tokens.begin(), tokens.end(),
                  tokens_.begin() + static_cast<ptrdiff_t>(slot) * block_size_)) {
    return std::nullopt;
  }
  return slot;
}

void HostTier::Touch(int32_t slot) {
  Slot& s = slots_[slot];
  DCHECK(s.used);
  lru_.splice(lru_.end(), lru_, s.lru);
}

void HostTier::NoteLoad(int32_t slot) {
  ++counters_.num_loads;
  Slot& s = slots_[slot];
  if (s.length < block_size_) {
    // A swapped sequence is back: it fills this block and stores it whole, so the entry
    // is the first to go when a store needs room (never before: the load reads it first,
    // as the workers run transfers in order).
    ++counters_.num_partial_loads;
    lru_.splice(lru_.begin(), lru_, s.lru);
    return;
  }
  Touch(slot);
}

void HostTier::Evict(int32_t slot) {
  Slot& s = slots_[slot];
  index_.erase(s.hash);
  lru_.erase(s.lru);
  if (s.length < block_size_) --num_partial_;
  s.used = false;
  free_.push_back(slot);
}

HostTier::Stored HostTier::Store(const BlockHash& hash, absl::Span<const int32_t> tokens) {
  CHECK_GT(num_slots_, 0);
  CHECK(!index_.contains(hash));
  CHECK(!tokens.empty() && tokens.size() <= static_cast<size_t>(block_size_));
  std::optional<BlockHash> evicted;
  std::vector<int32_t> evicted_tokens;
  bool evicted_partial = false;
  if (free_.empty()) {
    const Slot& victim = slots_[lru_.front()];
    evicted = victim.hash;
    evicted_partial = victim.length < block_size_;
    const auto first = tokens_.begin() + static_cast<ptrdiff_t>(lru_.front()) * block_size_;
    evicted_tokens.assign(first, first + victim.length);
    Evict(lru_.front());
    ++counters_.num_evictions;
  }
  const int32_t slot = free_.back();
  free_.pop_back();
  Slot& s = slots_[slot];
  s.used = true;
  s.ticket = ++last_ticket_;
  s.hash = hash;
  s.length = static_cast<int32_t>(tokens.size());
  if (s.length < block_size_) {
    ++num_partial_;
    ++counters_.num_partial_stores;
  }
  s.lru = lru_.insert(lru_.end(), slot);
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(slot) * block_size_);
  index_.emplace(hash, slot);
  unconfirmed_.push_back(Stored{slot, s.ticket});
  ++counters_.num_stores;
  return Stored{slot, s.ticket, evicted, std::move(evicted_tokens), evicted_partial};
}

void HostTier::Confirm(uint64_t ticket) {
  // A mark from another tier's tickets (below first_ticket_, or past any this one issued)
  // confirms nothing here.
  if (ticket > last_ticket_) return;
  confirmed_ = std::max(confirmed_, ticket);
  if (disk_ != nullptr) disk_->Confirm(confirmed_);
  while (!unconfirmed_.empty() && unconfirmed_.front().ticket <= confirmed_) {
    unconfirmed_.pop_front();
  }
}

void HostTier::DropUnconfirmed() {
  for (const Stored& u : unconfirmed_) {
    const Slot& s = slots_[u.slot];
    // The slot may have been evicted and stored again since; the later store is in this
    // list too.
    if (s.used && s.ticket == u.ticket) {
      Evict(u.slot);
      ++counters_.num_dropped_unconfirmed;
    }
  }
  unconfirmed_.clear();
}

std::vector<BlockHash> HostTier::Hashes() const {
  std::vector<BlockHash> hashes;
  hashes.reserve(index_.size());
  for (const auto& [hash, slot] : index_) {
    if (slots_[slot].length == block_size_) hashes.push_back(hash);
  }
  return hashes;
}

HostTierStats HostTier::Stats() const {
  HostTierStats stats = counters_;
  stats.num_used = static_cast<int32_t>(index_.size());
  return stats;
}

absl::Status HostTier::CheckInvariants() const {
  int32_t used = 0;
  int32_t partial = 0;
  for (int32_t i = 0; i < num_slots_; ++i) {
    const Slot& s = slots_[i];
    if (!s.used) continue;
    ++used;
    if (s.length < 1 || s.length > block_size_) {
      return absl::InternalError(absl::StrCat("host slot ", i, " holds ", s.length, " tokens"));
    }
    if (s.length < block_size_) ++partial;
    auto it = index_.find(s.hash);
    if (it == index_.end() || it->second != i) {
      return absl::InternalError(absl::StrCat("host slot ", i, " holds a hash the index does "
                                              "not map back to it"));
    }
    if (s.ticket > last_ticket_ || s.ticket <= first_ticket_) {
      return absl::InternalError(absl::StrCat("host slot ", i, " has a future ticket"));
    }
  }
  if (used != static_cast<int32_t>(index_.size()) || used != static_cast<int32_t>(lru_.size()) ||
      used + static_cast<int32_t>(free_.size()) != num_slots_) {
    return absl::InternalError(absl::StrCat("host tier: ", used, " slots used, index ",
                                            index_.size(), ", LRU ", lru_.size(), ", free ",
                                            free_.size(), ", of ", num_slots_));
  }
  if (partial != num_partial_) {
    return absl::InternalError(absl::StrCat("host tier: ", partial, " partial entries, counted ",
                                            num_partial_));
  }
  for (int32_t f : free_) {
    if (slots_[f].used) return absl::InternalError(absl::StrCat("host slot ", f, " is free and used"));
  }
  uint64_t prev = confirmed_;
  for (const Stored& u : unconfirmed_) {
    if (u.ticket <= prev) {
      return absl::InternalError(absl::StrCat("host tier: unconfirmed ticket ", u.ticket,
                                              " is not above ", prev));
    }
    prev = u.ticket;
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

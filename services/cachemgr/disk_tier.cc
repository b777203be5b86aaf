#include "services/cachemgr/disk_tier.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kv_block_file.h"
#include "glog/logging.h"

namespace folio::cachemgr {
namespace {
constexpr absl::Duration kStaleTemp = absl::Minutes(10);
}  // namespace

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(std::string dir, int32_t num_ranks,
                                                         int32_t block_size,
                                                         int32_t num_blocks) {
  if (num_ranks <= 0 || block_size <= 0 || num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier: ranks, block size and blocks must be positive, got ", num_ranks, ", ",
        block_size, ", ", num_blocks));
  }
  absl::StatusOr<uint64_t> ns = ParseKvNamespaceDir(dir);
  if (!ns.ok()) return ns.status();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the disk KV tier's directory ", dir, " is not visible to the cache manager: ",
        std::strerror(errno), " (it must see the workers' --kv_disk_dir)"));
  }
  // What an earlier run (or another replica) left, oldest first.
  std::vector<std::pair<int64_t, BlockHash>> found;
  const int64_t now = absl::ToUnixNanos(absl::Now());
  while (dirent* e = readdir(d)) {
    BlockHash hash;
    if (!ParseKvBlockFileName(e->d_name, &hash.hi, &hash.lo)) {
      // A writer's temporary file (".<name>.tmp.<pid>.<n>") left by a worker that died
      // mid-write; one younger than kStaleTemp may still be renamed into place.
      struct stat st;
      if (e->d_name[0] == '.' && std::strstr(e->d_name, ".kv.tmp.") != nullptr &&
          fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
          now - (int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec) >
              absl::ToInt64Nanoseconds(kStaleTemp)) {
        unlinkat(dirfd(d), e->d_name, 0);
      }
      continue;
    }
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue;
    found.emplace_back(int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, hash);
  }
  closedir(d);
  auto tier = absl::WrapUnique(new DiskTier(std::move(dir), *ns, num_ranks, block_size, num_blocks));
  tier->Index(found);
  return tier;
}

DiskTier::DiskTier(std::string dir, uint64_t namespace_hash, int32_t num_ranks,
                   int32_t block_size, int32_t num_blocks)
    : dir_(std::move(dir)),
      namespace_hash_(namespace_hash),
      num_ranks_(num_ranks),
      block_size_(block_size),
      num_blocks_(num_blocks) {
  counters_.num_blocks = num_blocks;
}

void DiskTier::Index(const std::vector<std::pair<int64_t, BlockHash>>& found) {
  std::vector<std::pair<int64_t, BlockHash>> sorted = found;
  std::sort(sorted.begin(), sorted.end());
  // Past the budget, the oldest go.
  const size_t drop = sorted.size() > static_cast<size_t>(num_blocks_)
                          ? sorted.size() - static_cast<size_t>(num_blocks_)
                          : 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i < drop) {
      RemoveFiles(sorted[i].second);
      ++counters_.num_evictions;
      continue;
    }
    Insert(sorted[i].second, {}, 0);
  }
  if (!sorted.empty()) {
    LOG(INFO) << "disk KV tier " << dir_ << ": " << index_.size() << " blocks found"
              << (drop > 0 ? absl::StrCat(", ", drop, " oldest removed (over the budget)")
                           : std::string());
  }
}

DiskTier::Entry& DiskTier::Insert(const BlockHash& hash, std::vector<int32_t> tokens,
                                  uint64_t spill_ticket) {
  Entry& e = index_[hash];
  e.tokens = std::move(tokens);
  e.spill_ticket = spill_ticket;
  e.hold_ticket = spill_ticket;
  e.lru = lru_.insert(lru_.end(), hash);
  return e;
}

bool DiskTier::FilesPresent(const BlockHash& hash) const {
  for (int32_t r = 0; r < num_ranks_; ++r) {
    const std::string path = absl::StrCat(dir_, "/", KvBlockFileName(hash.hi, hash.lo, r));
    if (access(path.c_str(), R_OK) != 0) return false;
  }
  return true;
}

absl::StatusOr<std::vector<int32_t>> DiskTier::ReadTokens(const BlockHash& hash) const {
  return ReadKvBlockFileTokens(dir_,
                               KvBlockFileKey{.namespace_hash = namespace_hash_,
                                              .hash_hi = hash.hi,
                                              .hash_lo = hash.lo,
                                              .rank = 0,
                                              .num_ranks = num_ranks_},
                               block_size_);
}

void DiskTier::RemoveFiles(const BlockHash& hash) const {
  for (int32_t r = 0; r < num_ranks_; ++r) {
    unlink(absl::StrCat(dir_, "/", KvBlockFileName(hash.hi, hash.lo, r)).c_str());
  }
}

bool DiskTier::MakeRoom() {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    auto entry = index_.find(*it);
    if (entry->second.hold_ticket > confirmed_) continue;  // a transfer may not have run yet
    if (in_lookup_.contains(*it)) continue;               // a hit of the lookup under way
    Drop(entry, /*remove_files=*/true);
    ++counters_.num_evictions;
    return true;
  }
  return false;
}

bool DiskTier::Peek(const BlockHash& hash, absl::Span<const int32_t> tokens) const {
  if (tokens.size() != static_cast<size_t>(block_size_)) return false;
  if (banned_.contains(hash)) return false;
  auto it = index_.find(hash);
  if (it != index_.end()) {
    const Entry& e = it->second;
    if (e.spill_ticket > confirmed_) return false;  // its spill may not have run yet
    if (!e.tokens.empty()) {
      return std::equal(tokens.begin(), tokens.end(), e.tokens.begin()) && FilesPresent(hash);
    }
  }
  absl::StatusOr<std::vector<int32_t>> read = ReadTokens(hash);
  return read.ok() && std::equal(tokens.begin(), tokens.end(), read->begin()) &&
         FilesPresent(hash);
}

void DiskTier::Drop(absl::flat_hash_map<BlockHash, Entry>::iterator it, bool remove_files) {
  if (remove_files) RemoveFiles(it->first);
  removed_.push_back(it->first);
  lru_.erase(it->second.lru);
  index_.erase(it);
}

bool DiskTier::Find(const BlockHash& hash, absl::Span<const int32_t> tokens) {
  if (tokens.size() != static_cast<size_t>(block_size_)) return false;
  if (banned_.contains(hash)) return false;
  auto it = index_.find(hash);
  if (it != index_.end() && it->second.spill_ticket > confirmed_) {
    return false;  // see Peek
  }
  if (it != index_.end() && !it->second.tokens.empty() &&
      !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin())) {
    return false;  // a hash collision: the entry holds other tokens
  }
  // The rank-0 header says what the file holds, read at every hit: a file damaged, cut or
  // replaced since it was written is a miss here rather than a load the worker refuses
  // (only a damaged payload gets that far).
  absl::StatusOr<std::vector<int32_t>> read = ReadTokens(hash);
  if (!read.ok()) {
    if (absl::IsDataLoss(read.status())) {
      LOG_FIRST_N(WARNING, 5) << "disk KV tier: " << read.status().message()
                              << "; removed (a miss)";
      ++counters_.num_bad_files;
      RemoveFiles(hash);
    } else if (absl::IsNotFound(read.status())) {
      if (it != index_.end()) ++counters_.num_missing;
      RemoveFiles(hash);  // the other ranks' files, if any: no block without rank 0's
    } else {
      // A passing error (descriptors, I/O, permissions): a miss, and the files stay for
      // whoever can read them.
      LOG_FIRST_N(WARNING, 5) << "disk KV tier: " << read.status().message() << " (a miss)";
      return false;
    }
    if (it != index_.end()) Drop(it, /*remove_files=*/false);
    return false;
  }
  if (!std::equal(tokens.begin(), tokens.end(), read->begin())) return false;  // a collision
  if (!FilesPresent(hash)) {  // another rank's file is gone: the rest is no block either
    if (it != index_.end()) ++counters_.num_missing;
    RemoveFiles(hash);
    if (it != index_.end()) Drop(it, /*remove_files=*/false);
    return false;
  }
  if (it == index_.end()) {
    if (static_cast<int32_t>(index_.size()) >= num_blocks_ && !MakeRoom()) return false;
    Insert(hash, *std::move(read), 0);
    ++counters_.num_adopted;
    announced_.push_back(hash);
  } else {
    it->second.tokens = *std::move(read);
    lru_.splice(lru_.end(), lru_, it->second.lru);
  }
  // Kept until the lookup ends (EndLookup): a later block of the same chain that makes room
  // must not evict this one before its load is noted.
  in_lookup_.insert(hash);
  return true;
}

void DiskTier::EndLookup() { in_lookup_.clear(); }

void DiskTier::Ban(const BlockHash& hash) {
  if (banned_.size() >= kMaxBanned) banned_.clear();
  banned_.insert(hash);
  ++counters_.num_banned;
  // The files stay: the worker removed a damaged one itself, and one it could not read
  // (no tier there, a passing error) may serve other replicas sharing the directory. The
  // pool the entry was in is being reset, so no event is owed for it.
  if (auto it = index_.find(hash); it != index_.end()) {
    lru_.erase(it->second.lru);
    index_.erase(it);
  }
}

void DiskTier::NoteLoad(const BlockHash& hash, uint64_t ticket) {
  auto it = index_.find(hash);
  CHECK(it != index_.end()) << "a disk load of a block the tier does not hold";
  it->second.hold_ticket = std::max(it->second.hold_ticket, ticket);
  lru_.splice(lru_.end(), lru_, it->second.lru);
  ++counters_.num_loads;
}

bool DiskTier::Spill(const BlockHash& hash, absl::Span<const int32_t> tokens, uint64_t ticket) {
  CHECK_EQ(tokens.size(), static_cast<size_t>(block_size_));
  if (banned_.contains(hash)) return false;
  if (auto it = index_.find(hash); it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    // Its files written (or about to be): nothing to do. Gone (a failed write, another
    // replica's eviction): written again under this spill's ticket.
    if (it->second.spill_ticket > confirmed_ || FilesPresent(hash)) return false;
    it->second.spill_ticket = ticket;
    pending_spills_.emplace_back(ticket, hash);
    it->second.hold_ticket = std::max(it->second.hold_ticket, ticket);
    it->second.tokens.assign(tokens.begin(), tokens.end());
    ++counters_.num_spills;
    return true;
  }
  if (static_cast<int32_t>(index_.size()) >= num_blocks_ && !MakeRoom()) return false;
  Insert(hash, std::vector<int32_t>(tokens.begin(), tokens.end()), ticket);
  pending_spills_.emplace_back(ticket, hash);
  ++counters_.num_spills;
  return true;
}

std::vector<BlockHash> DiskTier::Hashes() const {
  std::vector<BlockHash> out;
  for (const BlockHash& h : lru_) {
    if (Announced(h)) out.push_back(h);
  }
  return out;
}

bool DiskTier::Announced(const BlockHash& hash) const {
  auto it = index_.find(hash);
  return it != index_.end() && it->second.spill_ticket <= confirmed_;
}

std::vector<BlockHash> DiskTier::TakeAnnounced() { return std::exchange(announced_, {}); }

std::vector<BlockHash> DiskTier::TakeRemoved() { return std::exchange(removed_, {}); }

void DiskTier::Confirm(uint64_t ticket) {
  confirmed_ = std::max(confirmed_, ticket);
  // Spills now written: announced to the routers (an entry evicted or spilled again since
  // under a newer ticket is not).
  while (!pending_spills_.empty() && pending_spills_.front().first <= confirmed_) {
    const auto [spill_ticket, hash] = pending_spills_.front();
    pending_spills_.pop_front();
    auto it = index_.find(hash);
    if (it != index_.end() && it->second.spill_ticket == spill_ticket) announced_.push_back(hash);
  }
}

DiskTierStats DiskTier::Stats() const {
  DiskTierStats stats = counters_;
  stats.num_used = static_cast<int32_t>(index_.size());
  return stats;
}

absl::Status DiskTier::CheckInvariants() const {
  if (index_.size() != lru_.size() || static_cast<int32_t>(index_.size()) > num_blocks_) {
    return absl::InternalError(absl::StrCat("disk tier: index ", index_.size(), ", LRU ",
                                            lru_.size(), ", budget ", num_blocks_));
  }
  for (const BlockHash& h : lru_) {
    auto it = index_.find(h);
    if (it == index_.end() || *it->second.lru != h) {
      return absl::InternalError("disk tier: the LRU list holds a hash the index does not");
    }
    if (!it->second.tokens.empty() &&
        it->second.tokens.size() != static_cast<size_t>(block_size_)) {
      return absl::InternalError("disk tier: an entry's tokens are not one block");
    }
  }
  return absl::OkStatus();
}

}  // namespace folio::cachemgr

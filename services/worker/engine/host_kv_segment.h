// HostKvSegment: the bytes of the KV offload tier in host memory (tier 1, issue #50) on
// one worker rank: a POSIX shared-memory segment (/dev/shm/<name>) of whole KV blocks,
// laid out as KvCache::CopyBlockOut writes them. The segment belongs to the replica, not
// to the worker process: it outlives a worker that dies, and the worker that replaces it
// opens it again and finds every block where it was (in Kubernetes, /dev/shm lives as
// long as the pod). The cache manager's HostTier (services/cachemgr/host_tier.h) decides
// what each slot holds; this class only maps it.
//
//   [ header: 4 KiB ][ slot 0 ][ slot 1 ] ... [ slot num_slots - 1 ]
//
// The header names the segment's geometry and a fingerprint of what its blocks mean (the
// model, the rank's heads, the KV dtype, the block size) and an id made when the segment
// was made. Open reuses a segment whose header matches and makes it anew (a new id)
// otherwise, so the id the worker reports tells the cache manager whether the blocks it
// indexed are still there.
//
// One process at a time: Open takes an exclusive lock on the segment, which a second
// process (two ranks given one name) is refused; a process that dies drops it. Segments
// stay in /dev/shm until removed (`./folio serve` removes its own; a worker started by
// hand leaves its segment for the next start, `rm /dev/shm/<name>` frees it).
//
// Thread-compatible: the worker's step thread reads and writes slots.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_HOST_KV_SEGMENT_H_
#define FOLIO_SERVICES_WORKER_ENGINE_HOST_KV_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace folio::worker {

class HostKvSegment {
 public:
  static constexpr int64_t kHeaderBytes = 4096;

  // Opens (or makes) segment `name` holding as many blocks of `bytes_per_block` as fit in
  // `byte_budget` (header included). InvalidArgument for a bad name or a budget below one
  // block; ResourceExhausted when the memory cannot be reserved (a small /dev/shm);
  // FailedPrecondition when another process holds it.
  static absl::StatusOr<std::unique_ptr<HostKvSegment>> Open(const std::string& name,
                                                             int64_t byte_budget,
                                                             int64_t bytes_per_block,
                                                             const std::string& fingerprint);
  // Removes segment `name` (what `./folio serve` does when it stops). OK when absent.
  static absl::Status Unlink(const std::string& name);

  HostKvSegment(const HostKvSegment&) = delete;
  HostKvSegment& operator=(const HostKvSegment&) = delete;
  ~HostKvSegment();  // unmaps and unlocks; the segment stays

  const std::string& name() const { return name_; }
  const std::string& id() const { return id_; }
  int32_t num_slots() const { return num_slots_; }
  int64_t bytes_per_block() const { return bytes_per_block_; }
  int64_t size_bytes() const { return size_; }
  // True when Open found the segment as an earlier process left it.
  bool reused() const { return reused_; }

  uint8_t* slot(int32_t i) const {
    return base_ + kHeaderBytes + static_cast<int64_t>(i) * bytes_per_block_;
  }

 private:
  HostKvSegment(std::string name, std::string id, int fd, uint8_t* base, int64_t size,
                int64_t bytes_per_block, int32_t num_slots, bool reused)
      : name_(std::move(name)), id_(std::move(id)), fd_(fd), base_(base), size_(size),
        bytes_per_block_(bytes_per_block), num_slots_(num_slots), reused_(reused) {}

  const std::string name_;
  const std::string id_;
  const int fd_;  // held open: its lock keeps other processes out
  uint8_t* const base_;
  const int64_t size_;
  const int64_t bytes_per_block_;
  const int32_t num_slots_;
  const bool reused_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_HOST_KV_SEGMENT_H_

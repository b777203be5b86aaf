// KvDiskStore: one worker rank's side of the KV offload tier on disk (tier 2, issue #50,
// --kv_disk_dir / --kv_disk_bytes). It writes and reads the block files
// (common/kv_block_file.h) the cache manager's DiskTier index decides about
// (services/cachemgr/disk_tier.h): a spill writes a host-tier slot to the file of the block
// it held, a disk load reads a file back for the pool. The files live in the model's
// namespace directory under the root, so every rank of every replica of the same model
// (same content, KV shape and dtype, block size and rank count) names a block the same
// way, and replicas sharing the root share the blocks.
//
// A failed write (disk full, an unwritable or vanished directory) is never the step's
// failure: it is counted and logged once, and writes stop for the life of the store; the
// cache manager's lookups then miss on the absent files. A failed read is the step's
// refusal (DataLoss): the block it was to fill would hold nothing. A damaged file is
// removed on the way, so the next lookup misses.
//
// Thread-compatible: the worker's step thread owns it.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_KV_DISK_STORE_H_
#define FOLIO_SERVICES_WORKER_ENGINE_KV_DISK_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace folio::worker {

struct KvDiskStoreStats {
  int64_t num_spills = 0;          // files written
  int64_t num_spill_failures = 0;  // writes that failed (the first one stops writes)
  int64_t num_spills_skipped = 0;  // spills not written because writes had stopped
  int64_t num_loads = 0;           // files read back
  int64_t num_load_failures = 0;   // files missing, damaged or foreign at a load
  int64_t bytes_written = 0;
  int64_t bytes_read = 0;
  double load_seconds = 0;         // time spent reading files, all loads together
  bool writes_disabled = false;
};

struct KvDiskStoreOptions {
  std::string root;          // --kv_disk_dir
  int64_t budget_bytes = 0;  // --kv_disk_bytes: this rank's files together
  // What makes blocks interchangeable (ModelContentIdentity plus the KV shape, dtype,
  // block size and rank count); hashed into the namespace directory's name.
  std::string identity;
  int32_t rank = 0;
  int32_t num_ranks = 1;
  int32_t block_size = 16;
  int64_t bytes_per_block = 0;  // one rank's block, KvCache::CopyBlockOut's layout
};

// A fingerprint of a model file's (or a directory of files') content that does not
// depend on where it lies: its size, checksums of its first and last MiB and of 4,096
// spans of 4 KiB spread evenly between them (16 MiB read at most; a directory: those of
// every regular file in it, by name). Two files that differ in any whole tensor differ
// here; two that differ only between the samples would share blocks (give them
// different --kv_disk_dir roots). NotFound when there is
// nothing at `path`.
absl::StatusOr<std::string> ModelContentIdentity(const std::string& path);

class KvDiskStore {
 public:
  // Makes the namespace directory (and the root, with its parents) if needed.
  // InvalidArgument for a budget below one block; FailedPrecondition when the directory
  // cannot be made.
  static absl::StatusOr<std::unique_ptr<KvDiskStore>> Open(KvDiskStoreOptions options);

  KvDiskStore(const KvDiskStore&) = delete;
  KvDiskStore& operator=(const KvDiskStore&) = delete;

  const std::string& dir() const { return dir_; }  // the namespace directory
  uint64_t namespace_hash() const { return namespace_hash_; }
  int32_t num_blocks() const { return num_blocks_; }  // files the budget holds
  int64_t bytes_per_block() const { return options_.bytes_per_block; }
  const KvDiskStoreOptions& options() const { return options_; }

  // Writes the file of block (hash_hi, hash_lo): `tokens` (block_size of them) and
  // `payload` (bytes_per_block bytes). Never fails the caller (above).
  void Spill(uint64_t hash_hi, uint64_t hash_lo, absl::Span<const int32_t> tokens,
             const uint8_t* payload);
  // Reads the file of block (hash_hi, hash_lo) into `out` (bytes_per_block bytes):
  // NotFound, DataLoss (the file is removed) or OK.
  absl::Status Load(uint64_t hash_hi, uint64_t hash_lo, uint8_t* out);

  const KvDiskStoreStats& stats() const { return stats_; }

 private:
  KvDiskStore(KvDiskStoreOptions options, std::string dir, uint64_t namespace_hash,
              int32_t num_blocks)
      : options_(std::move(options)), dir_(std::move(dir)), namespace_hash_(namespace_hash),
        num_blocks_(num_blocks) {}

  const KvDiskStoreOptions options_;
  const std::string dir_;
  const uint64_t namespace_hash_;
  const int32_t num_blocks_;
  KvDiskStoreStats stats_;
  bool logged_load_failure_ = false;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_KV_DISK_STORE_H_

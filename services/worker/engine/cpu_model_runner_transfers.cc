// CpuModelRunner's KV offload transfers (the host and disk tiers: host_kv_segment.h,
// kv_disk_store.h): a step's block copies between the pool, the host segment and the disk
// store. Split from cpu_model_runner.cc.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/kv_block_file.h"
#include "services/worker/engine/cpu_model_runner.h"

namespace folio::worker {

absl::Status CpuModelRunner::SetHostSegmentAt(const HostKvSegment* host, int64_t offset) {
  // A slot may hold more than this pool's block (a draft model's after it), never less.
  if (host != nullptr &&
      (offset < 0 || offset + kv_->bytes_per_block() > host->bytes_per_block())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host KV segment ", host->name(), " holds blocks of ", host->bytes_per_block(),
        " bytes, the pool's are ", kv_->bytes_per_block(),
        offset > 0 ? absl::StrCat(" at byte ", offset) : ""));
  }
  host_ = host;
  host_offset_ = offset;
  return absl::OkStatus();
}

absl::Status CpuModelRunner::SetDiskStore(KvDiskStore* disk) {
  if (disk != nullptr && disk->bytes_per_block() != kv_->bytes_per_block()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV disk store ", disk->dir(), " holds blocks of ", disk->bytes_per_block(),
        " bytes, the pool's are ", kv_->bytes_per_block()));
  }
  disk_ = disk;
  return absl::OkStatus();
}

absl::Status CpuModelRunner::CheckTransfers(absl::Span<const HostTransfer> transfers) const {
  const int32_t block_size = kv_->shape().block_size;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const HostTransfer& t = transfers[i];
    const bool disk_load = t.kind == HostTransfer::Kind::kLoadDisk;
    if (host_ == nullptr) {
      return absl::FailedPreconditionError(
          "the step carries KV offload transfers, but this worker has no host tier "
          "(--kv_host_bytes)");
    }
    const bool uses_block = t.kind != HostTransfer::Kind::kSpill;
    const bool uses_slot = !disk_load;
    if ((uses_block && (t.block < 0 || t.block >= kv_->num_blocks())) ||
        (uses_slot && (t.host_slot < 0 || t.host_slot >= host_->num_slots()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host transfer ", i, ": block ", t.block, " (pool of ", kv_->num_blocks(),
          ") or host slot ", t.host_slot, " (segment of ", host_->num_slots(),
          ") out of range"));
    }
    if (t.kind == HostTransfer::Kind::kSpill &&
        t.tokens.size() != static_cast<size_t>(block_size)) {
      return absl::InvalidArgumentError(absl::StrCat("host transfer ", i, ": a spill of ",
                                                     t.tokens.size(), " tokens, blocks hold ",
                                                     block_size));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuModelRunner::RunTransfers(absl::Span<const HostTransfer> transfers) {
  std::vector<std::pair<uint64_t, uint64_t>> failed;
  absl::Status first_failure;
  for (const HostTransfer& t : transfers) {
    switch (t.kind) {
      case HostTransfer::Kind::kStore:
        kv_->CopyBlockOut(t.block, host_->slot(t.host_slot) + host_offset_);
        break;
      case HostTransfer::Kind::kLoad:
        kv_->CopyBlockIn(t.block, host_->slot(t.host_slot) + host_offset_);
        break;
      case HostTransfer::Kind::kSpill:
        // Without a disk tier a spill is dropped: the index finds no file, a miss.
        if (disk_ != nullptr) {
          disk_->Spill(t.hash_hi, t.hash_lo, t.tokens, host_->slot(t.host_slot) + host_offset_);
        }
        break;
      case HostTransfer::Kind::kLoadDisk: {
        // One block at a time through one buffer: a long prompt loaded from disk needs no
        // more memory than a block.
        disk_staging_.resize(static_cast<size_t>(kv_->bytes_per_block()));
        absl::Status s =
            disk_ == nullptr
                ? absl::FailedPreconditionError("this worker has no disk tier (--kv_disk_dir)")
                : disk_->Load(t.hash_hi, t.hash_lo, disk_staging_.data());
        if (!s.ok()) {
          // Missing (another replica sharing the directory removed it), damaged or
          // unreadable: the block holds zeros and the step runs on, so every rank stays in
          // step with the others' collectives; the step is refused at its end.
          std::fill(disk_staging_.begin(), disk_staging_.end(), 0);
          failed.emplace_back(t.hash_hi, t.hash_lo);
          if (first_failure.ok()) first_failure = s;
        }
        kv_->CopyBlockIn(t.block, disk_staging_.data());
        break;
      }
    }
  }
  if (failed.empty()) return absl::OkStatus();
  return WithKvDiskBlocks(
      absl::DataLossError(absl::StrCat(failed.size(), " KV block(s) on disk could not be "
                                       "loaded (", first_failure.message(), ")")),
      failed);
}

}  // namespace folio::worker

// The worker's KV offload tiers (issue #50): the host segment and the disk store it opens
// at KV allocation and gives the runner, and the disk store's metrics. Split from
// service.cc by concern.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "services/worker/service.h"

namespace folio::worker {

absl::Status WorkerService::AttachOffloadTiers(int64_t bytes_per_block, int32_t block_size) {
  if (options_.kv_host_bytes <= 0) return absl::OkStatus();
  // A slot holds the runner's whole block: the model's KV, and a draft model's after it.
  const int64_t slot_bytes = runner_->host_bytes_per_block();
  // The segment outlives this process: a worker that restarts finds its blocks again.
  if (host_ == nullptr || host_->bytes_per_block() != slot_bytes) {
    host_.reset();
    const ModelConfig& c = weights_->config;
    std::string fingerprint = absl::StrCat(
        "model=", options_.model_identity, ";name=", c.name, ";arch=", c.architecture,
        ";file_bytes=", weights_->file_bytes(), ";layers=", c.num_layers,
        ";kv_heads=", c.num_kv_heads, ";head_dim=", c.head_dim,
        ";kv_dtype=", kernels::KvDTypeName(options_.kv_dtype), ";block_size=", block_size,
        ";tp=", options_.tp_rank, "/", options_.tp_size);
    if (options_.draft_weights != nullptr) {
      absl::StrAppend(&fingerprint, ";draft=", DraftModelIdentity(*options_.draft_weights));
    }
    std::string name = options_.kv_host_name;
    if (name.empty()) {
      const int port = listen_port_.load();
      if (port <= 0) {
        return absl::UnavailableError(
            "the worker is still starting (its host KV segment is named after the port it "
            "listens on); try again");
      }
      name = absl::StrCat("folio-kv-", port, "-rank", options_.tp_rank);
    }
    absl::StatusOr<std::unique_ptr<HostKvSegment>> host = HostKvSegment::Open(
        name, options_.kv_host_bytes, slot_bytes, fingerprint);
    if (!host.ok()) {
      metrics_.host_bytes.Set(0);
      absl::MutexLock lock(&info_mu_);
      host_blocks_ = 0;
      host_segment_id_.clear();
      return host.status();
    }
    host_ = *std::move(host);
  }
  if (absl::Status s = runner_->SetHostSegment(host_.get()); !s.ok()) return s;
  metrics_.host_bytes.Set(static_cast<double>(host_->size_bytes()));
  return AttachDiskStore(bytes_per_block, block_size);
}

absl::Status WorkerService::AttachDiskStore(int64_t bytes_per_block, int32_t block_size) {
  if (options_.kv_disk_dir.empty() || options_.kv_disk_bytes <= 0) return absl::OkStatus();
  if (disk_ == nullptr || disk_->bytes_per_block() != bytes_per_block ||
      disk_->options().block_size != block_size) {
    disk_.reset();
    const ModelConfig& c = weights_->config;
    // What makes one rank's block of this model interchangeable with another process's:
    // the model's content (not its path), the KV layout and the rank.
    KvDiskStoreOptions o;
    o.root = options_.kv_disk_dir;
    o.budget_bytes = options_.kv_disk_bytes;
    o.identity = absl::StrCat(
        "content=", options_.model_content_identity, ";arch=", c.architecture,
        ";layers=", c.num_layers, ";kv_heads=", c.num_kv_heads, ";head_dim=", c.head_dim,
        ";kv_dtype=", kernels::KvDTypeName(options_.kv_dtype), ";block_size=", block_size,
        ";tp=", options_.tp_size);
    o.rank = options_.tp_rank;
    o.num_ranks = options_.tp_size;
    o.block_size = block_size;
    o.bytes_per_block = bytes_per_block;
    absl::StatusOr<std::unique_ptr<KvDiskStore>> disk = KvDiskStore::Open(std::move(o));
    if (!disk.ok()) {
      metrics_.disk_blocks.Set(0);
      return disk.status();
    }
    disk_ = *std::move(disk);
    reported_disk_ = KvDiskStoreStats{};
  }
  if (absl::Status s = runner_->SetDiskStore(disk_.get()); !s.ok()) return s;
  metrics_.disk_blocks.Set(disk_->num_blocks());
  return absl::OkStatus();
}

void WorkerService::ReportDisk() {
  const KvDiskStoreStats& now = disk_->stats();
  KvDiskStoreStats& was = reported_disk_;
  auto add = [](Counter& c, int64_t now, int64_t* was) {
    if (now > *was) c.Increment(static_cast<double>(now - *was));
    *was = now;
  };
  add(metrics_.disk_files.WithLabels({"spill"}), now.num_spills, &was.num_spills);
  add(metrics_.disk_files.WithLabels({"load"}), now.num_loads, &was.num_loads);
  add(metrics_.disk_files.WithLabels({"spill_failed"}), now.num_spill_failures,
      &was.num_spill_failures);
  add(metrics_.disk_files.WithLabels({"spill_skipped"}), now.num_spills_skipped,
      &was.num_spills_skipped);
  add(metrics_.disk_files.WithLabels({"load_failed"}), now.num_load_failures,
      &was.num_load_failures);
  add(metrics_.disk_bytes.WithLabels({"written"}), now.bytes_written, &was.bytes_written);
  add(metrics_.disk_bytes.WithLabels({"read"}), now.bytes_read, &was.bytes_read);
  if (now.load_seconds > was.load_seconds) {
    metrics_.disk_load_seconds.Increment(now.load_seconds - was.load_seconds);
    was.load_seconds = now.load_seconds;
  }
}

}  // namespace folio::worker

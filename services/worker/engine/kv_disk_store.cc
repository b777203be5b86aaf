#include "services/worker/engine/kv_disk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kv_block_file.h"
#include "glog/logging.h"

namespace folio::worker {
namespace {

constexpr int64_t kDigestSpan = int64_t{1} << 20;

std::string ErrnoText(int err) { return std::strerror(err); }

// "<size>:<checksum of the first MiB>:<checksum of the last MiB>:<checksum of samples>"
// of one file: the samples are kSamples spans of 4 KiB spread evenly between the two, so a
// file that differs anywhere in a whole tensor (a fine-tune, a merged adapter) differs here.
constexpr int kSamples = 4096;
constexpr int64_t kSampleSpan = 4096;

absl::StatusOr<std::string> FileDigest(const std::string& path, int64_t size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", ErrnoText(errno)));
  std::vector<uint8_t> buf;
  auto read_at = [&](int64_t offset, int64_t n) -> absl::Status {
    buf.resize(static_cast<size_t>(std::max<int64_t>(std::min(n, size - offset), 0)));
    size_t done = 0;
    while (done < buf.size()) {
      const ssize_t got = pread(fd, buf.data() + done, buf.size() - done,
                                static_cast<off_t>(offset + static_cast<int64_t>(done)));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return absl::DataLossError(absl::StrCat(path, ": short read"));
      done += static_cast<size_t>(got);
    }
    return absl::OkStatus();
  };
  uint64_t head = 0, tail = 0, samples = 0;
  absl::Status s = read_at(0, kDigestSpan);
  if (s.ok()) head = KvChecksum(buf);
  const int64_t tail_at = std::max<int64_t>(0, size - kDigestSpan);
  if (s.ok()) s = read_at(tail_at, kDigestSpan);
  if (s.ok()) tail = KvChecksum(buf);
  const int64_t middle = tail_at - kDigestSpan;  // bytes between the head and the tail
  if (s.ok() && middle > 0) {
    // Each span's checksum, then one over them all (no 16 MiB buffer).
    std::vector<uint64_t> sums;
    sums.reserve(kSamples);
    for (int k = 0; k < kSamples && s.ok(); ++k) {
      s = read_at(kDigestSpan + middle * k / kSamples, kSampleSpan);
      sums.push_back(KvChecksum(buf));
    }
    samples = KvChecksum(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(sums.data()),
                                             sums.size() * sizeof(uint64_t)));
  }
  close(fd);
  if (!s.ok()) return s;
  return absl::StrFormat("%d:%016x:%016x:%016x", size, head, tail, samples);
}

}  // namespace

absl::StatusOr<std::string> ModelContentIdentity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", ErrnoText(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return FileDigest(path, st.st_size);
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat(path, ": ", ErrnoText(errno)));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& name : names) {
    const std::string file = absl::StrCat(path, "/", name);
    struct stat fst {};
    if (stat(file.c_str(), &fst) != 0 || !S_ISREG(fst.st_mode)) continue;
    absl::StatusOr<std::string> digest = FileDigest(file, fst.st_size);
    if (!digest.ok()) return digest.status();
    absl::StrAppend(&out, name, "=", *digest, ";");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<KvDiskStore>> KvDiskStore::Open(KvDiskStoreOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("--kv_disk_dir is empty");
  if (options.bytes_per_block <= 0 || options.block_size <= 0 || options.num_ranks <= 0 ||
      options.rank < 0 || options.rank >= options.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a KV disk store needs a block shape and a rank: block_size ", options.block_size,
        ", bytes_per_block ", options.bytes_per_block, ", rank ", options.rank, " of ",
        options.num_ranks));
  }
  const int64_t file_bytes = KvBlockFileBytes(options.block_size, options.bytes_per_block);
  const int64_t blocks = options.budget_bytes / file_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_disk_bytes=", options.budget_bytes, " holds no block (one is ", file_bytes,
        " bytes on disk)"));
  }
  const uint64_t ns = KvNamespaceHash(options.identity);
  std::string dir = KvNamespaceDir(options.root, ns);
  // Made with its parents, as `mkdir -p` would.
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) {
    return absl::FailedPreconditionError(
        absl::StrCat("--kv_disk_dir: cannot make ", dir, ": ", made.message()));
  }
  for (const std::string& path : {options.root, dir}) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--kv_disk_dir: ", path, " is not a directory"));
    }
  }
  const int32_t num_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX));
  LOG(INFO) << "KV disk tier: " << num_blocks << " blocks of " << file_bytes << " bytes in "
            << dir << " (rank " << options.rank << " of " << options.num_ranks << ")";
  return std::unique_ptr<KvDiskStore>(
      new KvDiskStore(std::move(options), std::move(dir), ns, num_blocks));
}

void KvDiskStore::Spill(uint64_t hash_hi, uint64_t hash_lo, absl::Span<const int32_t> tokens,
                        const uint8_t* payload) {
  if (stats_.writes_disabled) {
    ++stats_.num_spills_skipped;
    return;
  }
  const KvBlockFileKey key{.namespace_hash = namespace_hash_, .hash_hi = hash_hi,
                           .hash_lo = hash_lo, .rank = options_.rank,
                           .num_ranks = options_.num_ranks};
  absl::Status s = WriteKvBlockFile(
      dir_, key, tokens,
      absl::MakeConstSpan(payload, static_cast<size_t>(options_.bytes_per_block)));
  if (!s.ok()) {
    ++stats_.num_spill_failures;
    stats_.writes_disabled = true;
    LOG(ERROR) << "KV disk tier: a block could not be written, so this worker writes no "
                  "more blocks to "
               << dir_ << " (requests go on; blocks are recomputed): " << s;
    return;
  }
  ++stats_.num_spills;
  stats_.bytes_written += KvBlockFileBytes(options_.block_size, options_.bytes_per_block);
}

absl::Status KvDiskStore::Load(uint64_t hash_hi, uint64_t hash_lo, uint8_t* out) {
  const KvBlockFileKey key{.namespace_hash = namespace_hash_, .hash_hi = hash_hi,
                           .hash_lo = hash_lo, .rank = options_.rank,
                           .num_ranks = options_.num_ranks};
  const absl::Time start = absl::Now();
  absl::Status s = ReadKvBlockFile(
      dir_, key, options_.block_size,
      absl::MakeSpan(out, static_cast<size_t>(options_.bytes_per_block)));
  stats_.load_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  if (!s.ok()) {
    ++stats_.num_load_failures;
    if (absl::IsDataLoss(s)) {
      unlink(absl::StrCat(dir_, "/", KvBlockFileName(hash_hi, hash_lo, options_.rank)).c_str());
    }
    if (!logged_load_failure_) {
      logged_load_failure_ = true;
      LOG(WARNING) << "KV disk tier: a block file could not be loaded (the block is "
                      "recomputed; later failures are counted, not logged): "
                   << s;
    }
    return s;
  }
  ++stats_.num_loads;
  stats_.bytes_read += KvBlockFileBytes(options_.block_size, options_.bytes_per_block);
  return absl::OkStatus();
}

}  // namespace folio::worker

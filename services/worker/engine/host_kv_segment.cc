#include "services/worker/engine/host_kv_segment.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/incarnation.h"
#include "common/kv_block_file.h"
#include "glog/logging.h"

namespace folio::worker {
namespace {

constexpr char kMagic[8] = {'F', 'O', 'L', 'I', 'O', 'K', 'V', '2'};  // the header's layout

// The first bytes of the segment.
struct Header {
  char magic[8];
  int64_t bytes_per_block;
  int64_t num_slots;
  char id[64];
  uint64_t fingerprint_hash;
  char fingerprint[512];  // its first 511 characters, for people reading the segment
};
static_assert(sizeof(Header) <= HostKvSegment::kHeaderBytes);

absl::Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("host KV segment name must have 1 to 200 characters, got \"", name, "\""));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host KV segment name \"", name, "\" may hold only letters, digits, '-', '_', '.'"));
    }
  }
  if (name[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("host KV segment name \"", name, "\" may not start with '.'"));
  }
  return absl::OkStatus();
}

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

absl::Status HostKvSegment::Unlink(const std::string& name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (shm_unlink(("/" + name).c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("shm_unlink(", name, "): ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostKvSegment>> HostKvSegment::Open(
    const std::string& name, int64_t byte_budget, int64_t bytes_per_block,
    const std::string& fingerprint) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (bytes_per_block <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host KV segment: bytes_per_block must be positive, got ", bytes_per_block));
  }
  const int64_t num_slots = (byte_budget - kHeaderBytes) / bytes_per_block;
  if (num_slots <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_host_bytes ", byte_budget, " holds no KV block of ", bytes_per_block,
        " bytes (plus a ", kHeaderBytes, "-byte header)"));
  }
  if (num_slots > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_host_bytes ", byte_budget, " would hold ", num_slots,
        " blocks; at most 16777216 (use larger blocks)"));
  }
  const int64_t size = kHeaderBytes + num_slots * bytes_per_block;
  const std::string path = "/" + name;
  const int fd = shm_open(path.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm_open(", name, "): ", ErrnoText(errno)));
  }
  // One process per segment: a second one (two ranks given one --kv_host_name) would
  // remake it under the first one's mapping.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "host KV segment ", name, " is in use by another process (", ErrnoText(err),
        "); give each worker rank its own --kv_host_name"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("fstat(", name, "): ", ErrnoText(err)));
  }
  Header want{};
  std::memcpy(want.magic, kMagic, sizeof(kMagic));
  want.bytes_per_block = bytes_per_block;
  want.num_slots = num_slots;
  // The header keeps the fingerprint's hash (any length) beside a readable prefix of it.
  want.fingerprint_hash = KvChecksum(absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(fingerprint.data()), fingerprint.size()));
  std::strncpy(want.fingerprint, fingerprint.c_str(), sizeof(want.fingerprint) - 1);

  bool reused = false;
  if (st.st_size == size) {
    Header have{};
    if (pread(fd, &have, sizeof(have), 0) == static_cast<ssize_t>(sizeof(have)) &&
        std::memcmp(have.magic, want.magic, sizeof(kMagic)) == 0 &&
        have.bytes_per_block == want.bytes_per_block && have.num_slots == want.num_slots &&
        have.fingerprint_hash == want.fingerprint_hash &&
        std::memcmp(have.fingerprint, want.fingerprint, sizeof(want.fingerprint)) == 0 &&
        have.id[0] != '\0') {
      std::memcpy(want.id, have.id, sizeof(want.id));
      want.id[sizeof(want.id) - 1] = '\0';
      reused = true;
    }
  }
  if (!reused) {
    // Another geometry, model or a first start: made anew, so nothing it held is served.
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, size) != 0) {
      const int err = errno;
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("host KV segment ", name, ": cannot size it to ", size, " bytes: ",
                       ErrnoText(err)));
    }
    // Reserve the memory now: a tmpfs that runs out later would kill the worker with
    // SIGBUS in the middle of a step.
    if (const int err = posix_fallocate(fd, 0, size); err != 0) {
      close(fd);
      shm_unlink(path.c_str());
      return absl::ResourceExhaustedError(absl::StrCat(
          "host KV segment ", name, ": cannot reserve ", size, " bytes in /dev/shm (",
          ErrnoText(err), "); give /dev/shm more room or lower --kv_host_bytes"));
    }
    const std::string id = NewIncarnationId();
    std::strncpy(want.id, id.c_str(), sizeof(want.id) - 1);
    if (pwrite(fd, &want, sizeof(want), 0) != static_cast<ssize_t>(sizeof(want))) {
      const int err = errno;
      close(fd);
      return absl::InternalError(
          absl::StrCat("host KV segment ", name, ": header write: ", ErrnoText(err)));
    }
  }
  void* base = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap of host KV segment ", name, " (", size, " bytes): ", ErrnoText(err)));
  }
  LOG(INFO) << "host KV segment " << name << ": " << num_slots << " blocks of "
            << bytes_per_block << " bytes (" << size << " bytes), id " << want.id
            << (reused ? ", found as an earlier worker left it" : ", new");
  return absl::WrapUnique(new HostKvSegment(name, want.id, fd, static_cast<uint8_t*>(base), size,
                                            bytes_per_block, static_cast<int32_t>(num_slots),
                                            reused));
}

HostKvSegment::~HostKvSegment() {
  munmap(base_, static_cast<size_t>(size_));
  close(fd_);  // and with it the lock
}

}  // namespace folio::worker

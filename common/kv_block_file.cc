#include "common/kv_block_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace folio {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t FnvExtend(uint64_t h, absl::Span<const uint8_t> bytes) {
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  for (; i < bytes.size(); ++i) h = (h ^ bytes[i]) * kFnvPrime;
  return h;
}

std::string ErrnoText(int err) { return std::strerror(err); }

std::string PathOf(absl::string_view dir, const KvBlockFileKey& key) {
  return absl::StrCat(dir, "/", KvBlockFileName(key.hash_hi, key.hash_lo, key.rank));
}

uint64_t HeaderChecksum(const KvBlockFileHeader& h, absl::Span<const int32_t> tokens) {
  KvBlockFileHeader copy = h;
  copy.header_checksum = 0;
  uint64_t sum = FnvExtend(kFnvOffset, absl::MakeConstSpan(
                                           reinterpret_cast<const uint8_t*>(&copy), sizeof(copy)));
  return FnvExtend(sum, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(tokens.data()),
                                            tokens.size() * sizeof(int32_t)));
}

// Reads exactly `n` bytes at `offset`; DataLoss at a short file or a read error.
absl::Status ReadAt(int fd, void* out, size_t n, off_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat("KV block file ", path, ": ", ErrnoText(errno)));
    }
    if (got == 0) return absl::DataLossError(absl::StrCat("KV block file ", path, " is cut short"));
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return absl::Status(err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                         : absl::StatusCode::kInternal,
                          absl::StrCat("writing ", path, ": ", ErrnoText(err)));
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return absl::OkStatus();
}

struct OpenedFile {
  int fd = -1;
  std::string path;
  ~OpenedFile() {
    if (fd >= 0) close(fd);
  }
};

// Opens the file and checks its header and tokens against `key`.
absl::Status OpenAndCheckHeader(absl::string_view dir, const KvBlockFileKey& key,
                                int32_t block_size, OpenedFile* file, KvBlockFileHeader* header,
                                std::vector<int32_t>* tokens) {
  file->path = PathOf(dir, key);
  file->fd = open(file->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("no KV block file ", file->path));
    }
    return absl::UnavailableError(absl::StrCat("KV block file ", file->path, ": ", ErrnoText(err)));
  }
  if (absl::Status s = ReadAt(file->fd, header, sizeof(*header), 0, file->path); !s.ok()) return s;
  if (std::memcmp(header->magic, kKvBlockFileMagic, sizeof(kKvBlockFileMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(file->path, " is not a Folio KV block file"));
  }
  if (header->reserved != 0) {  // the writer writes 0: anything else is not its file
    return absl::DataLossError(absl::StrCat(file->path, ": its header's reserved word is set"));
  }
  if (header->block_size != static_cast<uint32_t>(block_size) || block_size <= 0) {
    return absl::DataLossError(absl::StrCat(file->path, " holds blocks of ", header->block_size,
                                            " tokens, not ", block_size));
  }
  tokens->resize(static_cast<size_t>(block_size));
  if (absl::Status s = ReadAt(file->fd, tokens->data(), tokens->size() * sizeof(int32_t),
                              sizeof(*header), file->path);
      !s.ok()) {
    return s;
  }
  if (HeaderChecksum(*header, *tokens) != header->header_checksum) {
    return absl::DataLossError(absl::StrCat(file->path, ": its header fails its checksum"));
  }
  if (header->namespace_hash != key.namespace_hash || header->hash_hi != key.hash_hi ||
      header->hash_lo != key.hash_lo || header->rank != static_cast<uint32_t>(key.rank) ||
      header->num_ranks != static_cast<uint32_t>(key.num_ranks)) {
    return absl::DataLossError(absl::StrFormat(
        "%s was written for another block or model (namespace %016x, rank %d of %d)", file->path,
        header->namespace_hash, header->rank, header->num_ranks));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t KvChecksum(absl::Span<const uint8_t> bytes) { return FnvExtend(kFnvOffset, bytes); }

uint64_t KvNamespaceHash(absl::string_view identity) {
  return FnvExtend(kFnvOffset, absl::MakeConstSpan(
                                   reinterpret_cast<const uint8_t*>(identity.data()),
                                   identity.size()));
}

std::string KvNamespaceDir(absl::string_view root, uint64_t namespace_hash) {
  while (absl::ConsumeSuffix(&root, "/")) {
  }
  return absl::StrFormat("%s/%016x", root, namespace_hash);
}

absl::StatusOr<uint64_t> ParseKvNamespaceDir(absl::string_view dir) {
  while (absl::ConsumeSuffix(&dir, "/")) {
  }
  const size_t slash = dir.rfind('/');
  const absl::string_view last = slash == absl::string_view::npos ? dir : dir.substr(slash + 1);
  uint64_t hash = 0;
  if (last.size() != 16 || !absl::SimpleHexAtoi(last, &hash)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV disk directory ", dir, " does not end in a namespace (16 hex digits)"));
  }
  return hash;
}

std::string KvBlockFileName(uint64_t hash_hi, uint64_t hash_lo, int32_t rank) {
  return absl::StrFormat("%016x%016x.r%d.kv", hash_hi, hash_lo, rank);
}

bool ParseKvBlockFileName(absl::string_view name, uint64_t* hash_hi, uint64_t* hash_lo) {
  if (name.size() != 32 + 6 || !absl::EndsWith(name, ".r0.kv")) return false;
  return absl::SimpleHexAtoi(name.substr(0, 16), hash_hi) &&
         absl::SimpleHexAtoi(name.substr(16, 16), hash_lo);
}

namespace {

void AppendLittleEndian(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t ReadLittleEndian(absl::string_view bytes) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  return v;
}

}  // namespace

absl::Status WithKvDiskBlocks(absl::Status status,
                              absl::Span<const std::pair<uint64_t, uint64_t>> blocks) {
  if (status.ok() || blocks.empty()) return status;
  std::vector<std::pair<uint64_t, uint64_t>> all = KvDiskBlocksOf(status);
  for (const auto& b : blocks) {
    if (std::find(all.begin(), all.end(), b) == all.end()) all.push_back(b);
  }
  std::string payload;
  payload.reserve(all.size() * 16);
  for (const auto& [hi, lo] : all) {
    AppendLittleEndian(hi, &payload);
    AppendLittleEndian(lo, &payload);
  }
  status.SetPayload(kKvDiskBlocksPayload, absl::Cord(payload));
  return status;
}

std::vector<std::pair<uint64_t, uint64_t>> KvDiskBlocksOf(const absl::Status& status) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const auto payload = status.GetPayload(kKvDiskBlocksPayload);  // absl::optional
  if (!payload.has_value() || payload->size() % 16 != 0) return out;
  const std::string bytes(*payload);
  for (size_t at = 0; at < bytes.size(); at += 16) {
    const absl::string_view block = absl::string_view(bytes).substr(at, 16);
    out.emplace_back(ReadLittleEndian(block.substr(0, 8)), ReadLittleEndian(block.substr(8)));
  }
  return out;
}

absl::Status WithKvDiskBlocksOf(absl::Status status, absl::Span<const absl::Status> refusals) {
  for (const absl::Status& refusal : refusals) {
    status = WithKvDiskBlocks(std::move(status), KvDiskBlocksOf(refusal));
  }
  return status;
}

int64_t KvBlockFileBytes(int32_t block_size, int64_t payload_bytes) {
  return static_cast<int64_t>(sizeof(KvBlockFileHeader)) +
         int64_t{block_size} * static_cast<int64_t>(sizeof(int32_t)) + payload_bytes;
}

absl::Status WriteKvBlockFile(absl::string_view dir, const KvBlockFileKey& key,
                              absl::Span<const int32_t> tokens,
                              absl::Span<const uint8_t> payload) {
  static std::atomic<uint64_t> counter{0};
  KvBlockFileHeader header{};
  std::memcpy(header.magic, kKvBlockFileMagic, sizeof(header.magic));
  header.namespace_hash = key.namespace_hash;
  header.hash_hi = key.hash_hi;
  header.hash_lo = key.hash_lo;
  header.rank = static_cast<uint32_t>(key.rank);
  header.num_ranks = static_cast<uint32_t>(key.num_ranks);
  header.block_size = static_cast<uint32_t>(tokens.size());
  header.payload_bytes = payload.size();
  header.payload_checksum = KvChecksum(payload);
  header.header_checksum = HeaderChecksum(header, tokens);

  const std::string path = PathOf(dir, key);
  const std::string tmp =
      absl::StrCat(dir, "/.", KvBlockFileName(key.hash_hi, key.hash_lo, key.rank), ".tmp.",
                   getpid(), ".", counter.fetch_add(1));
  const int fd = open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                       : absl::StatusCode::kPermissionDenied,
                        absl::StrCat("cannot create ", tmp, ": ", ErrnoText(err)));
  }
  absl::Status s = WriteAll(fd, &header, sizeof(header), tmp);
  if (s.ok()) s = WriteAll(fd, tokens.data(), tokens.size() * sizeof(int32_t), tmp);
  if (s.ok()) s = WriteAll(fd, payload.data(), payload.size(), tmp);
  if (close(fd) != 0 && s.ok()) {
    s = absl::InternalError(absl::StrCat("closing ", tmp, ": ", ErrnoText(errno)));
  }
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("renaming ", tmp, ": ", ErrnoText(errno)));
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

absl::StatusOr<std::vector<int32_t>> ReadKvBlockFileTokens(absl::string_view dir,
                                                           const KvBlockFileKey& key,
                                                           int32_t block_size) {
  OpenedFile file;
  KvBlockFileHeader header;
  std::vector<int32_t> tokens;
  if (absl::Status s = OpenAndCheckHeader(dir, key, block_size, &file, &header, &tokens);
      !s.ok()) {
    return s;
  }
  struct stat st;
  if (fstat(file.fd, &st) != 0 ||
      st.st_size != KvBlockFileBytes(block_size, static_cast<int64_t>(header.payload_bytes))) {
    return absl::DataLossError(absl::StrCat(file.path, " is not as long as its header says"));
  }
  return tokens;
}

absl::Status ReadKvBlockFile(absl::string_view dir, const KvBlockFileKey& key,
                             int32_t block_size, absl::Span<uint8_t> payload) {
  OpenedFile file;
  KvBlockFileHeader header;
  std::vector<int32_t> tokens;
  if (absl::Status s = OpenAndCheckHeader(dir, key, block_size, &file, &header, &tokens);
      !s.ok()) {
    return s;
  }
  if (header.payload_bytes != payload.size()) {
    return absl::DataLossError(absl::StrCat(file.path, " holds ", header.payload_bytes,
                                            " bytes of KV, not ", payload.size()));
  }
  const off_t offset =
      static_cast<off_t>(sizeof(header) + tokens.size() * sizeof(int32_t));
  if (absl::Status s = ReadAt(file.fd, payload.data(), payload.size(), offset, file.path);
      !s.ok()) {
    return s;
  }
  uint8_t extra;
  if (pread(file.fd, &extra, 1, offset + static_cast<off_t>(payload.size())) != 0) {
    return absl::DataLossError(absl::StrCat(file.path, " is longer than its header says"));
  }
  if (KvChecksum(payload) != header.payload_checksum) {
    return absl::DataLossError(absl::StrCat(file.path, ": its KV fails its checksum"));
  }
  return absl::OkStatus();
}

}  // namespace folio

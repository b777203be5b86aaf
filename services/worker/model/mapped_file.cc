#include "services/worker/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace folio::worker {
namespace {

absl::Status ErrnoStatus(int err, const std::string& path, const char* what) {
  const std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, path, "cannot open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, path, "cannot mmap");
    }
    data = static_cast<const uint8_t*>(p);
  }
  // The mapping keeps the file referenced; the descriptor stays for posix_fadvise.
  if (data == nullptr) {
    ::close(fd);
    return std::unique_ptr<MappedFile>(new MappedFile(path, -1, nullptr, 0));
  }
  return std::unique_ptr<MappedFile>(new MappedFile(path, fd, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::ReleasePages(std::vector<Range> ranges) const {
  if (data_ == nullptr) return;
  // Clamp to the mapping as [begin, end) offsets; drop what lies outside.
  std::vector<std::pair<size_t, size_t>> spans;
  spans.reserve(ranges.size());
  for (const Range& r : ranges) {
    const auto* begin = static_cast<const uint8_t*>(r.data);
    if (begin < data_ || begin >= data_ + size_ || r.size == 0) continue;
    const size_t offset = static_cast<size_t>(begin - data_);
    spans.emplace_back(offset, offset + std::min(r.size, size_ - offset));
  }
  std::sort(spans.begin(), spans.end());
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto release = [&](size_t begin, size_t end) {
    // Whole pages only: a neighbouring tensor not listed may share the first or last one
    // (the mapping starts on a page, so offsets and addresses round alike).
    const size_t first = (begin + page - 1) / page * page;
    const size_t last = end == size_ ? (end + page - 1) / page * page : end / page * page;
    if (last <= first) return;
    ::madvise(const_cast<uint8_t*>(data_) + first, last - first, MADV_DONTNEED);
    ::posix_fadvise(fd_, static_cast<off_t>(first), static_cast<off_t>(last - first),
                    POSIX_FADV_DONTNEED);
  };
  size_t i = 0;
  while (i < spans.size()) {
    size_t begin = spans[i].first;
    size_t end = spans[i].second;
    for (++i; i < spans.size() && spans[i].first <= end + kMergeGap; ++i) {
      end = std::max(end, spans[i].second);
    }
    release(begin, end);
  }
}

}  // namespace folio::worker

// MappedFile: a whole file mapped read-only into memory (RAII).
//
// The mapping lives as long as the object; spans and pointers taken from it must not
// outlive it. An empty file maps to an empty span (data() == nullptr). Immutable after
// Open(); safe to read from many threads (ReleasePages too: it changes residency only). Not copyable; movable only via unique_ptr.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_
#define FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace folio::worker {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist, PermissionDenied if it cannot
  // be read, FailedPrecondition if it is not a regular file, Internal for other
  // open/fstat/mmap failures; every message names the path and the errno text.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

  // A byte range inside (or outside) the mapping.
  struct Range {
    const void* data = nullptr;
    size_t size = 0;
  };

  // Drops the whole pages of the union of `ranges` (each clamped to the mapping; ranges
  // outside it are ignored) from this process's resident set (madvise MADV_DONTNEED),
  // then asks the kernel to drop them from the page cache too (posix_fadvise
  // POSIX_FADV_DONTNEED: only pages no other process maps go, dirty ones after
  // writeback). Reading them again faults them back in from the file, so the contents
  // never change and releasing is always safe; it only costs a re-read.
  // Ranges less than kMergeGap bytes apart (a GGUF's alignment padding between two
  // tensors) count as one, so a page two released tensors share is released as well; a
  // page shared with a range not listed is kept.
  void ReleasePages(std::vector<Range> ranges) const;
  void ReleasePages(const void* p, size_t n) const { ReleasePages({Range{p, n}}); }
  static constexpr size_t kMergeGap = 64;

 private:
  MappedFile(std::string path, int fd, const uint8_t* data, size_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}

  const std::string path_;
  const int fd_;               // kept open for posix_fadvise; -1 when size_ == 0
  const uint8_t* const data_;  // nullptr when size_ == 0
  const size_t size_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_

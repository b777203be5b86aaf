// MappedFile: a whole file mapped read-only into memory (RAII).
//
// The mapping lives as long as the object; spans and pointers taken from it must not
// outlive it. An empty file maps to an empty span (data() == nullptr). Immutable after
// Open(); safe to read from many threads. Not copyable; movable only via unique_ptr.
#ifndef FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_
#define FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

  // Drops the whole pages of [p, p + n) (clamped to the mapping) from this process's
  // resident set (madvise MADV_DONTNEED); reading them again faults them back in from
  // the file, so the contents never change. A no-op for ranges outside the mapping.
  void ReleasePages(const void* p, size_t n) const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  const std::string path_;
  const uint8_t* const data_;  // nullptr when size_ == 0
  const size_t size_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_MAPPED_FILE_H_

#include "services/worker/kernels/aligned_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace folio::worker::kernels {

void* AllocateHugePaged(size_t bytes, size_t alignment) {
  const size_t rounded = std::max<size_t>((bytes + alignment - 1) / alignment, 1) * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) return nullptr;
#ifdef MADV_HUGEPAGE
  // madvise takes whole 4 KiB pages.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + 4095) / 4096 * 4096;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + rounded) / 4096 * 4096;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, rounded);
  return p;
}

}  // namespace folio::worker::kernels

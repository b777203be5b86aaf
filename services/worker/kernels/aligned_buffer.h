// Zeroed, aligned heap buffers with transparent huge pages asked for: what the worker's big
// streamed arrays (the KV pool, weight copies in a kernel's layout) are allocated as.
//
// A walk over a large array on 4 KiB pages takes a TLB miss every few strided rows; with
// MADV_HUGEPAGE (a hint: the kernel backs 2 MiB stretches with huge pages where its
// transparent-huge-page mode allows) one TLB entry covers 2 MiB.
//
// Thread-safety: AllocateHugePaged is safe to call from any thread; a buffer is owned by
// its AlignedBuffer.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_ALIGNED_BUFFER_H_
#define FOLIO_SERVICES_WORKER_KERNELS_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace folio::worker::kernels {

struct FreeBuffer {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
using AlignedBuffer = std::unique_ptr<T[], FreeBuffer>;

// `bytes` (rounded up to a multiple of `alignment`, at least one) of zeroes aligned to
// `alignment` (a power of two, at least sizeof(void*)), MADV_HUGEPAGE asked for on every
// whole 4 KiB page inside them. nullptr when the allocation fails. Aligned to 2 MiB, the
// whole buffer can be huge pages; aligned less, the 2 MiB stretches inside it can.
void* AllocateHugePaged(size_t bytes, size_t alignment);

// AllocateHugePaged for `count` values of T, owned.
template <typename T>
AlignedBuffer<T> MakeHugePaged(size_t count, size_t alignment) {
  return AlignedBuffer<T>(static_cast<T*>(AllocateHugePaged(count * sizeof(T), alignment)));
}

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_ALIGNED_BUFFER_H_

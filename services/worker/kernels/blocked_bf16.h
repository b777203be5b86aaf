// BF16 weights in the blocked layout oneDNN's bf16 matmul reads natively, shared by
// oneDNN (batches: prefill chunks, batched decode) and Folio's own GEMV (a few token rows:
// single-stream decode), so a BF16 file's projections are one copy with both speeds.
//
// Why: oneDNN's brgemm matmul (avx512_core_bf16 and AMX) multiplies weights in the
// "BA16a64b2a" layout; given the file's plain rows it copies each weight block into that
// layout on every call. Pre-blocked, its batched matmuls ran 1.1-1.6x faster (M = 128 ..
// 8, docs/benchmarks.md); and Folio's in-place bf16 row kernel streamed one token row at
// 34-37 GB/s where the same bytes in panels read at 50-65. This layout is one stream a
// block of 64 outputs, the pairs vdpbf16ps takes:
//
//   W [out, in] as the [in, out] matrix of oneDNN, padded to in_padded (multiple of 32)
//   and out_padded (multiple of 64) with zeros; element W[n, k] at
//     (n / 64) * in_padded * 64 + (k / 2) * 128 + (n % 64) * 2 + k % 2
//   (oneDNN's K blocks of 32 are 16 of those pairs of rows: the offset is the same).
//
// The CPU runner takes it for a BF16 projection only where oneDNN runs and picks this
// layout for the matrix's shape (OnednnGemm::BlockedLayoutMatches); BlockedBf16Linear
// needs AVX-512 there (the portable path is the reference the tests hold it to).
//
// Immutable after construction. BlockedBf16Linear may run from several threads at once for
// disjoint outputs only with no pool or a pool each (ThreadPool::ParallelFor is not
// reentrant).
#ifndef FOLIO_SERVICES_WORKER_KERNELS_BLOCKED_BF16_H_
#define FOLIO_SERVICES_WORKER_KERNELS_BLOCKED_BF16_H_

#include <cstdint>
#include <functional>

#include "services/worker/kernels/aligned_buffer.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

class BlockedBf16Matrix {
 public:
  static constexpr int64_t kBlockOut = 64;  // outputs a block
  static constexpr int64_t kBlockIn = 32;   // in is padded to a multiple of this

  BlockedBf16Matrix() = default;
  // Blocks the matrix whose row o row(o, dst) writes as f32 into dst[0, in): each value
  // must be a bf16 (widened from a BF16 file: CHECKed), one row at a time.
  BlockedBf16Matrix(int64_t out, int64_t in,
                    const std::function<void(int64_t row, float* dst)>& row);

  // Element W[n, k]'s offset in data().
  int64_t Offset(int64_t n, int64_t k) const {
    return (n / kBlockOut) * in_padded_ * kBlockOut + (k / 2) * (2 * kBlockOut) +
           (n % kBlockOut) * 2 + k % 2;
  }
  // Writes row o (in values) as f32 into dst: an embedding lookup on a tied matrix.
  void RowToF32(int64_t o, float* dst) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t out_padded() const { return num_blocks() * kBlockOut; }
  int64_t in_padded() const { return in_padded_; }
  int64_t num_blocks() const { return (out_ + kBlockOut - 1) / kBlockOut; }
  bool empty() const { return data_ == nullptr; }
  // bf16 bit patterns, out_padded() x in_padded() of them.
  const uint16_t* data() const { return data_.get(); }
  int64_t size_bytes() const { return size_ * static_cast<int64_t>(sizeof(uint16_t)); }
  // size_bytes() of an [out, in] matrix.
  static int64_t SizeBytes(int64_t out, int64_t in) {
    return (out + kBlockOut - 1) / kBlockOut * kBlockOut * ((in + kBlockIn - 1) / kBlockIn) *
           kBlockIn * 2;
  }

 private:
  int64_t out_ = 0;
  int64_t in_ = 0;
  int64_t in_padded_ = 0;
  int64_t size_ = 0;  // values
  // 64-byte aligned (whole cache lines for every 64-byte load, the GEMV's and oneDNN's),
  // transparent huge pages asked for where the kernel allows them (a TLB entry per 2 MiB of
  // a stream read once a token).
  AlignedBuffer<uint16_t> data_;
};

// The vector paths of BlockedBf16Linear. kPortable: f32 products in pair order (the
// reference). kAvx512: AVX-512 F/BW/VL, bf16 widened by a shift or a mask, f32 x.
// kAvx512Bf16: vdpbf16ps against x rounded to bf16 (nearest even), as oneDNN's matmul and
// Folio's other bf16 kernels take it.
enum class BlockedBf16Path { kPortable, kAvx512, kAvx512Bf16 };
const char* BlockedBf16PathName(BlockedBf16Path path);
// The best path `features` allow.
BlockedBf16Path BestBlockedBf16Path(const CpuFeatures& features);
// Whether this CPU (DetectedCpuFeatures) can run `path`.
bool BlockedBf16PathRuns(BlockedBf16Path path);

// y = x . W^T + beta * y for x [rows, w.in()] (row stride ldx), y [rows, w.out()] (row
// stride ldy); beta = 0 never reads y. Blocks of 64 outputs are split over `pool`'s
// threads (null: the caller alone); rows go four at a time, each group reading the
// weights once: meant for a few rows (batches take oneDNN). Each output's sum runs in the
// same order whatever `rows` is.
void BlockedBf16Linear(const float* x, int64_t ldx, int64_t rows, const BlockedBf16Matrix& w,
                       float beta, float* y, int64_t ldy, BlockedBf16Path path,
                       ThreadPool* pool);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_BLOCKED_BF16_H_

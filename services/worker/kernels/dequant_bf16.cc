// RowsToBf16's dispatch and generic path (dequant_bf16.h).
#include "services/worker/kernels/dequant_bf16.h"

#include <algorithm>

#include "glog/logging.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels {

using dequant_internal::RowToBf16Fn;

namespace {

RowToBf16Fn KernelFor(StoredKind kind, const CpuFeatures& features) {
  return features.avx512_bf16 ? dequant_internal::Avx512Bf16RowKernel(kind) : nullptr;
}

}  // namespace

bool HasBf16RowKernel(StoredKind kind, const CpuFeatures& features) {
  return KernelFor(kind, features) != nullptr;
}

void RowsToBf16(const TypedMatrix& w, int64_t row, int64_t n, uint16_t* out,
                const CpuFeatures& features, std::vector<float>& scratch) {
  CHECK_GE(row, 0);
  CHECK_LE(row + n, w.out());
  const int64_t in = w.in();
  int64_t first = 0;  // output feature of segment s's row 0
  for (const TypedRows& s : w.segments()) {
    const int64_t begin = std::max(row, first), end = std::min(row + n, first + s.rows);
    if (begin < end) {
      const RowToBf16Fn kernel = KernelFor(s.kind, features);
      const int64_t blocks = in / s.block_values;
      if (kernel == nullptr && static_cast<int64_t>(scratch.size()) < in) scratch.resize(in);
      for (int64_t r = begin; r < end; ++r) {
        const uint8_t* src = s.data + (r - first) * s.row_stride_bytes;
        uint16_t* dst = out + (r - row) * in;
        if (kernel != nullptr) {
          // The row 4 ahead into cache: the kernels outrun the hardware's prefetch
          // (typed_matmul_bench BM_DequantBf16: 2, 4 and 8 rows tried, 4 best).
          const uint8_t* next = src + 4 * s.row_stride_bytes;
          for (int64_t b = 0; b < s.row_stride_bytes; b += 64) __builtin_prefetch(next + b);
          kernel(src, blocks, dst);
        } else {
          s.dequantize(src, blocks, scratch.data());
          typed::RoundToBf16(scratch.data(), in, dst);
        }
      }
    }
    first += s.rows;
    if (first >= row + n) break;
  }
}

}  // namespace folio::worker::kernels

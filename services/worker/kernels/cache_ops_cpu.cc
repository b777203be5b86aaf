#include <cstring>

#include "glog/logging.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/half.h"

namespace folio::worker::kernels {

const char* KvDTypeName(KvDType dtype) { return dtype == KvDType::kF32 ? "f32" : "f16"; }

void WriteKv(const float* k, const float* v, int64_t row_stride,
             absl::Span<const int64_t> slots, const KvCacheView& kv) {
  const int64_t n = kv.slot_stride();
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t slot = slots[i];
    DCHECK_GE(slot, 0);
    DCHECK_LT(slot, kv.num_slots());
    const float* ksrc = k + static_cast<int64_t>(i) * row_stride;
    const float* vsrc = v + static_cast<int64_t>(i) * row_stride;
    if (kv.dtype == KvDType::kF32) {
      std::memcpy(static_cast<float*>(kv.k) + slot * n, ksrc, n * sizeof(float));
      std::memcpy(static_cast<float*>(kv.v) + slot * n, vsrc, n * sizeof(float));
    } else {
      uint16_t* kdst = static_cast<uint16_t*>(kv.k) + slot * n;
      uint16_t* vdst = static_cast<uint16_t*>(kv.v) + slot * n;
      for (int64_t j = 0; j < n; ++j) {
        kdst[j] = FloatToHalf(ksrc[j]);
        vdst[j] = FloatToHalf(vsrc[j]);
      }
    }
  }
}

void CopyBlocks(absl::Span<const BlockCopy> copies, const KvCacheView& kv) {
  const int64_t bytes = kv.block_stride() * KvDTypeBytes(kv.dtype);
  for (const BlockCopy& c : copies) {
    DCHECK(c.src >= 0 && c.src < kv.num_blocks && c.dst >= 0 && c.dst < kv.num_blocks);
    if (c.src == c.dst) continue;
    for (void* base : {kv.k, kv.v}) {
      char* p = static_cast<char*>(base);
      std::memcpy(p + c.dst * bytes, p + c.src * bytes, bytes);
    }
  }
}

}  // namespace folio::worker::kernels

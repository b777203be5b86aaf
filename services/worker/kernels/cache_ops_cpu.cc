#include <cstring>

#include "glog/logging.h"
#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kv_q8.h"

namespace folio::worker::kernels {

namespace {

void ToHalfPortable(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t j = 0; j < n; ++j) dst[j] = FloatToHalf(src[j]);
}

#if FOLIO_HAVE_AVX2_PATH
// vcvtps2ph rounds to nearest-even exactly as FloatToHalf does: the same bits.
FOLIO_T_AVX2 void ToHalfF16c(const float* src, int64_t n, uint16_t* dst) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT));
  }
  ToHalfPortable(src + j, n - j, dst + j);
}
#endif

}  // namespace

const char* KvDTypeName(KvDType dtype) {
  switch (dtype) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kQ8:
      return "q8_0";
  }
  return "?";
}

bool ParseKvDType(const char* name, KvDType* dtype) {
  for (KvDType d : {KvDType::kF16, KvDType::kF32, KvDType::kQ8}) {
    if (std::strcmp(name, KvDTypeName(d)) == 0) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

void WriteKv(const float* k, const float* v, int64_t row_stride,
             absl::Span<const int64_t> slots, const KvCacheView& kv) {
  const int64_t n = kv.slot_stride();
  // Chosen once: HasF16c() runs CPUID, which traps to the hypervisor in a VM (it showed
  // as 0.3% of a serving worker's profile when asked on every call).
  static void (*const to_half)(const float*, int64_t, uint16_t*) = [] {
#if FOLIO_HAVE_AVX2_PATH
    if (HasF16c() && BestCpuIsa() == CpuIsa::kAvx2) return &ToHalfF16c;
#endif
    return &ToHalfPortable;
  }();
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t slot = slots[i];
    DCHECK_GE(slot, 0);
    DCHECK_LT(slot, kv.num_slots());
    const float* ksrc = k + static_cast<int64_t>(i) * row_stride;
    const float* vsrc = v + static_cast<int64_t>(i) * row_stride;
    if (kv.dtype == KvDType::kQ8) {
      const int hd = kv.head_dim;
      const int64_t rs = kv.row_stride();
      int8_t* kdst = static_cast<int8_t*>(kv.k) + slot * n;
      int8_t* vdst = static_cast<int8_t*>(kv.v) + slot * n;
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        QuantizeQ8Row(ksrc + static_cast<int64_t>(h) * hd, hd, kdst + h * rs);
        QuantizeQ8Row(vsrc + static_cast<int64_t>(h) * hd, hd, vdst + h * rs);
      }
    } else if (kv.dtype == KvDType::kF32) {
      std::memcpy(static_cast<float*>(kv.k) + slot * n, ksrc, n * sizeof(float));
      std::memcpy(static_cast<float*>(kv.v) + slot * n, vsrc, n * sizeof(float));
    } else {
      uint16_t* kdst = static_cast<uint16_t*>(kv.k) + slot * n;
      uint16_t* vdst = static_cast<uint16_t*>(kv.v) + slot * n;
      to_half(ksrc, n, kdst);
      to_half(vsrc, n, vdst);
    }
  }
}

void CopyBlocks(absl::Span<const BlockCopy> copies, const KvCacheView& kv) {
  const int64_t bytes = kv.block_size * kv.num_kv_heads * KvRowBytes(kv.dtype, kv.head_dim);
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

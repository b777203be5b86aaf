// The 8-bit KV cache row format (KvDType::kQ8): quantizing one row (one token, one kv
// head: head_dim values) into head_dim int8 values and an f32 scale stored right after
// them, and reading it back. Shared by WriteKv (cache_ops_cpu.cc) and the attention
// kernels' portable paths; the vector paths load the same bytes with intrinsics.
//
// Format: q[i] = round-to-nearest-even(x[i] / scale), scale = max|x| / 127 (0 for an
// all-zero row, whose q are then 0), so |q| <= 127 and every value is within scale / 2
// of x: the error of a row is at most max|x| / 254. Stateless, thread-safe functions.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_KV_Q8_H_
#define FOLIO_SERVICES_WORKER_KERNELS_KV_Q8_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace folio::worker::kernels {

// The scale of a kQ8 row of n values at `row` (stored at row + n, maybe unaligned).
inline float Q8RowScale(const int8_t* row, int n) {
  float s;
  std::memcpy(&s, row + n, sizeof(s));
  return s;
}

// Quantizes x[0 .. n) into dst[0 .. n) and its scale into dst[n .. n + 4).
inline void QuantizeQ8Row(const float* x, int n, int8_t* dst) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float q = std::nearbyint(x[i] * inv);  // the default mode: to nearest, ties even
    dst[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
  std::memcpy(dst + n, &scale, sizeof(scale));
}

// out[i] = scale * q[i] for a kQ8 row of n values.
inline void DequantizeQ8Row(const int8_t* row, int n, float* out) {
  const float s = Q8RowScale(row, n);
  for (int i = 0; i < n; ++i) out[i] = s * static_cast<float>(row[i]);
}

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KV_Q8_H_

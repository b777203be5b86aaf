#include <cmath>

#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/avx512_math.h"
#include "services/worker/kernels/swiglu.h"

namespace folio::worker::kernels {
namespace {

void SwiGluPortable(const float* gate, const float* up, int64_t n, float* o) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    o[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

#if FOLIO_HAVE_AVX2_PATH
FOLIO_T_AVX2 void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* o) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  SwiGluPortable(gate + i, up + i, n - i, o + i);
}

FOLIO_T_AVX512 void SwiGluAvx512(const float* gate, const float* up, int64_t n, float* o) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = avx512::Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(o + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  SwiGluAvx2(gate + i, up + i, n - i, o + i);
}
#endif

}  // namespace

void SwiGlu(const float* gate_up, int64_t rows, int64_t hidden, float* out, CpuIsa isa,
            bool avx512) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * hidden;
    const float* up = gate + hidden;
    float* o = out + r * hidden;
#if FOLIO_HAVE_AVX2_PATH
    if (isa == CpuIsa::kAvx2 && avx512) {
      SwiGluAvx512(gate, up, hidden, o);
      continue;
    }
    if (isa == CpuIsa::kAvx2) {
      SwiGluAvx2(gate, up, hidden, o);
      continue;
    }
#endif
    SwiGluPortable(gate, up, hidden, o);
  }
}

void GeGlu(const float* gate_up, int64_t rows, int64_t hidden, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * hidden;
    const float* up = gate + hidden;
    float* o = out + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) {
      const float x = gate[i];
      const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
      o[i] = g * up[i];
    }
  }
}

}  // namespace folio::worker::kernels

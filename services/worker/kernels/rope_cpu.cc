#include <cmath>
#include <vector>

#include "services/worker/kernels/rope.h"

namespace folio::worker::kernels {

void ApplyRope(float* x, int64_t row_stride, int64_t rows, const int32_t* positions,
               int32_t num_heads, int32_t head_dim, const RopeParams& params) {
  const int32_t pairs = head_dim / 2;
  std::vector<float> cos_sin(2 * pairs);
  const bool plain = params.freq_scale == 1.0f && params.freq_factors == nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t p = 0; p < pairs; ++p) {
      // Plain frequencies use llama2.c's run.c float arithmetic, so its golden output
      // reproduces; scaled ones follow llama.cpp (position / factor, then the scale).
      const float freq = 1.0f / std::pow(params.theta, static_cast<float>(2 * p) / head_dim);
      float angle;
      if (plain) {
        angle = static_cast<float>(positions[r]) * freq;
      } else {
        float base = static_cast<float>(positions[r]) * freq;
        if (params.freq_factors != nullptr) base /= params.freq_factors[p];
        angle = params.freq_scale * base;
      }
      cos_sin[2 * p] = std::cos(angle);
      cos_sin[2 * p + 1] = std::sin(angle);
    }
    float* row = x + r * row_stride;
    // Pair p is (v[i0], v[i1]): adjacent, or half a head apart.
    const bool neox = params.layout == RopeLayout::kNeox;
    for (int32_t h = 0; h < num_heads; ++h) {
      float* v = row + static_cast<int64_t>(h) * head_dim;
      for (int32_t p = 0; p < pairs; ++p) {
        const int32_t i0 = neox ? p : 2 * p;
        const int32_t i1 = neox ? p + pairs : 2 * p + 1;
        const float c = cos_sin[2 * p];
        const float s = cos_sin[2 * p + 1];
        const float v0 = v[i0];
        const float v1 = v[i1];
        v[i0] = v0 * c - v1 * s;
        v[i1] = v0 * s + v1 * c;
      }
    }
  }
}

}  // namespace folio::worker::kernels

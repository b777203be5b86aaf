#include <cmath>
#include <vector>

#include "services/worker/kernels/rope.h"

namespace folio::worker::kernels {

void ApplyRope(float* x, int64_t row_stride, int64_t rows, const int32_t* positions,
               int32_t num_heads, int32_t head_dim, float theta) {
  const int32_t pairs = head_dim / 2;
  std::vector<float> cos_sin(2 * pairs);
  for (int64_t r = 0; r < rows; ++r) {
    // Same float arithmetic as llama2.c's run.c, so rounding matches the reference.
    for (int32_t p = 0; p < pairs; ++p) {
      const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * p) / head_dim);
      const float angle = static_cast<float>(positions[r]) * freq;
      cos_sin[2 * p] = std::cos(angle);
      cos_sin[2 * p + 1] = std::sin(angle);
    }
    float* row = x + r * row_stride;
    for (int32_t h = 0; h < num_heads; ++h) {
      float* v = row + static_cast<int64_t>(h) * head_dim;
      for (int32_t p = 0; p < pairs; ++p) {
        const float c = cos_sin[2 * p];
        const float s = cos_sin[2 * p + 1];
        const float v0 = v[2 * p];
        const float v1 = v[2 * p + 1];
        v[2 * p] = v0 * c - v1 * s;
        v[2 * p + 1] = v0 * s + v1 * c;
      }
    }
  }
}

}  // namespace folio::worker::kernels

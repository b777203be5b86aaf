#include <cmath>

#include "services/worker/kernels/swiglu.h"

namespace folio::worker::kernels {

void SwiGlu(const float* gate_up, int64_t rows, int64_t hidden, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * hidden;
    const float* up = gate + hidden;
    float* o = out + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) {
      const float g = gate[i];
      o[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
    }
  }
}

}  // namespace folio::worker::kernels

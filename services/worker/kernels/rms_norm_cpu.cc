#include <cmath>

#include "services/worker/kernels/rms_norm.h"

namespace folio::worker::kernels {

void RmsNorm(const float* x, int64_t x_stride, int64_t rows, int64_t dim, const float* weight,
             float eps, float* out, int64_t out_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    // Accumulate in double: cheap at these widths and insensitive to summation order.
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = weight[i] * (scale * xr[i]);
  }
}

}  // namespace folio::worker::kernels

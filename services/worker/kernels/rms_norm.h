// RMSNorm as in Llama: out = weight * x / sqrt(mean(x^2) + eps), per row.
// Stateless; thread-safe for disjoint outputs.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_RMS_NORM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_RMS_NORM_H_

#include <cstdint>

namespace folio::worker::kernels {

// x, out: [rows, dim] with row strides x_stride / out_stride (out may alias x when the
// strides match); weight: [dim].
void RmsNorm(const float* x, int64_t x_stride, int64_t rows, int64_t dim, const float* weight,
             float eps, float* out, int64_t out_stride);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_RMS_NORM_H_

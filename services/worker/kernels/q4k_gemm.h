// Q4_K weights times q8_K activations as a register-tiled GEMM on AVX-512 VNNI, for the
// batched steps (decode at many sequences, prefill chunks) of Q4_K_M files.
//
// The dot kernels (typed_dot.h) take one weight row against up to 8 activation rows, each
// output a horizontal sum; here 16 weight rows are unpacked once into vpdpbusd's layout
// (lane j = weight row j, 4 consecutive values a lane) and meet the activation rows 8 at a
// time, so a weight byte is unpacked once per call and every vpdpbusd does 64 useful
// multiply-adds. Per super-block of 256 and lane, the integer sums are exact and the f32
// scaling is the portable kernel's (typed_quant_portable.cc DotQ45K):
//   acc += (d_w * d_x) * sum_g sc_g isum_g - (dmin_w * d_x) * sum_g m_g bsum_g
// in the same order without fused multiply-adds, so each output equals the portable
// dot[] bit for bit (q4k_gemm_test checks it). Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_Q4K_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_Q4K_GEMM_H_

#include <cstdint>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels::typed {

// Whether GemmQ4K can run under `features` (AVX-512 VNNI).
bool HasQ4KGemm(const CpuFeatures& features);

// For activation rows r < rows (x.k8 / x.k8_d / x.k8_bsums, x.in values each, a multiple
// of 256) and weight rows j < n (q4_K super-blocks, row j at w + j * stride):
// y[r * ldy + j] = dot (beta == 0, y not read) or dot + beta * y[r * ldy + j].
// Only where HasQ4KGemm(EnabledCpuFeatures()).
void GemmQ4K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy);

}  // namespace folio::worker::kernels::typed

#endif  // FOLIO_SERVICES_WORKER_KERNELS_Q4K_GEMM_H_

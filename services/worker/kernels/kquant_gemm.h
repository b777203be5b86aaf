// q4_K and q6_K weights times q8_K activations as register-tiled GEMMs on AVX-512 VNNI,
// for the batched steps (decode at many sequences, prefill chunks) of K-quant files
// (a Q4_K_M file is q4_K and q6_K).
//
// The dot kernels (typed_dot.h) take one weight row against up to 8 activation rows, each
// output a horizontal sum; here 16 weight rows are unpacked once into vpdpbusd's layout
// (lane j = weight row j, 4 consecutive values a lane) and meet the activation rows 8 at a
// time, so a weight byte is unpacked once per call and every vpdpbusd does 64 useful
// multiply-adds. Per super-block of 256 and lane the integer sums are exact and the f32
// scaling is the portable kernel's (typed_quant_portable.cc DotQ45K, DotQ6K):
//   q4_K: acc += (d_w * d_x) * sum_g sc_g isum_g - (dmin_w * d_x) * sum_g m_g bsum_g
//   q6_K: acc += (d_w * d_x) * sum_g sc_g (isum_g - 32 bsum_g)
// in the same order without fused multiply-adds, so each output equals the portable
// dot[] bit for bit (kquant_gemm_test checks it). Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_

#include <cstdint>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels::typed {

// Whether GemmQ4K and GemmQ6K can run under `features` (AVX-512 VNNI).
bool HasKQuantGemm(const CpuFeatures& features);

// For activation rows r < rows (x.k8 / x.k8_d / x.k8_bsums, x.in values each, a multiple
// of 256) and weight rows j < n (super-blocks of the type, row j at w + j * stride):
// y[r * ldy + j] = dot (beta == 0, y not read) or dot + beta * y[r * ldy + j].
// Only where HasKQuantGemm(EnabledCpuFeatures()).
using KQuantGemmFn = void (*)(const uint8_t* w, int64_t stride, int64_t n,
                              const Activations& x, int64_t rows, float beta, float* y,
                              int64_t ldy);
void GemmQ4K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy);
void GemmQ6K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy);
// GemmQ4K for kQ4_K, GemmQ6K for kQ6_K, null for any other kind.
KQuantGemmFn KQuantGemmFor(StoredKind kind);

}  // namespace folio::worker::kernels::typed

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_

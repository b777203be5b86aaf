// q4_K, q6_K and q4_0 weights times 8-bit activations as register-tiled GEMMs on AVX-512
// VNNI, for the batched steps (decode at many sequences, prefill chunks) of block-quant
// files (a Q4_K_M file is q4_K and q6_K; a Q4_0 file is q4_0 and a q6_K or q8_0 head).
//
// The dot kernels (typed_dot.h) take one weight row against up to 8 activation rows, each
// output a horizontal sum; here 16 weight rows are unpacked once into vpdpbusd's layout
// (lane j = weight row j, 4 consecutive values a lane) and meet the activation rows 8 at a
// time, so a weight byte is unpacked once per call and every vpdpbusd does 64 useful
// multiply-adds. The integer sums are exact and the f32 scaling is the portable kernel's
// (typed_quant_portable.cc DotQ45K, DotQ6K, DotLegacy):
//   q4_K: per super-block of 256,
//         acc += (d_w * d_x) * sum_g sc_g isum_g - (dmin_w * d_x) * sum_g m_g bsum_g
//   q6_K: per super-block of 256, acc += (d_w * d_x) * sum_g sc_g (isum_g - 32 bsum_g)
//   q4_0: per block of 32, acc += (d_w * d_x) * (isum - 8 sum_x)
// in the same order without fused multiply-adds, so each output equals the portable
// dot[] bit for bit (kquant_gemm_test checks it). q4_K and q6_K read q8_K activations
// (x.k8, x.k8_d, x.k8_bsums), q4_0 reads q8_0 ones with their block sums (x.q8, x.q8_d,
// x.q8_isum). Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_

#include <cstdint>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels::typed {

// Whether GemmQ4K, GemmQ6K and GemmQ4_0 can run under `features` (AVX-512 VNNI).
bool HasKQuantGemm(const CpuFeatures& features);

// For activation rows r < rows (the forms above, x.in values each, a multiple of 256) and
// weight rows j < n (blocks of the type, row j at w + j * stride):
// y[r * ldy + j] = dot (beta == 0, y not read) or dot + beta * y[r * ldy + j].
// Only where HasKQuantGemm(EnabledCpuFeatures()).
using KQuantGemmFn = void (*)(const uint8_t* w, int64_t stride, int64_t n,
                              const Activations& x, int64_t rows, float beta, float* y,
                              int64_t ldy);
void GemmQ4K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy);
void GemmQ6K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy);
void GemmQ4_0(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
              float beta, float* y, int64_t ldy);
// GemmQ4K for kQ4_K, GemmQ6K for kQ6_K, GemmQ4_0 for kQ4_0, null for any other kind.
KQuantGemmFn KQuantGemmFor(StoredKind kind);
// Whether the GEMM of `kind` reads q8_0 activations (else q8_K).
inline bool KQuantGemmReadsQ8_0(StoredKind kind) { return kind == StoredKind::kQ4_0; }

}  // namespace folio::worker::kernels::typed

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KQUANT_GEMM_H_

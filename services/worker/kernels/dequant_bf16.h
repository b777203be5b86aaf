// Rows of a TypedMatrix (kernels/typed_gemm.h) as bf16: the stored values dequantized
// exactly as TypedMatrix::RowToF32 has them (gguf-py's f32 operations, no fused
// multiply-adds) and rounded to nearest even (typed::RoundToBf16), so every path writes
// the same bits for finite weights. The quantized matmul through oneDNN
// (OnednnGemm::LinearDequantized) feeds its bf16 matmul with these rows, a chunk at a
// time, once per step: it needs them at a fraction of the matmul's own time, which the
// generic dequantizers (about 1 ns a value, scalar) are not.
//
// Paths: AVX-512 BF16 (vcvtne2ps2bf16) kernels for q8_0, q4_0, q4_K and q6_K (the types
// of Q8_0, Q4_0 and Q4_K_M files); every other type, and every type on a CPU without
// avx512_bf16, dequantizes a row to f32 and rounds it. Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_DEQUANT_BF16_H_
#define FOLIO_SERVICES_WORKER_KERNELS_DEQUANT_BF16_H_

#include <cstdint>
#include <vector>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/typed_gemm.h"

namespace folio::worker::kernels {

// Writes rows [row, row + n) of `w` (w.in() values each) at out, row after row (stride
// w.in()). `features` picks the path (NoCpuFeatures(): the generic one); `scratch` is one
// row of f32 for the generic path (grown as needed).
void RowsToBf16(const TypedMatrix& w, int64_t row, int64_t n, uint16_t* out,
                const CpuFeatures& features, std::vector<float>& scratch);

// Whether `kind` has a kernel of its own under `features` (else the generic path).
bool HasBf16RowKernel(StoredKind kind, const CpuFeatures& features);

namespace dequant_internal {
// One row of `blocks` stored blocks at src as bf16 at out; null when there is no kernel.
using RowToBf16Fn = void (*)(const uint8_t* src, int64_t blocks, uint16_t* out);
RowToBf16Fn Avx512Bf16RowKernel(StoredKind kind);  // dequant_bf16_avx512.cc
}  // namespace dequant_internal

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_DEQUANT_BF16_H_

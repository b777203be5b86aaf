// The gated MLP activations: SwiGLU of the Llama MLP, out = silu(gate) * up, silu(x) =
// x / (1 + e^-x); and GeGLU of Gemma's, out = gelu(gate) * up with GELU's tanh form.
// Stateless; thread-safe for disjoint outputs.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_SWIGLU_H_
#define FOLIO_SERVICES_WORKER_KERNELS_SWIGLU_H_

#include <cstdint>

#include "services/worker/kernels/cpu_isa.h"

namespace folio::worker::kernels {

// gate_up: [rows, 2 * hidden] as the fused gate/up projection writes it: gate in columns
// [0, hidden), up in [hidden, 2 * hidden). out: [rows, hidden].
// isa: the AVX2 path computes e^-gate with a polynomial (relative error below 2e-7);
// with avx512 as well (the CPU must have it), 16 lanes at a time by the same polynomial.
void SwiGlu(const float* gate_up, int64_t rows, int64_t hidden, float* out,
            CpuIsa isa = BestCpuIsa(), bool avx512 = EnabledCpuFeatures().avx512);

// gate_up as for SwiGlu; out = gelu(gate) * up, gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi)
// (x + 0.044715 x^3))) in f32 (llama.cpp's CPU backend reads GELU from an f16 table, so
// its values differ from these by f16 rounding).
void GeGlu(const float* gate_up, int64_t rows, int64_t hidden, float* out);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_SWIGLU_H_

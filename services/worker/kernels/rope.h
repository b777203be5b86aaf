// Rotary position embedding (RoPE) in the Llama / llama2.c convention: within each head,
// adjacent pairs (0,1), (2,3), ... are rotated by angle pos * theta^(-i / head_dim) for
// the pair starting at even index i. GGUF llama files and llama2.c checkpoints both use
// this layout (no q/k permutation). Stateless; thread-safe for disjoint rows.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_
#define FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_

#include <cstdint>

namespace folio::worker::kernels {

// Rotates, in place, num_heads heads of head_dim values at the start of each row of x
// ([rows, >= num_heads * head_dim], row_stride apart); row r is at positions[r]. Pass
// q and k heads together when they are adjacent in the row (fused QKV output).
void ApplyRope(float* x, int64_t row_stride, int64_t rows, const int32_t* positions,
               int32_t num_heads, int32_t head_dim, float theta);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_

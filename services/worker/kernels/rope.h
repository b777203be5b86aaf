// Rotary position embedding (RoPE) in llama.cpp's two layouts:
//   kInterleaved (llama.cpp's "norm"): within each head, adjacent pairs (0,1), (2,3), ...;
//     GGUF llama files (whose converter permuted Q/K for it) and llama2.c checkpoints.
//   kNeox: pairs (i, i + head_dim/2); qwen2 and qwen3 GGUFs.
// Pair p (p < head_dim/2) turns by angle pos * freq_scale * theta^(-2p / head_dim)
// / freq_factors[p]: freq_scale is linear RoPE scaling (1 / factor), freq_factors the
// per-pair divisors of Llama 3.1's scaling (the rope_freqs tensor; null: all 1).
// Stateless; thread-safe for disjoint rows.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_
#define FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_

#include <cstdint>

namespace folio::worker::kernels {

enum class RopeLayout { kInterleaved, kNeox };

struct RopeParams {
  float theta = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // [head_dim / 2] or null; not owned
  RopeLayout layout = RopeLayout::kInterleaved;
};

// Rotates, in place, num_heads heads of head_dim values at the start of each row of x
// ([rows, >= num_heads * head_dim], row_stride apart); row r is at positions[r]. Pass
// q and k heads together when they are adjacent in the row (fused QKV output).
void ApplyRope(float* x, int64_t row_stride, int64_t rows, const int32_t* positions,
               int32_t num_heads, int32_t head_dim, const RopeParams& params);

// The interleaved layout with plain frequencies (llama2.c's convention).
inline void ApplyRope(float* x, int64_t row_stride, int64_t rows, const int32_t* positions,
                      int32_t num_heads, int32_t head_dim, float theta) {
  ApplyRope(x, row_stride, rows, positions, num_heads, head_dim, RopeParams{.theta = theta});
}

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_ROPE_H_

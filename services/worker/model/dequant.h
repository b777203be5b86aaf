// Conversions between the stored weight formats and f32 (through weight_format.h).
//
// The forward pass reads weights through TensorView; these helpers turn one row (or a
// whole tensor) into f32 and, for the GGUF writer, f32 into the stored formats. All
// loads use memcpy, so the source may be unaligned (q8_0 blocks are 34 bytes).
// Stateless free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_DEQUANT_H_
#define FOLIO_SERVICES_WORKER_MODEL_DEQUANT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "services/worker/model/weights.h"

namespace folio::worker {

// q8_0: blocks of kQ8BlockSize values, each an f16 scale then kQ8BlockSize int8s.
inline constexpr int64_t kQ8BlockSize = 32;
inline constexpr int64_t kQ8BlockBytes = 2 + kQ8BlockSize;

// IEEE half <-> single. F32ToF16 rounds to nearest even; overflow becomes inf, NaN
// stays NaN.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// bfloat16 <-> single. F32ToBF16 rounds to nearest even; NaN stays NaN.
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);

// Bytes that `num_values` consecutive values take in `dtype`. For a block type,
// `num_values` must be a multiple of its block (CHECKed).
int64_t DTypeBytes(DType dtype, int64_t num_values);

// Rows [begin, begin + rows) of the 2-D tensor `t`, as a view of the same data (a fused
// tensor's parts: Phi-3's attn_qkv and gate/up). The range must lie within t (CHECKed).
TensorView RowsOf(const TensorView& t, int64_t begin, int64_t rows);

// Writes row `row` of `t` (cols() values) into out[0, cols()). `row` must be in
// [0, rows()) (CHECKed); a 1-D tensor has one row per element, so use ToF32 for it.
// For a block type, cols() is a multiple of its block (the loaders guarantee it).
void RowToF32(const TensorView& t, int64_t row, float* out);

// The whole tensor as f32, row-major; num_elements() values.
std::vector<float> ToF32(const TensorView& t);

// Converts `n` f32 values to the stored format of `dtype` (f32, f16, bf16 or q8_0:
// the other block types come from llama.cpp's quantizer), appending to `out`
// (DTypeBytes(dtype, n) bytes). For kQ8_0, `n` must be a multiple of kQ8BlockSize and
// each block gets scale max|x|/127 (the ggml reference quantizer).
void AppendFromF32(DType dtype, const float* values, int64_t n, std::vector<uint8_t>* out);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_DEQUANT_H_

// WeightFormat: one stored weight type (f32, f16, bf16 and the ggml block quantizations)
// as a small named unit: its ggml type number, its block geometry and its per-block
// dequantizer. The GGUF parser picks the unit from a tensor's ggml type; dequant.h and
// the engine's typed matmul (kernels/typed_gemm.h) reach a tensor's values only through
// it, so a new type touches one place: a formats/*.cc file and the table in
// weight_format.cc. Faster kernels for a type (issue 20: F16/BF16/Q8_0 SIMD) plug in
// beside `dequantize` in the same unit.
//
// Each dequantizer reproduces gguf-py's reference (gguf/quants.py) bit for bit: the same
// f32 operations in the same order, without fused multiply-adds (the formats/ sources are
// built with -ffp-contract=off); weight_format_reference_test checks it on random blocks.
// Stateless; the table is immutable and safe to read from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_WEIGHT_FORMAT_H_
#define FOLIO_SERVICES_WORKER_MODEL_WEIGHT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "services/worker/model/weights.h"

namespace folio::worker {

// Dequantizes `num_blocks` consecutive blocks at `src` (any alignment) into
// out[0, num_blocks * block_values).
using DequantizeFn = void (*)(const uint8_t* src, int64_t num_blocks, float* out);

struct WeightFormat {
  DType dtype;
  const char* name;       // as llama.cpp prints it: "q4_K"
  uint32_t ggml_type;     // ggml_type number in a GGUF file
  int32_t block_values;   // values per block (1 for f32, f16, bf16)
  int32_t block_bytes;    // bytes per block
  DequantizeFn dequantize;

  bool is_block_quantized() const { return block_values > 1; }
  // Bytes of `num_values` values; num_values must be a multiple of block_values.
  int64_t BytesFor(int64_t num_values) const {
    return num_values / block_values * block_bytes;
  }
};

// The unit for `dtype` (every DType has one).
const WeightFormat& FormatOf(DType dtype);

// The unit for a ggml type number, or nullptr when Folio does not read that type.
const WeightFormat* FormatForGgmlType(uint32_t ggml_type);

// "f32 (0), f16 (1), ..." for error messages.
std::string SupportedGgmlTypes();

// Fills num_blocks blocks of a block type `f` at `out` with random contents from `seed`
// whose f16 scale fields are finite, drawn so the values come out with a standard
// deviation of roughly `std` (a random-weight model of that type, or test input). For
// f16/bf16 "blocks" it writes random finite values of about `std`; not for f32.
void FillRandomBlocks(const WeightFormat& f, int64_t num_blocks, float std, uint64_t seed,
                      uint8_t* out);

// Every unit, in ggml type order.
const std::vector<const WeightFormat*>& AllWeightFormats();

// The units themselves (formats/*.cc).
extern const WeightFormat kF32Format, kF16Format, kBF16Format;
extern const WeightFormat kQ4_0Format, kQ4_1Format, kQ5_0Format, kQ5_1Format, kQ8_0Format;
extern const WeightFormat kQ2_KFormat, kQ3_KFormat, kQ4_KFormat, kQ5_KFormat, kQ6_KFormat;

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_WEIGHT_FORMAT_H_

// ggml's 32-value block quantizations: q4_0, q4_1, q5_0, q5_1, q8_0.
//
// Layouts (little-endian, no padding; d and m are f16):
//   q4_0 (18 B): d, qs[16]        value j = d * (nibble_j - 8)
//   q4_1 (20 B): d, m, qs[16]     value j = d * nibble_j + m
//   q5_0 (22 B): d, qh[4], qs[16] value j = d * ((nibble_j | bit_j(qh) << 4) - 16)
//   q5_1 (24 B): d, m, qh[4], qs[16]  value j = d * (nibble_j | bit_j(qh) << 4) + m
//   q8_0 (34 B): d, qs[32] int8   value j = qs[j] * d
// where nibble_j is the low nibble of qs[j] for j < 16 and the high nibble of qs[j - 16]
// otherwise. The arithmetic follows gguf-py's dequantize_blocks operation for operation.
#include <cstring>

#include "services/worker/model/dequant.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }

void DequantizeQ4_0(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 18, out += 32) {
    const float d = F16At(src);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(Nibble(src + 2, j) - 8);
  }
}

void DequantizeQ4_1(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 20, out += 32) {
    const float d = F16At(src);
    const float m = F16At(src + 2);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(Nibble(src + 4, j)) + m;
  }
}

void DequantizeQ5_0(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 22, out += 32) {
    const float d = F16At(src);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    for (int j = 0; j < 32; ++j) {
      const int q = (Nibble(src + 6, j) | static_cast<int>((qh >> j) & 1u) << 4) - 16;
      out[j] = d * static_cast<float>(q);
    }
  }
}

void DequantizeQ5_1(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 24, out += 32) {
    const float d = F16At(src);
    const float m = F16At(src + 2);
    uint32_t qh;
    std::memcpy(&qh, src + 4, 4);
    for (int j = 0; j < 32; ++j) {
      const int q = Nibble(src + 8, j) | static_cast<int>((qh >> j) & 1u) << 4;
      out[j] = d * static_cast<float>(q) + m;
    }
  }
}

void DequantizeQ8_0(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 34, out += 32) {
    const float d = F16At(src);
    const auto* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d;
  }
}

}  // namespace

const WeightFormat kQ4_0Format{DType::kQ4_0, "q4_0", 2, 32, 18, DequantizeQ4_0};
const WeightFormat kQ4_1Format{DType::kQ4_1, "q4_1", 3, 32, 20, DequantizeQ4_1};
const WeightFormat kQ5_0Format{DType::kQ5_0, "q5_0", 6, 32, 22, DequantizeQ5_0};
const WeightFormat kQ5_1Format{DType::kQ5_1, "q5_1", 7, 32, 24, DequantizeQ5_1};
const WeightFormat kQ8_0Format{DType::kQ8_0, "q8_0", 8, 32, 34, DequantizeQ8_0};

}  // namespace folio::worker

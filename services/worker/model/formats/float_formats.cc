// Unquantized weight formats: f32, f16 and bf16 (one value per "block").
#include <cstring>

#include "services/worker/model/dequant.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

void DequantizeF32(const uint8_t* src, int64_t n, float* out) {
  std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const uint8_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = F16ToF32(h);
  }
}

void DequantizeBF16(const uint8_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    out[i] = BF16ToF32(b);
  }
}

}  // namespace

const WeightFormat kF32Format{DType::kF32, "f32", 0, 1, 4, DequantizeF32};
const WeightFormat kF16Format{DType::kF16, "f16", 1, 1, 2, DequantizeF16};
const WeightFormat kBF16Format{DType::kBF16, "bf16", 30, 1, 2, DequantizeBF16};

}  // namespace folio::worker

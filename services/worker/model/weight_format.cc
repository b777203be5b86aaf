#include "services/worker/model/weight_format.h"

#include <cstring>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "services/worker/model/dequant.h"
#include "glog/logging.h"

namespace folio::worker {

const std::vector<const WeightFormat*>& AllWeightFormats() {
  static const auto* all = new std::vector<const WeightFormat*>{
      &kF32Format,  &kF16Format,  &kQ4_0Format, &kQ4_1Format, &kQ5_0Format,
      &kQ5_1Format, &kQ8_0Format, &kQ2_KFormat, &kQ3_KFormat, &kQ4_KFormat,
      &kQ5_KFormat, &kQ6_KFormat, &kBF16Format};
  return *all;
}

const WeightFormat& FormatOf(DType dtype) {
  for (const WeightFormat* f : AllWeightFormats()) {
    if (f->dtype == dtype) return *f;
  }
  LOG(FATAL) << "no weight format for dtype " << static_cast<int>(dtype);
  return kF32Format;
}

const WeightFormat* FormatForGgmlType(uint32_t ggml_type) {
  for (const WeightFormat* f : AllWeightFormats()) {
    if (f->ggml_type == ggml_type) return f;
  }
  return nullptr;
}

std::string SupportedGgmlTypes() {
  std::string out;
  for (const WeightFormat* f : AllWeightFormats()) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", f->name, " (", f->ggml_type, ")");
  }
  return out;
}

const char* DTypeName(DType dtype) { return FormatOf(dtype).name; }

void FillRandomBlocks(const WeightFormat& f, int64_t num_blocks, float std, uint64_t seed,
                      uint8_t* out) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto put16 = [](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
  if (f.dtype == DType::kF16 || f.dtype == DType::kBF16) {
    for (int64_t i = 0; i < num_blocks; ++i) {
      const float v = std * normal(rng);
      put16(out + 2 * i, f.dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v));
    }
    return;
  }
  CHECK(f.is_block_quantized()) << f.name;
  for (int64_t i = 0; i < num_blocks * f.block_bytes; ++i) out[i] = static_cast<uint8_t>(rng());
  // Offsets of the f16 scale fields, and the typical |q * sub-scale| they multiply.
  struct Fields {
    int d, m;  // byte offsets of d and of the min/dmin (-1: none)
    float typical;
  };
  Fields fields{0, -1, 1.0f};
  switch (f.dtype) {
    case DType::kQ4_0: fields = {0, -1, 4.6f}; break;
    case DType::kQ4_1: fields = {0, 2, 4.3f}; break;
    case DType::kQ5_0: fields = {0, -1, 9.2f}; break;
    case DType::kQ5_1: fields = {0, 2, 9.0f}; break;
    case DType::kQ8_0: fields = {0, -1, 73.0f}; break;
    case DType::kQ2_K: fields = {80, 82, 12.0f}; break;
    case DType::kQ3_K: fields = {108, -1, 40.0f}; break;
    case DType::kQ4_K: fields = {0, 2, 150.0f}; break;
    case DType::kQ5_K: fields = {0, 2, 290.0f}; break;
    case DType::kQ6_K: fields = {208, -1, 1300.0f}; break;
    default: LOG(FATAL) << "no scale fields for " << f.name;
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t* block = out + b * f.block_bytes;
    const float d = std / fields.typical * (0.5f + std::abs(normal(rng)));
    put16(block + fields.d, F32ToF16(d * (rng() % 2 ? 1.0f : -1.0f)));
    // A min about as large as the values keeps their mean near zero-ish.
    if (fields.m >= 0) put16(block + fields.m, F32ToF16(d * (f.block_values > 32 ? 1.0f : 4.0f) * normal(rng)));
  }
}

}  // namespace folio::worker

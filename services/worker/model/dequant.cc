#include "services/worker/model/dequant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <glog/logging.h>

#include "services/worker/kernels/half.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {

static_assert(std::endian::native == std::endian::little,
              "model files are little-endian and read in place");

int64_t TensorView::num_elements() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf or NaN; keep the payload
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal half: renormalize into a normal single
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // rounds to zero (< 2^-25)
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 .. 24
    const uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half;
    if (rem > halfway || (rem == halfway && (half & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal (or too large: the rebiased exponent reaches 31 and becomes inf below).
  // Rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into inf
  if (h >= 0x7c00u) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>(h);
}

float BF16ToF32(uint16_t b) { return kernels::Bf16ToFloat(b); }

uint16_t F32ToBF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

int64_t DTypeBytes(DType dtype, int64_t num_values) {
  const WeightFormat& f = FormatOf(dtype);
  CHECK_EQ(num_values % f.block_values, 0) << f.name << " needs whole blocks of "
                                           << f.block_values << " values";
  return f.BytesFor(num_values);
}

void RowToF32(const TensorView& t, int64_t row, float* out) {
  CHECK_GE(row, 0);
  CHECK_LT(row, t.rows());
  const WeightFormat& f = FormatOf(t.dtype);
  const int64_t cols = t.cols();
  const auto* base = static_cast<const uint8_t*>(t.data);
  f.dequantize(base + DTypeBytes(t.dtype, cols) * row, cols / f.block_values, out);
}

TensorView RowsOf(const TensorView& t, int64_t begin, int64_t rows) {
  CHECK_EQ(t.shape.size(), 2u);
  CHECK(begin >= 0 && rows >= 0 && begin + rows <= t.shape[0]);
  TensorView v;
  v.dtype = t.dtype;
  v.shape = {rows, t.shape[1]};
  v.data = static_cast<const uint8_t*>(t.data) + begin * DTypeBytes(t.dtype, t.shape[1]);
  return v;
}

std::vector<float> ToF32(const TensorView& t) {
  const WeightFormat& f = FormatOf(t.dtype);
  const int64_t n = t.num_elements();
  std::vector<float> out(static_cast<size_t>(n));
  CHECK_EQ(n % f.block_values, 0) << f.name << " needs whole blocks";
  if (n > 0) f.dequantize(static_cast<const uint8_t*>(t.data), n / f.block_values, out.data());
  return out;
}

void AppendFromF32(DType dtype, const float* values, int64_t n, std::vector<uint8_t>* out) {
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(DTypeBytes(dtype, n)));
  uint8_t* dst = out->data() + start;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, values, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(values[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = F32ToBF16(values[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case DType::kQ8_0:
      for (int64_t blk = 0; blk < n / kQ8BlockSize; ++blk) {
        const float* x = values + blk * kQ8BlockSize;
        float amax = 0.0f;
        for (int64_t i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t* b = dst + blk * kQ8BlockBytes;
        const uint16_t d16 = F32ToF16(d);
        std::memcpy(b, &d16, 2);
        for (int64_t i = 0; i < kQ8BlockSize; ++i) {
          const int8_t q = static_cast<int8_t>(std::lround(x[i] * id));
          std::memcpy(b + 2 + i, &q, 1);
        }
      }
      return;
    default:
      LOG(FATAL) << "AppendFromF32 writes f32, f16, bf16 and q8_0, not " << DTypeName(dtype);
  }
}

}  // namespace folio::worker

// The portable kernels of typed_dot.h (the reference of every vector path), the
// activation converters, and the per-path kernel table.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "services/worker/kernels/half.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels::typed {
namespace {

inline uint16_t Load16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// f16 / bf16 weights against f32 activations: 8 partial sums over k, added in a fixed
// order at the end.
template <StoredKind kKind, int R>
void DotHalf(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t n = x.in;
  for (int i = 0; i < R; ++i) {
    const float* xr = x.f32 + (r0 + i) * x.ldx;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = 0; k < n; ++k) {
      const uint16_t h = Load16(w + 2 * k);
      const float wk = kKind == StoredKind::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
      acc[k & 7] += wk * xr[k];
    }
    out[i] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
}

// q8_0 weights against q8_0 activations: exact int32 block sums, scaled and summed in
// block order.
template <int R>
void DotQ8_0(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t blocks = x.in / kQ8Block;
  for (int i = 0; i < R; ++i) {
    const int8_t* xq = x.q8 + (r0 + i) * x.in;
    const float* xd = x.q8_d + (r0 + i) * blocks;
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = w + b * kQ8BlockBytes;
      const int8_t* wq = reinterpret_cast<const int8_t*>(blk + 2);
      int32_t sum = 0;
      for (int j = 0; j < kQ8Block; ++j) sum += int32_t{wq[j]} * int32_t{xq[b * kQ8Block + j]};
      acc += (HalfToFloat(Load16(blk)) * xd[b]) * static_cast<float>(sum);
    }
    out[i] = acc;
  }
}

template <template <int> class F>
DotKernel Table() {
  DotKernel k;
  k.dot[0] = F<1>::fn;
  k.dot[1] = F<2>::fn;
  k.dot[2] = F<3>::fn;
  k.dot[3] = F<4>::fn;
  return k;
}
template <int R>
struct F16Dot {
  static constexpr DotFn fn = DotHalf<StoredKind::kF16, R>;
};
template <int R>
struct Bf16Dot {
  static constexpr DotFn fn = DotHalf<StoredKind::kBF16, R>;
};
template <int R>
struct Q8Dot {
  static constexpr DotFn fn = DotQ8_0<R>;
};

}  // namespace

DotKernel PortableKernel(StoredKind kind) {
  DotKernel k;
  if (IsLowBitKind(kind)) return PortableQuantKernel(kind);
  switch (kind) {
    case StoredKind::kF16:
      return Table<F16Dot>();
    case StoredKind::kBF16:
      return Table<Bf16Dot>();
    case StoredKind::kQ8_0:
      k = Table<Q8Dot>();
      k.needs_q8 = true;
      return k;
    default:
      break;
  }
  return k;
}

DotKernel KernelFor(StoredKind kind, SimdPath path) {
  switch (path) {
    case SimdPath::kPortable:
      return PortableKernel(kind);
    case SimdPath::kAvx2:
    case SimdPath::kAvxVnni:
      return Avx2Kernel(kind, path);
    case SimdPath::kAvx512:
    case SimdPath::kAvx512Vnni:
    case SimdPath::kAvx512Bf16:
      return Avx512Kernel(kind, path);
  }
  return DotKernel{};
}

void QuantizeQ8_0Portable(const float* x, int64_t n, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 127.0f;
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int j = 0; j < kQ8Block; ++j) {
      q[b * kQ8Block + j] = static_cast<int8_t>(std::round(xb[j] * id));
    }
    d[b] = HalfToFloat(FloatToHalf(scale));
    if (s != nullptr) {
      int32_t sum = 0;
      for (int j = 0; j < kQ8Block; ++j) sum += q[b * kQ8Block + j];
      s[b] = d[b] * static_cast<float>(sum);
    }
  }
}

void Q8Corrections(const int8_t* q, int64_t n, int32_t* c) {
  for (int64_t i = 0; i < n / 4; ++i) {
    c[i] = -128 * (int32_t{q[4 * i]} + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
  }
}

void Q4_0Activations(const int8_t* q, const float* d, int64_t n, int8_t* q4x, float* q4x_d,
                     int32_t* q4x_off) {
  for (int64_t g = 0; g < n / (4 * kQ8Block); ++g) {
    for (int k = 0; k < 4; ++k) {
      const int8_t* qb = q + (4 * g + k) * kQ8Block;
      std::memcpy(q4x + 128 * g + 16 * k, qb, 16);
      std::memcpy(q4x + 128 * g + 64 + 16 * k, qb + 16, 16);
      int32_t sum = 0;
      for (int i = 0; i < kQ8Block; ++i) sum += qb[i];
      for (int l = 0; l < 4; ++l) {
        q4x_d[16 * g + 4 * k + l] = d[4 * g + k];
        q4x_off[16 * g + 4 * k + l] = l == 0 ? -8 * sum : 0;
      }
    }
  }
}

void RoundToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
    } else {
      out[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

}  // namespace folio::worker::kernels::typed

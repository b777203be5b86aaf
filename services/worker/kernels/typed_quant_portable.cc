// The portable kernels of the 4/5/6-bit ggml block types (typed_dot.h): the reference
// every vector path of typed_quant_avx2.cc / typed_quant_avx512.cc is tested against,
// and the q8_K activation quantizer.
//
// Each kernel unpacks a weight block into small integers exactly as the layout defines
// them (formats/legacy_quants.cc and formats/k_quants.cc spell the layouts out; gguf-py's
// dequantizers define them), takes exact int32 dot products with the 8-bit activation
// quants, and scales the integer sums in f32:
//   q4_0 / q5_0:  value = d * (q - 8 | q - 16)     sum_b (d_w * d_x) * isum_b
//   q4_1 / q5_1:  value = d * q + m                + m_w * s_x (s_x = d_x * sum of x quants)
//   q4_K / q5_K:  value = d * sc_g * q - dmin * m_g, per super-block of 256:
//                 (d_w * d_x) * sum_g sc_g isum_g - (dmin_w * d_x) * sum_g m_g bsum_g
//   q6_K:         value = d * sc_g * (q - 32), groups of 16: (d_w * d_x) * sum_g sc_g isum_g
// Stateless; thread-safe.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "services/worker/kernels/half.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels::typed {
namespace {

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// Block geometry of the 32-value types: bytes per block and where qh / qs start.
struct LegacyLayout {
  int bytes;
  bool has_min;  // q4_1 / q5_1: f16 m after d
  bool five_bit;
};
constexpr LegacyLayout LayoutOf(StoredKind k) {
  return k == StoredKind::kQ4_0   ? LegacyLayout{18, false, false}
         : k == StoredKind::kQ4_1 ? LegacyLayout{20, true, false}
         : k == StoredKind::kQ5_0 ? LegacyLayout{22, false, true}
                                  : LegacyLayout{24, true, true};
}

// The 32 integer weights of one block (q - offset for the types without a min).
template <StoredKind kKind>
void UnpackLegacy(const uint8_t* blk, int q[32]) {
  constexpr LegacyLayout L = LayoutOf(kKind);
  const uint8_t* p = blk + (L.has_min ? 4 : 2);
  uint32_t qh = 0;
  if (L.five_bit) {
    std::memcpy(&qh, p, 4);
    p += 4;
  }
  const int offset = L.has_min ? 0 : (L.five_bit ? 16 : 8);
  for (int j = 0; j < 16; ++j) {
    int lo = p[j] & 0x0F, hi = p[j] >> 4;
    if (L.five_bit) {
      lo |= ((qh >> j) & 1) << 4;
      hi |= ((qh >> (j + 16)) & 1) << 4;
    }
    q[j] = lo - offset;
    q[j + 16] = hi - offset;
  }
}

template <StoredKind kKind, int R>
void DotLegacy(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  constexpr LegacyLayout L = LayoutOf(kKind);
  const int64_t blocks = x.in / kQ8Block;
  for (int i = 0; i < R; ++i) {
    const int8_t* xq = x.q8 + (r0 + i) * x.in;
    const float* xd = x.q8_d + (r0 + i) * blocks;
    const float* xs = x.q8_s + (r0 + i) * blocks;
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = w + b * L.bytes;
      int q[32];
      UnpackLegacy<kKind>(blk, q);
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[j] * int32_t{xq[b * kQ8Block + j]};
      acc += (HalfAt(blk) * xd[b]) * static_cast<float>(sum);
      if (L.has_min) acc += HalfAt(blk + 2) * xs[b];
    }
    out[i] = acc;
  }
}

template <bool kFiveBit, int R>
void DotQ45K(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  constexpr int kBytes = kFiveBit ? 176 : 144;
  const int64_t blocks = x.in / kQ8KBlock;
  for (int i = 0; i < R; ++i) {
    const int8_t* xq = x.k8 + (r0 + i) * x.in;
    const float* xd = x.k8_d + (r0 + i) * blocks;
    const int16_t* bs = x.k8_bsums + (r0 + i) * (x.in / 16);
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = w + b * kBytes;
      const uint8_t* qh = blk + 16;
      const uint8_t* qs = blk + (kFiveBit ? 48 : 16);
      int sc[8], m[8];
      ScalesMinsK4(blk + 4, sc, m);
      const int8_t* xb = xq + b * kQ8KBlock;
      int32_t sumi = 0, summ = 0;
      for (int g = 0; g < 8; ++g) {
        const uint8_t* q = qs + (g / 2) * 32;
        const int shift = 4 * (g % 2);
        int32_t isum = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> shift) & 0x0F;
          if (kFiveBit) v |= ((qh[l] >> g) & 1) << 4;
          isum += v * int32_t{xb[g * 32 + l]};
        }
        sumi += sc[g] * isum;
        summ += m[g] * (int32_t{bs[b * 16 + 2 * g]} + bs[b * 16 + 2 * g + 1]);
      }
      acc += (HalfAt(blk) * xd[b]) * static_cast<float>(sumi) -
             (HalfAt(blk + 2) * xd[b]) * static_cast<float>(summ);
    }
    out[i] = acc;
  }
}

template <int R>
void DotQ6K(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t blocks = x.in / kQ8KBlock;
  for (int i = 0; i < R; ++i) {
    const int8_t* xq = x.k8 + (r0 + i) * x.in;
    const float* xd = x.k8_d + (r0 + i) * blocks;
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = w + b * 210;
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const int8_t* xb = xq + b * kQ8KBlock;
      int32_t sumi = 0;
      for (int g = 0; g < 16; ++g) {
        int32_t isum = 0;
        for (int l = 0; l < 16; ++l) {
          const int v = g * 16 + l, half = v / 128, r = v % 128;
          const int low = (ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
          const int high = (qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
          isum += ((low | high << 4) - 32) * int32_t{xb[v]};
        }
        sumi += int32_t{sc[g]} * isum;
      }
      acc += (HalfAt(blk + 208) * xd[b]) * static_cast<float>(sumi);
    }
    out[i] = acc;
  }
}

template <StoredKind kKind, int R>
void DotLowBit(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  if constexpr (kKind == StoredKind::kQ4_K) {
    DotQ45K<false, R>(w, x, r0, out);
  } else if constexpr (kKind == StoredKind::kQ5_K) {
    DotQ45K<true, R>(w, x, r0, out);
  } else if constexpr (kKind == StoredKind::kQ6_K) {
    DotQ6K<R>(w, x, r0, out);
  } else {
    DotLegacy<kKind, R>(w, x, r0, out);
  }
}

template <StoredKind kKind>
DotKernel Make() {
  DotKernel k;
  k.dot[0] = DotLowBit<kKind, 1>;
  k.dot[1] = DotLowBit<kKind, 2>;
  k.dot[2] = DotLowBit<kKind, 3>;
  k.dot[3] = DotLowBit<kKind, 4>;
  const bool super = kKind == StoredKind::kQ4_K || kKind == StoredKind::kQ5_K ||
                     kKind == StoredKind::kQ6_K;
  k.needs_q8 = !super;
  k.needs_q8k = super;
  return k;
}

}  // namespace

bool IsLowBitKind(StoredKind kind) {
  switch (kind) {
    case StoredKind::kQ4_0:
    case StoredKind::kQ4_1:
    case StoredKind::kQ5_0:
    case StoredKind::kQ5_1:
    case StoredKind::kQ4_K:
    case StoredKind::kQ5_K:
    case StoredKind::kQ6_K:
      return true;
    default:
      return false;
  }
}

DotKernel PortableQuantKernel(StoredKind kind) {
  switch (kind) {
    case StoredKind::kQ4_0:
      return Make<StoredKind::kQ4_0>();
    case StoredKind::kQ4_1:
      return Make<StoredKind::kQ4_1>();
    case StoredKind::kQ5_0:
      return Make<StoredKind::kQ5_0>();
    case StoredKind::kQ5_1:
      return Make<StoredKind::kQ5_1>();
    case StoredKind::kQ4_K:
      return Make<StoredKind::kQ4_K>();
    case StoredKind::kQ5_K:
      return Make<StoredKind::kQ5_K>();
    case StoredKind::kQ6_K:
      return Make<StoredKind::kQ6_K>();
    default:
      return DotKernel{};
  }
}

void QuantizeQ8_KPortable(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < n / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;
    int8_t* qb = q + b * kQ8KBlock;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQ8KBlock; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, kQ8KBlock);
      for (int g = 0; g < 16; ++g) bsums[b * 16 + g] = 0;
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQ8KBlock; ++j) {
      // Round half to even, as ggml's nearest_int (|iscale * x| <= 127 here).
      const int v = static_cast<int>(std::nearbyint(iscale * xb[j]));
      qb[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += qb[g * 16 + l];
      bsums[b * 16 + g] = static_cast<int16_t>(s);
    }
    d[b] = 1.0f / iscale;
  }
}

}  // namespace folio::worker::kernels::typed

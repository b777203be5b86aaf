// ggml's 256-value "K" super-block quantizations: q2_K, q3_K, q4_K, q5_K, q6_K.
//
// Layouts (little-endian, no padding; d and dmin are f16):
//   q2_K (84 B):  scales[16], qs[64], d, dmin       16 groups of 16
//   q3_K (110 B): hmask[32], qs[64], scales[12], d  16 groups of 16, 6-bit signed scales
//   q4_K (144 B): d, dmin, scales[12], qs[128]      8 groups of 32, 6-bit scale and min
//   q5_K (176 B): d, dmin, scales[12], qh[32], qs[128]
//   q6_K (210 B): ql[128], qh[64], scales[16] int8, d   16 groups of 16
// Value v of a block is (group scale) * q_v - (group min) with the group terms formed
// first, exactly as gguf-py's dequantize_blocks computes them; the bit positions of q_v
// are spelled out per type below.
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

void DequantizeQ2_K(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 84, out += 256) {
    const uint8_t* scales = src;
    const uint8_t* qs = src + 16;
    const float d = F16At(src + 80);
    const float dmin = F16At(src + 82);
    for (int v = 0; v < 256; ++v) {
      const int g = v / 16;
      const float dl = d * static_cast<float>(scales[g] & 0x0F);
      const float ml = dmin * static_cast<float>(scales[g] >> 4);
      // v = half * 128 + shift * 32 + l: bits 2*shift of qs[half * 32 + l].
      const int half = v / 128, shift = (v % 128) / 32, l = v % 32;
      const int q = (qs[half * 32 + l] >> (2 * shift)) & 3;
      out[v] = dl * static_cast<float>(q) - ml;
    }
  }
}

void DequantizeQ3_K(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 110, out += 256) {
    const uint8_t* hmask = src;
    const uint8_t* qs = src + 32;
    const uint8_t* sc = src + 96;
    const float d = F16At(src + 108);
    float dl[16];
    for (int g = 0; g < 16; ++g) {
      const int low = g < 8 ? sc[g] & 0x0F : sc[g - 8] >> 4;
      const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
      const int scale = static_cast<int>(static_cast<int8_t>(low | high << 4)) - 32;
      dl[g] = d * static_cast<float>(scale);
    }
    for (int v = 0; v < 256; ++v) {
      const int half = v / 128, shift = (v % 128) / 32, l = v % 32;
      const int ql = (qs[half * 32 + l] >> (2 * shift)) & 3;
      const int qh = ((hmask[l] >> (v / 32)) & 1) ^ 1;  // a set bit means no offset
      out[v] = dl[v / 16] * static_cast<float>(ql - (qh << 2));
    }
  }
}

// q4_K / q5_K: 8 six-bit scales and mins packed into 12 bytes.
void ScaleMin(const uint8_t* s, int g, int* sc, int* m) {
  if (g < 4) {
    *sc = s[g] & 0x3F;
    *m = s[g + 4] & 0x3F;
  } else {
    *sc = (s[g + 4] & 0x0F) | ((s[g - 4] >> 2) & 0x30);
    *m = (s[g + 4] >> 4) | ((s[g] >> 2) & 0x30);
  }
}

void DequantizeQ4_K(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 144, out += 256) {
    const float d = F16At(src);
    const float dmin = F16At(src + 2);
    const uint8_t* qs = src + 16;
    for (int g = 0; g < 8; ++g) {
      int sc, m;
      ScaleMin(src + 4, g, &sc, &m);
      const float dg = d * static_cast<float>(sc);
      const float mg = dmin * static_cast<float>(m);
      // Group g = 2 * chunk + nibble: nibble `g % 2` of qs[chunk * 32 + l].
      const uint8_t* q = qs + (g / 2) * 32;
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) {
        out[g * 32 + l] = dg * static_cast<float>((q[l] >> shift) & 0x0F) - mg;
      }
    }
  }
}

void DequantizeQ5_K(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 176, out += 256) {
    const float d = F16At(src);
    const float dmin = F16At(src + 2);
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int g = 0; g < 8; ++g) {
      int sc, m;
      ScaleMin(src + 4, g, &sc, &m);
      const float dg = d * static_cast<float>(sc);
      const float mg = dmin * static_cast<float>(m);
      const uint8_t* q = qs + (g / 2) * 32;
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0F) | ((qh[l] >> g) & 1) << 4;
        out[g * 32 + l] = dg * static_cast<float>(v) - mg;
      }
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 210, out += 256) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = F16At(src + 208);
    for (int v = 0; v < 256; ++v) {
      // Low 4 bits: v = half * 128 + nibble * 64 + l (l < 64) of ql[half * 64 + l];
      // high 2 bits: v = half * 128 + shift * 32 + l (l < 32) of qh[half * 32 + l].
      const int half = v / 128, r = v % 128;
      const int low = (ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int high = (qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
      const int q = static_cast<int>(static_cast<int8_t>(low | high << 4)) - 32;
      const float dg = d * static_cast<float>(scales[v / 16]);
      out[v] = dg * static_cast<float>(q);
    }
  }
}

}  // namespace

const WeightFormat kQ2_KFormat{DType::kQ2_K, "q2_K", 10, 256, 84, DequantizeQ2_K};
const WeightFormat kQ3_KFormat{DType::kQ3_K, "q3_K", 11, 256, 110, DequantizeQ3_K};
const WeightFormat kQ4_KFormat{DType::kQ4_K, "q4_K", 12, 256, 144, DequantizeQ4_K};
const WeightFormat kQ5_KFormat{DType::kQ5_K, "q5_K", 13, 256, 176, DequantizeQ5_K};
const WeightFormat kQ6_KFormat{DType::kQ6_K, "q6_K", 14, 256, 210, DequantizeQ6_K};

}  // namespace folio::worker

// Internal to the kernels library: the per-type, per-path row kernels behind
// TypedLinear (typed_gemm.h), and the activations they read.
//
// A DotKernel computes, for one weight row stored as its type (f16, bf16, q8_0, and the
// 4/5/6-bit block types of typed_quant_*.cc) and R
// = 1..4 consecutive activation rows, the R dot products; a kernel may also have register
// tiles (TileFn: several weight rows against up to 8 activation rows at once). Every R gives each output the
// same operations in the same order (the R rows share only the weight loads), so results
// do not depend on how many token rows a step has. The portable kernels are the
// reference; the vector kernels (typed_dot_avx2.cc, typed_dot_avx512.cc) carry target
// attributes and may only run where MissingFeature(path) is null.
//
// Q8_0 activations are quantized the way llama.cpp's quantize_row_q8_0 (and gguf-py's
// Q8_0 quantizer) does: per block of 32, d = max|x| / 127, q = round(x / d) (half away
// from zero), d kept as f16; the dot then multiplies integer block sums by d_w * d_x.
// q4_0..q5_1 read the same q8_0 blocks (q4_1 / q5_1 also their sums); the K-quants read
// q8_K super-blocks (QuantizeQ8_K).
// BF16 on the avx512_bf16 path rounds activations to bf16 (nearest even), as llama.cpp
// does for bf16 weights, for vdpbf16ps; every other path keeps them f32.
// Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_TYPED_DOT_H_
#define FOLIO_SERVICES_WORKER_KERNELS_TYPED_DOT_H_

#include <cstdint>
#include <cstring>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/typed_gemm.h"

namespace folio::worker::kernels::typed {

constexpr int kMaxDotRows = 4;
constexpr int kQ8Block = 32;        // values per q8_0 block
constexpr int kQ8BlockBytes = 34;   // f16 d + 32 int8
constexpr int kQ8KBlock = 256;      // values per q8_K activation super-block

// The activations x [rows, in] in every form a kernel of this call reads.
struct Activations {
  int64_t in = 0;
  const float* f32 = nullptr;  // row r at f32 + r * ldx
  int64_t ldx = 0;
  const uint16_t* bf16 = nullptr;  // [rows][in] rounded to bf16 (avx512_bf16 path)
  const int8_t* q8 = nullptr;      // [rows][in] q8_0 quants
  const float* q8_d = nullptr;     // [rows][in / 32] q8_0 scales (f16 values, as f32)
  const float* q8_s = nullptr;     // [rows][in / 32] d * (sum of the block's quants)
  // [rows][in / 4] -128 x (the sum of each 4 consecutive q8_0 quants), for kernels with
  // needs_q8_c (Q8Corrections); optional: they form it themselves when it is null.
  const int32_t* q8_c = nullptr;
  // [rows][in / 32] the sum of each q8_0 block's quants (kquant_gemm.h's GemmQ4_0 only).
  const int32_t* q8_isum = nullptr;
  // The q4_0 kernels' form of the q8_0 activations (needs_q4x; Q4_0Activations), per
  // group of 4 blocks (128 values; a last partial group has none): row r's quants at
  // q4x + r * in, its scales and offsets at q4x_d / q4x_off + r * (in / 8).
  const int8_t* q4x = nullptr;
  const float* q4x_d = nullptr;
  const int32_t* q4x_off = nullptr;
  const int8_t* k8 = nullptr;      // [rows][in] q8_K quants
  const float* k8_d = nullptr;     // [rows][in / 256] q8_K scales (f32)
  const int16_t* k8_bsums = nullptr;  // [rows][in / 16] sums of each 16 quants
};

// out[i] = dot(weight row w, activation row r0 + i) for i < R.
using DotFn = void (*)(const uint8_t* w, const Activations& x, int64_t r0, float* out);

// A register tile, optional: for W = DotKernel::tile_w consecutive weight rows (row j at
// w + j * stride) and R consecutive activation rows, out[j * kMaxTileRows + i] =
// dot(weight row j, activation row r0 + i), j < W, i < R. It must give every output
// exactly (bit for bit) what dot[] gives it: the tile only shares loads, never reorders
// an output's sum (typed_kernels_test checks this).
constexpr int kMaxTileRows = 8;
using TileFn = void (*)(const uint8_t* w, int64_t stride, const Activations& x, int64_t r0,
                        float* out);

// A tile over activation columns [k0, k1) only, for cache blocking: each output's sums
// go on from (k0 > 0) and are left in (k1 < in) `state`, tile_w * kTileStateFloatsPerRow
// floats the caller keeps per tile between blocks, so that a slice of the token rows stays in L1
// while it meets many weight rows. Blocks run in order, k0 = 0 first, k1 = in last (that
// call writes `out` as TileFn does); k0 and k1 < in are multiples of DotKernel::k_step.
// Run over all blocks it gives every output bit for bit what dot[] gives it.
constexpr int kTileStateFloatsPerRow = 2 * kMaxTileRows * 16;
using TileKFn = void (*)(const uint8_t* w, int64_t stride, const Activations& x, int64_t r0,
                         int64_t k0, int64_t k1, float* state, float* out);

struct DotKernel {
  DotFn dot[kMaxDotRows] = {nullptr, nullptr, nullptr, nullptr};  // dot[R - 1]
  // tile[R - 1] for R = 1..kMaxTileRows, each may be null (then dot[] runs those rows);
  // tile_w weight rows each (1..16, dividing 16); 0: no tiles.
  TileFn tile[kMaxTileRows] = {nullptr, nullptr, nullptr, nullptr,
                               nullptr, nullptr, nullptr, nullptr};
  int tile_w = 0;
  // Calls of at most this many token rows run dot[] alone (the tiles serve bigger batches).
  int tile_min_rows = 0;
  // Optional k-blocked tiles (ktile[R - 1], tile_w rows, as tile[]): RunKernel splits the
  // activation columns into blocks of k_block (a multiple of k_step) when it has them.
  TileKFn ktile[kMaxTileRows] = {nullptr, nullptr, nullptr, nullptr,
                                 nullptr, nullptr, nullptr, nullptr};
  int64_t k_step = 0;
  int64_t k_block = 0;
  bool needs_bf16 = false;  // reads x.bf16
  bool needs_q8 = false;    // reads x.q8 / x.q8_d / x.q8_s
  bool needs_q8k = false;   // reads x.k8 / x.k8_d / x.k8_bsums
  bool needs_q8_c = false;  // reads x.q8_c when set (with needs_q8)
  bool needs_q4x = false;   // reads x.q4x / x.q4x_d / x.q4x_off (with needs_q8)
  bool ok() const { return dot[0] != nullptr; }
};

// The kernel of `kind` on `path`; !ok() when that path has none for the type.
DotKernel PortableKernel(StoredKind kind);
DotKernel Avx2Kernel(StoredKind kind, SimdPath path);    // kAvx2, kAvxVnni
DotKernel Avx512Kernel(StoredKind kind, SimdPath path);  // kAvx512, kAvx512Vnni, kAvx512Bf16
DotKernel KernelFor(StoredKind kind, SimdPath path);
// Adds to *k (the dot[] kernel of `kind` on `path`) its AVX-512 register tiles
// (typed_tile_avx512.cc) where there are some: bf16 on kAvx512Bf16, q8_0 on kAvx512Vnni.
void AddAvx512Tiles(StoredKind kind, SimdPath path, DotKernel* k);

// The kernels of the 4/5/6-bit block types (typed_quant_*.cc); !ok() for other kinds.
DotKernel PortableQuantKernel(StoredKind kind);
DotKernel Avx2QuantKernel(StoredKind kind, SimdPath path);
DotKernel Avx512QuantKernel(StoredKind kind, SimdPath path);
// Whether `kind` is one of those (Q4_0..Q5_1, Q4_K, Q5_K, Q6_K).
bool IsLowBitKind(StoredKind kind);

// Quantizes n values (a multiple of 32) of x into q8_0 quants and scales; with s, also
// s[b] = d[b] * (sum of block b's quants), the q8_1 term of Q4_1/Q5_1.
// Runs the fastest path of typed_quantize_q8.cc that EnabledCpuFeatures() allows; every
// path gives the same bytes (finite x; a block of max |x| < ~4e-37, where 1 / scale
// overflows, has unspecified quants and d = 0).
void QuantizeQ8_0(const float* x, int64_t n, int8_t* q, float* d, float* s = nullptr);
// The portable loop (the reference), and one path's version (kPortable, kAvx2/kAvxVnni:
// AVX2, any AVX-512 path: AVX-512 F+BW; the path must be available).
void QuantizeQ8_0Portable(const float* x, int64_t n, int8_t* q, float* d, float* s = nullptr);
void QuantizeQ8_0OnPath(SimdPath path, const float* x, int64_t n, int8_t* q, float* d,
                        float* s = nullptr);
// Quantizes n values (a multiple of 256) into q8_K super-blocks as ggml's
// quantize_row_q8_K_ref does: the value of largest magnitude maps to -127 (d = max /
// -127, f32), q = round-half-even(x / d) clamped to 127, bsums per 16; all-zero: d = 0.
// Runs AVX-512 (F+BW) where EnabledCpuFeatures() has it; every path gives the same bytes
// (finite x).
void QuantizeQ8_K(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums);
void QuantizeQ8_KPortable(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums);
// kPortable, or any AVX-512 path (the path must be available).
void QuantizeQ8_KOnPath(SimdPath path, const float* x, int64_t n, int8_t* q, float* d,
                        int16_t* bsums);
// c[i] = -128 * (q[4i] + q[4i + 1] + q[4i + 2] + q[4i + 3]) for i < n / 4 (n a multiple
// of 4): the term that turns vpdpbusd of unsigned weights (w + 128) into w times q.
void Q8Corrections(const int8_t* q, int64_t n, int32_t* c);
// The q4_0 kernels' form of one row of q8_0 activations (q: n quants, n a multiple of
// 32; d: their block scales), per whole group of 4 blocks g (values 128g ..): q4x[128g ..
// 128g + 63] = values 0..15 of blocks 0..3 of the group, q4x[128g + 64 ..] = their values
// 16..31 (the order of a q4_0 group's low nibbles, then high ones); q4x_d[16g + 4k ..
// + 3] = block k's d, four times; q4x_off[16g + 4k] = -8 x (block k's quant sum) and
// q4x_off[16g + 4k + 1 .. + 3] = 0 (q4_0's offset of 8, as the start of an integer sum).
// A last partial group is not written.
void Q4_0Activations(const int8_t* q, const float* d, int64_t n, int8_t* q4x, float* q4x_d,
                     int32_t* q4x_off);
// Rounds n values to bf16 bit patterns (nearest even; NaN stays NaN).
void RoundToBf16(const float* x, int64_t n, uint16_t* out);

// q4_K / q5_K: the six-bit scales and mins of the 8 groups of 32, packed into the
// super-block's 12 bytes at s.
inline void ScalesMinsK4(const uint8_t* s, int sc[8], int m[8]) {
  for (int g = 0; g < 8; ++g) {
    if (g < 4) {
      sc[g] = s[g] & 0x3F;
      m[g] = s[g + 4] & 0x3F;
    } else {
      sc[g] = (s[g + 4] & 0x0F) | ((s[g - 4] >> 2) & 0x30);
      m[g] = (s[g + 4] >> 4) | ((s[g] >> 2) & 0x30);
    }
  }
}

}  // namespace folio::worker::kernels::typed

#endif  // FOLIO_SERVICES_WORKER_KERNELS_TYPED_DOT_H_

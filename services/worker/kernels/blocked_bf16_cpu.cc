// BlockedBf16Matrix and BlockedBf16Linear (blocked_bf16.h): the portable reference and the
// AVX-512 paths, each SIMD function under its own target attribute.
#include "services/worker/kernels/blocked_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "services/worker/kernels/aligned_buffer.h"
#include "services/worker/kernels/cpu_target.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels {
namespace {

constexpr int64_t kB = BlockedBf16Matrix::kBlockOut;
constexpr int kMaxRows = 4;  // token rows a pass over a block reads the weights for

// One block of 64 outputs against R token rows; x holds R rows of in_padded values (f32,
// or bf16 bits for kAvx512Bf16) `ldx` apart, zero past w.in(). Writes outputs [0, n) of
// the block (n <= 64) into y (already offset to the block's first column).
using BlockFn = void (*)(const uint16_t* w, int64_t in_padded, const void* x, int64_t ldx,
                         float beta, float* y, int64_t ldy, int64_t n);

template <int R>
void BlockPortable(const uint16_t* w, int64_t in_padded, const void* xv, int64_t ldx,
                   float beta, float* y, int64_t ldy, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < in_padded; k += 2) {
        const uint16_t* pair = w + (k / 2) * (2 * kB) + j * 2;
        const float* xk = x + r * ldx + k;
        acc = acc + Bf16ToFloat(pair[0]) * xk[0] + Bf16ToFloat(pair[1]) * xk[1];
      }
      float& out = y[r * ldy + j];
      out = beta == 0.0f ? acc : acc + beta * out;
    }
  }
}

#if defined(__x86_64__)

// Bytes ahead of the stream each block's loop fetches (one line per 64 bytes read).
constexpr int64_t kAhead = 4096;

template <int R>
FOLIO_T_AVX512 FOLIO_INLINE void Zero(__m512 (&acc)[R][4]) {
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  }
}

// Fetches the line kAhead bytes past each of the 4 lines of a pair of k's weights.
FOLIO_T_AVX512 FOLIO_INLINE void FetchAhead(const uint16_t* wp) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(wp) + kAhead + 64 * j, _MM_HINT_T0);
  }
}

template <int R>
FOLIO_T_AVX512 FOLIO_INLINE void Store(const __m512 (&acc)[R][4], float beta, float* y,
                                       int64_t ldy, int64_t n) {
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int64_t left = n - 16 * j;
      if (left <= 0) break;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      float* p = y + r * ldy + 16 * j;
      __m512 v = acc[r][j];
      if (beta != 0.0f) {
        v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p), _mm512_set1_ps(beta), v);
      }
      _mm512_mask_storeu_ps(p, m, v);
    }
  }
}

// bf16 x: one vdpbf16ps per 16 outputs and pair of k.
template <int R>
FOLIO_T_AVX512BF16 void BlockBf16Dp(const uint16_t* w, int64_t in_padded, const void* xv,
                                    int64_t ldx, float beta, float* y, int64_t ldy, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(xv);
  __m512 acc[R][4];
  Zero<R>(acc);
  const int64_t pairs = in_padded / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wp = w + p * (2 * kB);
    FetchAhead(wp);
    __m512i wv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) wv[j] = _mm512_loadu_si512(wp + 32 * j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      uint32_t bits;
      std::memcpy(&bits, x + r * ldx + 2 * p, sizeof(bits));
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(bits));
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], xb);
    }
  }
  Store<R>(acc, beta, y, ldy, n);
}

// f32 x: each pair's even value widened by a shift, its odd one by a mask.
template <int R>
FOLIO_T_AVX512 void BlockAvx512(const uint16_t* w, int64_t in_padded, const void* xv,
                                int64_t ldx, float beta, float* y, int64_t ldy, int64_t n) {
  const float* x = static_cast<const float*>(xv);
  __m512 acc[R][4];
  Zero<R>(acc);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const int64_t pairs = in_padded / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wp = w + p * (2 * kB);
    FetchAhead(wp);
    __m512 even[4], odd[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(wp + 32 * j);
      even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[j] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 x0 = _mm512_set1_ps(x[r * ldx + 2 * p]);
      const __m512 x1 = _mm512_set1_ps(x[r * ldx + 2 * p + 1]);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        acc[r][j] = _mm512_fmadd_ps(odd[j], x1, _mm512_fmadd_ps(even[j], x0, acc[r][j]));
      }
    }
  }
  Store<R>(acc, beta, y, ldy, n);
}

#endif  // __x86_64__

const BlockFn* Blocks(BlockedBf16Path path) {
  static constexpr BlockFn portable[] = {BlockPortable<1>, BlockPortable<2>, BlockPortable<3>,
                                         BlockPortable<4>};
#if defined(__x86_64__)
  static constexpr BlockFn avx512[] = {BlockAvx512<1>, BlockAvx512<2>, BlockAvx512<3>,
                                       BlockAvx512<4>};
  static constexpr BlockFn bf16[] = {BlockBf16Dp<1>, BlockBf16Dp<2>, BlockBf16Dp<3>,
                                     BlockBf16Dp<4>};
  if (path == BlockedBf16Path::kAvx512) return avx512;
  if (path == BlockedBf16Path::kAvx512Bf16) return bf16;
#endif
  return portable;
}

}  // namespace

BlockedBf16Matrix::BlockedBf16Matrix(int64_t out, int64_t in,
                                     const std::function<void(int64_t row, float* dst)>& row)
    : out_(out), in_(in), in_padded_((in + kBlockIn - 1) / kBlockIn * kBlockIn) {
  CHECK_GE(out, 0);
  CHECK_GE(in, 0);
  size_ = out_padded() * in_padded_;
  data_ = MakeHugePaged<uint16_t>(static_cast<size_t>(size_), 64);
  CHECK(data_ != nullptr) << "cannot allocate " << size_bytes() << " bytes of bf16 weights";
  std::vector<float> src(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    row(o, src.data());
    for (int64_t k = 0; k < in; ++k) {
      uint32_t bits;
      std::memcpy(&bits, &src[k], sizeof(bits));
      CHECK((bits & 0xFFFFu) == 0 || std::isnan(src[k])) << "row " << o << " is not bf16";
      data_[Offset(o, k)] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

void BlockedBf16Matrix::RowToF32(int64_t o, float* dst) const {
  CHECK_GE(o, 0);
  CHECK_LT(o, out_);
  for (int64_t k = 0; k < in_; ++k) dst[k] = Bf16ToFloat(data_[Offset(o, k)]);
}

const char* BlockedBf16PathName(BlockedBf16Path path) {
  switch (path) {
    case BlockedBf16Path::kPortable:
      return "portable";
    case BlockedBf16Path::kAvx512:
      return "avx512";
    case BlockedBf16Path::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "?";
}

BlockedBf16Path BestBlockedBf16Path(const CpuFeatures& features) {
#if defined(__x86_64__)
  if (features.avx512_bf16) return BlockedBf16Path::kAvx512Bf16;
  if (features.avx512) return BlockedBf16Path::kAvx512;
#endif
  (void)features;
  return BlockedBf16Path::kPortable;
}

bool BlockedBf16PathRuns(BlockedBf16Path path) {
#if defined(__x86_64__)
  const CpuFeatures& f = DetectedCpuFeatures();
  switch (path) {
    case BlockedBf16Path::kPortable:
      return true;
    case BlockedBf16Path::kAvx512:
      return f.avx512;
    case BlockedBf16Path::kAvx512Bf16:
      return f.avx512_bf16;
  }
  return false;
#else
  return path == BlockedBf16Path::kPortable;
#endif
}

void BlockedBf16Linear(const float* x, int64_t ldx, int64_t rows, const BlockedBf16Matrix& w,
                       float beta, float* y, int64_t ldy, BlockedBf16Path path,
                       ThreadPool* pool) {
  if (rows <= 0 || w.out() <= 0) return;
  CHECK(BlockedBf16PathRuns(path)) << "this CPU cannot run the blocked bf16 path "
                                   << BlockedBf16PathName(path);
  // The activations once, padded with zeros to in_padded: bf16 for vdpbf16ps, else f32.
  const int64_t in = w.in(), ldb = w.in_padded();
  thread_local std::vector<uint16_t> xb;
  thread_local std::vector<float> xf;
  const void* xs;
  int64_t elem;
  if (path == BlockedBf16Path::kAvx512Bf16) {
    xb.assign(static_cast<size_t>(rows * ldb), 0);
    for (int64_t r = 0; r < rows; ++r) typed::RoundToBf16(x + r * ldx, in, xb.data() + r * ldb);
    xs = xb.data();
    elem = sizeof(uint16_t);
  } else {
    xf.assign(static_cast<size_t>(rows * ldb), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(xf.data() + r * ldb, x + r * ldx, static_cast<size_t>(in) * sizeof(float));
    }
    xs = xf.data();
    elem = sizeof(float);
  }
  const BlockFn* fns = Blocks(path);
  const int64_t blocks = w.num_blocks();
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // A few ranges of blocks per thread, claimed dynamically (a busy core evens out).
  const int64_t grain = std::max<int64_t>(1, (blocks + 4 * threads - 1) / (4 * threads));
  ParallelFor(threads == 1 ? nullptr : pool, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const uint16_t* wb = w.data() + b * w.in_padded() * kB;
      const int64_t n = std::min(kB, w.out() - b * kB);
      // Row groups inside the block: the block's weights (in_padded x 128 bytes) are read
      // from memory by the first group and from cache by the others.
      for (int64_t r = 0; r < rows; r += kMaxRows) {
        const int64_t g = std::min<int64_t>(kMaxRows, rows - r);
        const void* xr = static_cast<const uint8_t*>(xs) + r * ldb * elem;
        fns[g - 1](wb, w.in_padded(), xr, ldb, beta, y + r * ldy + b * kB, ldy, n);
      }
    }
  });
}

}  // namespace folio::worker::kernels

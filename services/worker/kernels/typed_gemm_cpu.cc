#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/typed_gemm.h"

namespace folio::worker::kernels {
namespace {

// Output features dequantized per batch on the generic path: with in = 4096 that is
// 64 KiB per feature, 512 KiB a thread, about what L2 holds.
constexpr int64_t kRowsPerChunk = 8;
// Weight rows a typed kernel runs over before the next group of token rows: 16 rows of
// 4096 f16 values are 128 KiB, so a prefill re-reads them from L2, not memory.
constexpr int64_t kKernelRowsPerChunk = 16;
// Token rows from which a step's activations are quantized on the pool (fewer: on the
// caller, where a pool hand-off would cost more than the rows).
constexpr int64_t kParallelQuantRows = 4;

// Dot product with 8 independent partial sums (vectorisable), added in a fixed order.
float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  }
  for (int j = 0; k < n; ++k, ++j) acc[j] += a[k] * b[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Pieces a matmul's output rows are cut into per pool thread: $FOLIO_TYPED_PIECES (1 is
// one contiguous half a thread on 2 threads, the split before 2026-12-01), else 4.
int64_t PiecesPerThread() {
  static const int64_t n = [] {
    const char* e = std::getenv("FOLIO_TYPED_PIECES");
    return e == nullptr || *e == '\0' ? int64_t{4} : std::clamp<int64_t>(std::atoll(e), 1, 64);
  }();
  return n;
}

inline void Store(float d, float beta, float* y) { *y = beta == 0.0f ? d : d + beta * *y; }

// Weight rows [j0, j0 + jn) against token rows [r0, r0 + nr) by dot[] (nr <= kMaxDotRows
// at a time).
void RunDots(const typed::DotKernel& kernel, const uint8_t* w, int64_t stride, int64_t j0,
             int64_t jn, const typed::Activations& x, int64_t r0, int64_t nr, float beta,
             float* y, int64_t ldy) {
  float d[typed::kMaxDotRows];
  for (int64_t q0 = r0; q0 < r0 + nr; q0 += typed::kMaxDotRows) {
    const int64_t qn = std::min<int64_t>(typed::kMaxDotRows, r0 + nr - q0);
    const typed::DotFn dot = kernel.dot[qn - 1];
    for (int64_t j = j0; j < j0 + jn; ++j) {
      dot(w + j * stride, x, q0, d);
      for (int64_t i = 0; i < qn; ++i) Store(d[i], beta, y + (q0 + i) * ldy + j);
    }
  }
}

// Rows [0, n) of a segment (starting at w) through `kernel`, into y's columns [0, n): a
// chunk of weight rows at a time (kept in L2) against every group of token rows, by the
// kernel's tiles where it has them (whole tiles of tile_w rows; k-blocked ones, ktile,
// column block by column block) and dot[] otherwise. Measured (docs/benchmarks.md, issue
// 20/21 tiles): blocking the token rows so their activations stay in L2 while every
// weight row of the range meets them (then the weights are re-read once per block)
// gained nothing at M = 32 / 128 on the 1.1B shape, so all token rows meet each chunk.
void RunKernel(const typed::DotKernel& kernel, const uint8_t* w, int64_t stride, int64_t n,
               const typed::Activations& x, int64_t rows, float beta, float* y, int64_t ldy) {
  const int64_t tw = rows > kernel.tile_min_rows ? kernel.tile_w : 0;
  DCHECK(tw == 0 || (tw <= 16 && kKernelRowsPerChunk % tw == 0)) << tw;
  const int64_t group = tw > 0 ? typed::kMaxTileRows : typed::kMaxDotRows;
  float d[kKernelRowsPerChunk * typed::kMaxTileRows];
  // The sums of a chunk's k-blocked tiles between blocks (16 KiB).
  alignas(64) float state[kKernelRowsPerChunk * typed::kTileStateFloatsPerRow];
  const int64_t kb = kernel.k_block;
  const bool k_blocked = tw > 0 && kb > 0 && x.in > kb;
  DCHECK(!k_blocked || kb % kernel.k_step == 0) << kb << " " << kernel.k_step;
  for (int64_t j0 = 0; j0 < n; j0 += kKernelRowsPerChunk) {
    const int64_t jn = std::min(kKernelRowsPerChunk, n - j0);
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
      const int64_t nr = std::min<int64_t>(group, rows - r0);
      const typed::TileFn tile = tw > 0 ? kernel.tile[nr - 1] : nullptr;
      const typed::TileKFn ktile = k_blocked ? kernel.ktile[nr - 1] : nullptr;
      int64_t j = j0;
      if (ktile != nullptr) {
        // Column blocks outermost: a block of the nr token rows stays in L1 while it meets
        // every weight row of the chunk.
        const int64_t tiles = jn / tw;
        for (int64_t k0 = 0; k0 < x.in; k0 += kb) {
          const int64_t k1 = std::min(x.in, k0 + kb);
          for (int64_t t = 0; t < tiles; ++t) {
            ktile(w + (j0 + t * tw) * stride, stride, x, r0, k0, k1,
                  state + t * tw * typed::kTileStateFloatsPerRow,
                  d + t * tw * typed::kMaxTileRows);
          }
        }
        for (int64_t jj = 0; jj < tiles * tw; ++jj) {
          for (int64_t i = 0; i < nr; ++i) {
            Store(d[jj * typed::kMaxTileRows + i], beta, y + (r0 + i) * ldy + j0 + jj);
          }
        }
        j = j0 + tiles * tw;
      } else if (tile != nullptr) {
        // The chunk's tiles into d, then each token row's outputs stored as one run: storing
        // each tile's columns straight into y (rows ldy apart, 64 KiB for a 16384-wide
        // output, so all in one L1 set) took 8% of a 1.1B prefill's CPU time in perf.
        const int64_t tiles = jn / tw;
        for (int64_t t = 0; t < tiles; ++t) {
          tile(w + (j0 + t * tw) * stride, stride, x, r0, d + t * tw * typed::kMaxTileRows);
        }
        for (int64_t i = 0; i < nr; ++i) {
          float* yr = y + (r0 + i) * ldy + j0;
          if (beta == 0.0f) {
            for (int64_t jj = 0; jj < tiles * tw; ++jj) yr[jj] = d[jj * typed::kMaxTileRows + i];
          } else {
            for (int64_t jj = 0; jj < tiles * tw; ++jj) {
              Store(d[jj * typed::kMaxTileRows + i], beta, yr + jj);
            }
          }
        }
        j = j0 + tiles * tw;
      }
      if (j < j0 + jn) RunDots(kernel, w, stride, j, j0 + jn - j, x, r0, nr, beta, y, ldy);
    }
  }
}

// Rows [lo, hi) of segment `seg` (whose row 0 is output feature `first`) through the
// dequantize-then-dot path.
void RunDequantized(const TypedMatrix& w, int64_t lo, int64_t hi, const float* x, int64_t ldx,
                    int64_t rows, float beta, float* y, int64_t ldy) {
  const int64_t in = w.in();
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < kRowsPerChunk * in) buf.resize(kRowsPerChunk * in);
  for (int64_t o0 = lo; o0 < hi; o0 += kRowsPerChunk) {
    const int64_t n = std::min(kRowsPerChunk, hi - o0);
    for (int64_t j = 0; j < n; ++j) w.RowToF32(o0 + j, buf.data() + j * in);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * ldx;
      float* yr = y + r * ldy + o0;
      for (int64_t j = 0; j < n; ++j) Store(Dot(xr, buf.data() + j * in, in), beta, yr + j);
    }
  }
}

// `k` with dot[] alone (no register tiles).
void DropTiles(typed::DotKernel* k) {
  for (typed::TileFn& t : k->tile) t = nullptr;
  for (typed::TileKFn& t : k->ktile) t = nullptr;
  k->tile_w = 0;
}

// TypedLinear with segment s running kernels[s] (!ok(): the dequantize path).
void Run(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta, float* y,
         int64_t ldy, ThreadPool* pool, const std::vector<typed::DotKernel>& kernels) {
  const int64_t in = w.in();
  const int64_t out = w.out();
  if (rows <= 0 || out <= 0) return;
  typed::Activations acts;
  acts.in = in;
  acts.f32 = x;
  acts.ldx = ldx;
  bool bf16 = false, q8 = false, q8k = false, q8c = false, q4x = false;
  for (const typed::DotKernel& k : kernels) {
    bf16 |= k.ok() && k.needs_bf16;
    q8 |= k.ok() && k.needs_q8;
    q8c |= k.ok() && k.needs_q8 && k.needs_q8_c;
    q4x |= k.ok() && k.needs_q8 && k.needs_q4x;
    q8k |= k.ok() && k.needs_q8k;
  }
  // The caller's (the step thread's) buffers, read by every thread of this call.
  thread_local std::vector<uint16_t> x_bf16;
  thread_local std::vector<int8_t> x_q8;
  thread_local std::vector<float> x_q8_d, x_q8_s, x_k8_d;
  thread_local std::vector<int32_t> x_q8_c, x_q4x_off;
  thread_local std::vector<int8_t> x_q4x;
  thread_local std::vector<float> x_q4x_d;
  thread_local std::vector<int8_t> x_k8;
  thread_local std::vector<int16_t> x_k8_bsums;
  if (bf16) {
    if (static_cast<int64_t>(x_bf16.size()) < rows * in) x_bf16.resize(rows * in);
    for (int64_t r = 0; r < rows; ++r) typed::RoundToBf16(x + r * ldx, in, x_bf16.data() + r * in);
    acts.bf16 = x_bf16.data();
  }
  if (q8) {
    CHECK_EQ(in % typed::kQ8Block, 0);
    if (static_cast<int64_t>(x_q8.size()) < rows * in) x_q8.resize(rows * in);
    const int64_t blocks = in / typed::kQ8Block;
    if (static_cast<int64_t>(x_q8_d.size()) < rows * blocks) x_q8_d.resize(rows * blocks);
    if (static_cast<int64_t>(x_q8_s.size()) < rows * blocks) x_q8_s.resize(rows * blocks);
    // Per row, so splitting the rows over the pool gives the same bytes (it was serial on
    // the step thread: 3-4% of a 1.1B Q8_0 prefill's CPU time with the other thread idle).
    // (Pointers, not the thread_local vectors: in the lambda those would be each pool
    // thread's own.)
    // The VNNI kernels' corrections (-128 x each 4 quants' sum) in the same per-row pass.
    if (q8c && static_cast<int64_t>(x_q8_c.size()) < rows * in / 4) x_q8_c.resize(rows * in / 4);
    int8_t* q = x_q8.data();
    float* qd = x_q8_d.data();
    float* qs = x_q8_s.data();
    int32_t* qc = q8c ? x_q8_c.data() : nullptr;
    // The q4_0 kernels' reordered form, in the same pass.
    if (q4x) {
      if (static_cast<int64_t>(x_q4x.size()) < rows * in) x_q4x.resize(rows * in);
      if (static_cast<int64_t>(x_q4x_d.size()) < rows * in / 8) x_q4x_d.resize(rows * in / 8);
      if (static_cast<int64_t>(x_q4x_off.size()) < rows * in / 8) x_q4x_off.resize(rows * in / 8);
    }
    int8_t* q4 = q4x ? x_q4x.data() : nullptr;
    float* q4d = q4x ? x_q4x_d.data() : nullptr;
    int32_t* q4o = q4x ? x_q4x_off.data() : nullptr;
    ThreadPool* qpool = rows >= kParallelQuantRows ? pool : nullptr;
    ParallelFor(qpool, rows, 1, [&](int64_t r_begin, int64_t r_end) {
      for (int64_t r = r_begin; r < r_end; ++r) {
        typed::QuantizeQ8_0(x + r * ldx, in, q + r * in, qd + r * blocks, qs + r * blocks);
        if (qc != nullptr) typed::Q8Corrections(q + r * in, in, qc + r * (in / 4));
        if (q4 != nullptr) {
          typed::Q4_0Activations(q + r * in, qd + r * blocks, in, q4 + r * in,
                                 q4d + r * (in / 8), q4o + r * (in / 8));
        }
      }
    });
    acts.q8 = x_q8.data();
    acts.q8_d = x_q8_d.data();
    acts.q8_s = x_q8_s.data();
    acts.q8_c = qc;
    acts.q4x = q4;
    acts.q4x_d = q4d;
    acts.q4x_off = q4o;
  }
  if (q8k) {
    CHECK_EQ(in % typed::kQ8KBlock, 0);
    const int64_t blocks = in / typed::kQ8KBlock;
    if (static_cast<int64_t>(x_k8.size()) < rows * in) x_k8.resize(rows * in);
    if (static_cast<int64_t>(x_k8_d.size()) < rows * blocks) x_k8_d.resize(rows * blocks);
    if (static_cast<int64_t>(x_k8_bsums.size()) < rows * in / 16) x_k8_bsums.resize(rows * in / 16);
    int8_t* q = x_k8.data();
    float* qd = x_k8_d.data();
    int16_t* bsums = x_k8_bsums.data();
    ThreadPool* qpool = rows >= kParallelQuantRows ? pool : nullptr;
    ParallelFor(qpool, rows, 1, [&](int64_t r_begin, int64_t r_end) {
      for (int64_t r = r_begin; r < r_end; ++r) {
        typed::QuantizeQ8_K(x + r * ldx, in, q + r * in, qd + r * blocks, bsums + r * (in / 16));
      }
    });
    acts.k8 = x_k8.data();
    acts.k8_d = x_k8_d.data();
    acts.k8_bsums = x_k8_bsums.data();
  }
  // Contiguous ranges of output features, PiecesPerThread() a thread (fewer for a small
  // matrix: 16 rows at least), claimed in order by whichever thread is free: a worker
  // woken late, or a core another process holds a while, leaves its share to the others
  // instead of the whole loop waiting on its half. Each output is computed the same way
  // on any thread, so the split never changes a result.
  const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t pieces = std::max<int64_t>(
      1, std::min<int64_t>(threads == 1 ? 1 : threads * PiecesPerThread(), out / 16));
  const std::vector<TypedRows>& segs = w.segments();
  ParallelFor(pool, pieces, 1, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t lo = out * p / pieces, hi = out * (p + 1) / pieces;
      int64_t first = 0;
      for (size_t s = 0; s < segs.size(); first += segs[s].rows, ++s) {
        const int64_t a = std::max(lo, first), b = std::min(hi, first + segs[s].rows);
        if (a >= b) continue;
        if (kernels[s].ok()) {
          RunKernel(kernels[s], segs[s].data + (a - first) * segs[s].row_stride_bytes,
                    segs[s].row_stride_bytes, b - a, acts, rows, beta, y + a, ldy);
        } else {
          RunDequantized(w, a, b, x, ldx, rows, beta, y, ldy);
        }
      }
    }
  });
}

}  // namespace

const char* StoredKindName(StoredKind kind) {
  switch (kind) {
    case StoredKind::kOther:
      return "other";
    case StoredKind::kF16:
      return "f16";
    case StoredKind::kBF16:
      return "bf16";
    case StoredKind::kQ8_0:
      return "q8_0";
    case StoredKind::kQ4_0:
      return "q4_0";
    case StoredKind::kQ4_1:
      return "q4_1";
    case StoredKind::kQ5_0:
      return "q5_0";
    case StoredKind::kQ5_1:
      return "q5_1";
    case StoredKind::kQ4_K:
      return "q4_K";
    case StoredKind::kQ5_K:
      return "q5_K";
    case StoredKind::kQ6_K:
      return "q6_K";
  }
  return "unknown";
}

std::vector<SimdPath> TypedPathsOf(StoredKind kind) {
  switch (kind) {
    case StoredKind::kOther:
      return {SimdPath::kPortable};
    case StoredKind::kF16:
      return {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512};
    case StoredKind::kBF16:
      return {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512, SimdPath::kAvx512Bf16};
    case StoredKind::kQ8_0:
      return {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvxVnni, SimdPath::kAvx512Vnni};
    case StoredKind::kQ4_0:
    case StoredKind::kQ4_1:
    case StoredKind::kQ5_0:
    case StoredKind::kQ5_1:
    case StoredKind::kQ4_K:
    case StoredKind::kQ5_K:
    case StoredKind::kQ6_K:
      return {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512, SimdPath::kAvx512Vnni};
  }
  return {SimdPath::kPortable};
}

SimdPath TypedPathFor(StoredKind kind, const CpuFeatures& features) {
  SimdPath best = SimdPath::kPortable;
  for (SimdPath p : TypedPathsOf(kind)) {
    if (MissingFeature(p, features) == nullptr) best = p;
  }
  return best;
}

void TypedMatrix::Append(const TypedRows& rows) {
  CHECK(rows.dequantize != nullptr);
  CHECK_GT(rows.block_values, 0);
  CHECK_EQ(in_ % rows.block_values, 0) << "a " << rows.type_name << " row of " << in_
                                        << " values is not whole blocks";
  if (rows.kind == StoredKind::kQ8_0 || rows.kind == StoredKind::kQ4_0 ||
      rows.kind == StoredKind::kQ4_1 || rows.kind == StoredKind::kQ5_0 ||
      rows.kind == StoredKind::kQ5_1) {
    CHECK_EQ(rows.block_values, typed::kQ8Block) << rows.type_name;
  }
  if (rows.kind == StoredKind::kQ4_K || rows.kind == StoredKind::kQ5_K ||
      rows.kind == StoredKind::kQ6_K) {
    CHECK_EQ(rows.block_values, typed::kQ8KBlock) << rows.type_name;
  }
  first_row_.push_back(out_);
  segments_.push_back(rows);
  out_ += rows.rows;
}

void TypedMatrix::RowToF32(int64_t row, float* out) const {
  CHECK_GE(row, 0);
  CHECK_LT(row, out_);
  const size_t s = static_cast<size_t>(
      std::upper_bound(first_row_.begin(), first_row_.end(), row) - first_row_.begin() - 1);
  const TypedRows& seg = segments_[s];
  seg.dequantize(seg.data + (row - first_row_[s]) * seg.row_stride_bytes, in_ / seg.block_values,
                 out);
}

void TypedLinear(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta,
                 float* y, int64_t ldy, ThreadPool* pool, const CpuFeatures& features) {
  static const bool tiles = [] {
    const char* e = std::getenv("FOLIO_TYPED_TILES");
    return e == nullptr || std::string(e) != "0";
  }();
  std::vector<typed::DotKernel> kernels;
  for (const TypedRows& s : w.segments()) {
    kernels.push_back(s.kind == StoredKind::kOther
                          ? typed::DotKernel{}
                          : typed::KernelFor(s.kind, TypedPathFor(s.kind, features)));
    if (!tiles) DropTiles(&kernels.back());
  }
  Run(x, ldx, rows, w, beta, y, ldy, pool, kernels);
}

void TypedLinear(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta,
                 float* y, int64_t ldy, ThreadPool* pool) {
  TypedLinear(x, ldx, rows, w, beta, y, ldy, pool, EnabledCpuFeatures());
}

void TypedLinearOnPath(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w,
                       float beta, float* y, int64_t ldy, ThreadPool* pool, SimdPath path,
                       bool tiles) {
  const char* missing = MissingFeature(path, DetectedCpuFeatures());
  CHECK(missing == nullptr) << "path " << SimdPathName(path) << " needs " << missing;
  std::vector<typed::DotKernel> kernels;
  for (const TypedRows& s : w.segments()) {
    if (s.kind == StoredKind::kOther) {
      kernels.emplace_back();
      continue;
    }
    typed::DotKernel k = typed::KernelFor(s.kind, path);
    if (!k.ok()) k = typed::PortableKernel(s.kind);
    if (!tiles) DropTiles(&k);
    kernels.push_back(k);
  }
  Run(x, ldx, rows, w, beta, y, ldy, pool, kernels);
}

}  // namespace folio::worker::kernels

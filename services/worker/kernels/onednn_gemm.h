// Batched bf16 matmuls by oneDNN (Debian's libdnnl 2.6) on bf16 weights as stored: the
// path the CPU runner takes for BF16 projections at M >= a threshold of token rows
// (prefill chunks, batched decode), where oneDNN's blocked GEMM (vdpbf16ps / AMX,
// reusing each weight tile across all rows) measured 1.2-2.4x Folio's bf16 kernels
// (docs/benchmarks.md, issue 21). Folio's own kernels (typed_gemm.h) stay the fallback
// and the path for fewer rows.
//
// Weights: the runner blocks a BF16 projection's rows once, at load, into oneDNN's own
// layout where oneDNN picks that layout (BlockedBf16Matrix, blocked_bf16.h): LinearBlocked
// reads it as it is, Folio's GEMV reads the same copy for a few rows, and the file's pages
// are released. Otherwise an OnednnBf16Matrix is a plan over a TypedMatrix whose segments
// are all bf16 rows (plain [out, in] rows, any row stride: a row-parallel shard starts
// mid-row). Each run of segments that lie back to back in memory (Q, K, V of one layer
// usually do) is one oneDNN weights matrix read in place, as the [in, out] matrix with
// strides {1, ld}: no copy, no reorder, nothing resident beyond the file's pages (oneDNN
// then copies each weight block into its layout on every call).
//
// Activations: x (f32) is rounded to bf16 (round to nearest even, by a cached oneDNN
// reorder) into a per-thread buffer, as Folio's avx512_bf16 kernel and llama.cpp do for
// bf16 weights. The sums run in oneDNN's order, so results differ from TypedLinear's in
// the last bits and are not batch-invariant across the threshold: a row computed in a
// step of M >= threshold rows is not bit-identical to the same row computed alone.
//
// Threads: libdnnl runs on the OpenMP runtime (libgomp). Each call sets the calling
// thread's OpenMP thread count to this object's `threads` (omp_set_num_threads affects
// only the calling thread's parallel regions, so TP ranks in one process each keep
// theirs). libgomp reads OMP_WAIT_POLICY once, when it loads, before main: unless it is
// "passive", its idle threads spin after every call beside Folio's pool and the other
// services. folio-worker re-executes itself with OMP_WAIT_POLICY=passive when it is unset
// (services/worker/main.cc); OpenMpWaitPolicy() says what this process runs with.
//
// Other stored types (any TypedMatrix; the runner sends q8_0 and the 4/5/6-bit blocks:
// LinearDequantized) go through the
// same bf16 matmul a chunk of output rows at a time: each thread of Folio's pool
// dequantizes a chunk (RowsToBf16: gguf-py-exact values rounded to bf16) into
// its own buffer of about kDequantChunkBytes (about a core's L2) and multiplies
// it with a one-thread oneDNN matmul, so a weight is read from memory once per call and
// nothing beyond one chunk per thread is resident. Worth it when the rows share the
// dequantization: at 32 rows and more (a prefill chunk, batched decode) the weights'
// products outweigh it (docs/benchmarks.md, issue 21 "dequantized to bf16").
//
// Thread-safety: an OnednnGemm may be used from several threads at once. Primitives are
// created once per (rows, in, out, ld, ldy, beta) and cached behind a mutex (execution
// is outside it); each call uses the calling thread's own activation and scratchpad
// buffers. Built only when CMake finds oneDNN: otherwise Create() says so and
// OnednnAvailable() is false (onednn_gemm_absent.cc).
#ifndef FOLIO_SERVICES_WORKER_KERNELS_ONEDNN_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_ONEDNN_GEMM_H_

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/kernels/blocked_bf16.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/kernels/typed_gemm.h"

namespace folio::worker::kernels {

// Bytes of bf16 weights one thread of LinearDequantized dequantizes at a time (whole
// rows, a multiple of 16 rows, at least 16). 1 MiB measured best of 256 KiB - 16 MiB on
// the 1.1B shape (docs/benchmarks.md, issue 21 "dequantized to bf16");
// $FOLIO_DEQUANT_CHUNK_KIB, read once, overrides it (for measuring).
inline constexpr int64_t kDequantChunkBytes = int64_t{1} << 20;

// True when this binary was built with oneDNN.
bool OnednnAvailable();

// "passive", "active", or "unset": OMP_WAIT_POLICY as this process's environment has it
// (libgomp read it at load).
inline std::string OpenMpWaitPolicy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  if (p == nullptr) return "unset";
  std::string s(p);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A bf16 TypedMatrix as oneDNN weights: runs of back-to-back segments (a value type; it
// points into the TypedMatrix's memory, which must outlive it).
struct OnednnBf16Matrix {
  struct Part {
    const uint16_t* data = nullptr;  // row 0, first column
    int64_t ld = 0;                  // elements from one row to the next
    int64_t rows = 0;                // output features
    int64_t first_row = 0;           // output feature of row 0
  };
  int64_t in = 0;
  int64_t out = 0;
  std::vector<Part> parts;

  bool empty() const { return parts.empty(); }
  // The plan for `w` when every segment is bf16 (empty otherwise).
  static OnednnBf16Matrix Of(const TypedMatrix& w);
};

class OnednnGemm {
 public:
  // threads: the OpenMP threads each call runs on (the runner's --threads); >= 1.
  // Unimplemented when built without oneDNN; FailedPrecondition when oneDNN cannot run
  // a bf16 matmul on this CPU (it needs avx512_core at least: the message names the ISA).
  static absl::StatusOr<std::unique_ptr<OnednnGemm>> Create(int32_t threads);
  virtual ~OnednnGemm() = default;

  // y = x . W^T + beta * y for x [rows, w.in] f32 (row stride ldx), y [rows, w.out] f32
  // (row stride ldy); beta = 0 never reads y. w must not be empty. False (logged, y
  // untouched) when oneDNN refuses a primitive for this shape: the caller then runs
  // Folio's kernels.
  virtual bool Linear(const float* x, int64_t ldx, int64_t rows, const OnednnBf16Matrix& w,
                      float beta, float* y, int64_t ldy) = 0;

  // Whether oneDNN's bf16 matmul, left to choose, keeps the weights of an [in] -> [out]
  // matrix in BlockedBf16Matrix's layout on this CPU (BA16a64b2a, with its padding): then
  // a BlockedBf16Matrix is its weights as they are (LinearBlocked). False when oneDNN picks
  // another layout or refuses the shape. Asked of oneDNN once per shape.
  virtual bool BlockedLayoutMatches(int64_t in, int64_t out) = 0;
  // y = x . W^T + beta * y as Linear, on weights in that layout (BlockedLayoutMatches must
  // have said yes for w's shape). False (logged, y untouched) when oneDNN refuses it.
  virtual bool LinearBlocked(const float* x, int64_t ldx, int64_t rows,
                             const BlockedBf16Matrix& w, float beta, float* y,
                             int64_t ldy) = 0;

  // y = x . W^T + beta * y as Linear, for a TypedMatrix of any stored type, dequantized
  // to bf16 by chunks of output rows on `pool`'s threads (null: the caller alone), each
  // chunk multiplied by a one-thread oneDNN matmul; a chunk that lies whole in a q4_K or
  // q6_K segment runs GemmQ4K / GemmQ6K on q8_K activations instead where the CPU has
  // them (kquant_gemm.h; FOLIO_KQUANT_GEMM=0 turns that off). False (logged, y
  // untouched) when oneDNN refuses the shape.
  virtual bool LinearDequantized(const float* x, int64_t ldx, int64_t rows,
                                 const TypedMatrix& w, float beta, float* y, int64_t ldy,
                                 ThreadPool* pool) = 0;

  // The implementation oneDNN picked for the first matmul created (e.g.
  // "brg:avx512_core_bf16"), empty before that; and how many primitives are cached.
  virtual std::string impl() const = 0;
  virtual int64_t cached_primitives() const = 0;
  virtual int32_t threads() const = 0;
};

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_ONEDNN_GEMM_H_

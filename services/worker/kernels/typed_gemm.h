// Linear layers on weights kept in their stored type (f16, bf16, the ggml block
// quantizations), read in place from the memory-mapped model file: nothing is widened
// to f32 beyond a small per-thread buffer.
//
// A TypedMatrix is W [out, in] as a list of row segments, each a run of rows of one
// stored tensor (so Q, K and V, or gate and up, form one matrix without a copy), each
// row a run of whole blocks starting at the segment's first column (a row-parallel
// shard starts mid-row, on a block boundary).
//
// Segments of f16, bf16 and q8_0 (TypedRows::kind) run their own kernels, reading the
// stored bytes in place (typed_dot.h): f16/bf16 widened in registers and multiplied into
// f32 sums (AVX2/AVX-512 FMA; vdpbf16ps on bf16-rounded activations with avx512_bf16),
// q8_0 against activations quantized to q8_0 blocks once per call, by integer block dot
// products (AVX2 maddubs, AVX-VNNI / AVX-512 VNNI vpdpbusd) scaled in f32, as llama.cpp
// does; the 4/5/6-bit types (q4_0..q5_1, q4_K, q5_K, q6_K) likewise by integer dots
// against q8_0 or q8_K activation blocks. The path is the best the CPU has (cpu_isa.h's
// EnabledCpuFeatures); tests force each with TypedLinearOnPath. Every other type (q2_K,
// q3_K, f32) dequantizes a few rows of W at a time into a per-thread buffer (the
// segment's `dequantize`) and takes f32 dot products.
//
// Threading: output features are cut into one contiguous range per pool thread (a
// static split by rows; the caller takes part; idle threads block, never spin).
//
// Each output element is one ordered sum over k, whatever the batch size, so results do
// not depend on how many rows a step has. Immutable after construction; TypedLinear is
// thread-safe for disjoint outputs.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_

#include <cstdint>
#include <vector>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

// Dequantizes num_blocks consecutive blocks at src into out[0, num_blocks * block_values).
using BlockDequantizeFn = void (*)(const uint8_t* src, int64_t num_blocks, float* out);

// Stored types with their own matmul kernels; kOther reads through `dequantize`.
//   kF16: IEEE binary16, 2 bytes a value; kBF16: bfloat16, 2 bytes; kQ8_0: ggml's q8_0,
//   blocks of 32 values: f16 scale d then 32 int8 (34 bytes), value = d * q.
//   kQ4_0 .. kQ6_K: ggml's 4/5/6-bit blocks (weight_format.h's formats/ spell out the
//   layouts), read against 8-bit activation blocks: q8_0 for the 32-value types, q8_K
//   (256 values, f32 scale, per-16 sums) for the K-quants.
enum class StoredKind { kOther, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };
const char* StoredKindName(StoredKind kind);

struct TypedRows {
  const uint8_t* data = nullptr;  // row 0 of the segment, at its first column
  int64_t row_stride_bytes = 0;   // from one row to the next
  int64_t rows = 0;
  int32_t block_values = 1;       // values per stored block; `in` is a multiple of it
  BlockDequantizeFn dequantize = nullptr;
  const char* type_name = "";     // for logs and benchmarks
  StoredKind kind = StoredKind::kOther;  // picks a kernel reading `data` as that type
};

class TypedMatrix {
 public:
  TypedMatrix() = default;
  explicit TypedMatrix(int64_t in) : in_(in) {}

  // Appends `rows` as the next output features (CHECKs that in() is whole blocks).
  void Append(const TypedRows& rows);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  const std::vector<TypedRows>& segments() const { return segments_; }
  bool empty() const { return segments_.empty(); }

  // Writes output feature `row`'s in() weights as f32 into out.
  void RowToF32(int64_t row, float* out) const;

 private:
  int64_t in_ = 0;
  int64_t out_ = 0;
  std::vector<TypedRows> segments_;
  std::vector<int64_t> first_row_;  // output feature of each segment's row 0
};

// y = x . W^T + beta * y for x [rows, w.in()] (row stride ldx), y [rows, w.out()] (row
// stride ldy); beta = 0 never reads y. Output features are split over `pool` (null: the
// caller alone). FOLIO_TYPED_TILES=0 in the environment (read once) runs the kernels'
// dot[] alone, without their register tiles (same results; for measuring the tiles).
void TypedLinear(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta,
                 float* y, int64_t ldy, ThreadPool* pool);
// The same with the kernels' paths picked from `features` (NoCpuFeatures(): portable).
void TypedLinear(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta,
                 float* y, int64_t ldy, ThreadPool* pool, const CpuFeatures& features);
// Test hook: segments whose kind has a kernel on `path` use it, the others their portable
// kernel (or `dequantize`). CHECK-fails when this CPU cannot run `path`. tiles = false
// drops the kernels' register tiles (dot[] alone), for tests and benchmarks.
void TypedLinearOnPath(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w,
                       float beta, float* y, int64_t ldy, ThreadPool* pool, SimdPath path,
                       bool tiles = true);

// The paths with a kernel for `kind`, portable first (just portable for kOther).
std::vector<SimdPath> TypedPathsOf(StoredKind kind);
// The path TypedLinear runs `kind` on under `features`: the last of TypedPathsOf(kind)
// that `features` can run.
SimdPath TypedPathFor(StoredKind kind, const CpuFeatures& features);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_

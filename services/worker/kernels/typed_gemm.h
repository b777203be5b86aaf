// Linear layers on weights kept in their stored type (f16, bf16, the ggml block
// quantizations), read in place from the memory-mapped model file: nothing is widened
// to f32 beyond a small per-thread buffer.
//
// A TypedMatrix is W [out, in] as a list of row segments, each a run of rows of one
// stored tensor (so Q, K and V, or gate and up, form one matrix without a copy), each
// row a run of whole blocks starting at the segment's first column (a row-parallel
// shard starts mid-row, on a block boundary). TypedLinear dequantizes a few rows of W at
// a time into a buffer (the segment's `dequantize`, one per stored type) and takes dot
// products with every token row: simple, and bounded in memory. Faster per-type kernels
// (issue 20) replace the dequantize-then-dot step for their type behind the same call.
//
// Each output element is one ordered sum over k, whatever the batch size, so results do
// not depend on how many rows a step has. Immutable after construction; TypedLinear is
// thread-safe for disjoint outputs.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_

#include <cstdint>
#include <vector>

#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

// Dequantizes num_blocks consecutive blocks at src into out[0, num_blocks * block_values).
using BlockDequantizeFn = void (*)(const uint8_t* src, int64_t num_blocks, float* out);

struct TypedRows {
  const uint8_t* data = nullptr;  // row 0 of the segment, at its first column
  int64_t row_stride_bytes = 0;   // from one row to the next
  int64_t rows = 0;
  int32_t block_values = 1;       // values per stored block; `in` is a multiple of it
  BlockDequantizeFn dequantize = nullptr;
  const char* type_name = "";     // for logs and benchmarks
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
// caller alone).
void TypedLinear(const float* x, int64_t ldx, int64_t rows, const TypedMatrix& w, float beta,
                 float* y, int64_t ldy, ThreadPool* pool);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_TYPED_GEMM_H_

#include <algorithm>
#include <vector>

#include "glog/logging.h"
#include "services/worker/kernels/typed_gemm.h"

namespace folio::worker::kernels {
namespace {

// Output features dequantized per batch: with in = 4096 that is 64 KiB per feature,
// 512 KiB a thread, about what L2 holds.
constexpr int64_t kRowsPerChunk = 8;

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

}  // namespace

void TypedMatrix::Append(const TypedRows& rows) {
  CHECK(rows.dequantize != nullptr);
  CHECK_GT(rows.block_values, 0);
  CHECK_EQ(in_ % rows.block_values, 0) << "a " << rows.type_name << " row of " << in_
                                        << " values is not whole blocks";
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
                 float* y, int64_t ldy, ThreadPool* pool) {
  const int64_t in = w.in();
  const int64_t out = w.out();
  if (rows <= 0 || out <= 0) return;
  const int64_t num_chunks = (out + kRowsPerChunk - 1) / kRowsPerChunk;
  ParallelFor(pool, num_chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < kRowsPerChunk * in) buf.resize(kRowsPerChunk * in);
    for (int64_t c = chunk_begin; c < chunk_end; ++c) {
      const int64_t o0 = c * kRowsPerChunk;
      const int64_t n = std::min(kRowsPerChunk, out - o0);
      for (int64_t j = 0; j < n; ++j) w.RowToF32(o0 + j, buf.data() + j * in);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ldx;
        float* yr = y + r * ldy + o0;
        for (int64_t j = 0; j < n; ++j) {
          const float d = Dot(xr, buf.data() + j * in, in);
          yr[j] = beta == 0.0f ? d : d + beta * yr[j];
        }
      }
    }
  });
}

}  // namespace folio::worker::kernels

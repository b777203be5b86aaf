// Linear layers on weights packed once, at load time, for Folio's own GEMM microkernel.
//
// OpenBLAS repacks the weight matrix on every sgemm call; with a step's few token rows
// (decode: one row per sequence) that repacking streams every weight twice and took a
// fifth of a serving run's time. A PackedMatrix stores W [out, in] as panels of
// kPanel = 16 output features, each panel k-major:
//
//   panel p, element (k, j) = W[p * 16 + j, k]      at data[(p * in + k) * 16 + j]
//   (the last panel is zero-padded to 16 features)
//
// (in f16 or bf16, two bytes per weight, when every weight of the matrix is exactly such a
// value, as in a model shipped in F16 or BF16: half the memory traffic, the same products),
// so the microkernel reads one panel front to back, two 8-float vectors per k, and
// multiplies them by up to 6 token rows at once (a 6 x 16 tile of accumulators in
// registers). Each output element is one chain of fused multiply-adds over k in order
// (two, even and odd k, on the AVX-512 16-bit tiles), whatever the batch: results do not
// depend on how many rows a step has.
//
// Immutable after construction; PackedLinear is thread-safe for disjoint outputs.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_PACKED_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_PACKED_GEMM_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

class PackedMatrix {
 public:
  static constexpr int kPanel = 16;

  PackedMatrix() = default;
  // Packs w, row-major [out, in]; in f16 when f16_when_exact and every weight converts to
  // f16 and back unchanged, else in f32.
  PackedMatrix(const float* w, int64_t out, int64_t in, bool f16_when_exact = false);

  // Packs the matrix whose row o row(o, dst) writes as f32 into dst[0, in), one row at a
  // time (no f32 copy of the whole matrix), in `precision`: the rows must then be values
  // of it (e.g. widened from an F16 or a BF16 file: CHECKed).
  enum class Precision { kF32, kF16, kBF16 };
  PackedMatrix(int64_t out, int64_t in, Precision precision,
               const std::function<void(int64_t row, float* dst)>& row);

  // Writes row o of W (in values) as f32 into dst: an embedding lookup on a tied matrix.
  void RowToF32(int64_t o, float* dst) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t num_panels() const { return (out_ + kPanel - 1) / kPanel; }
  Precision precision() const { return precision_; }
  bool is_f16() const { return precision_ == Precision::kF16; }
  bool is_bf16() const { return precision_ == Precision::kBF16; }
  // Panel p's [in][16] weights: in f32 (kF32: panel) or as f16 / bf16 bit patterns
  // (half_panel).
  const float* panel(int64_t p) const { return data_.data() + p * in_ * kPanel; }
  const uint16_t* half_panel(int64_t p) const { return half_.data() + p * in_ * kPanel; }
  int64_t size_bytes() const {
    return static_cast<int64_t>(data_.size() * sizeof(float) + half_.size() * sizeof(uint16_t));
  }

 private:
  int64_t out_ = 0;
  int64_t in_ = 0;
  Precision precision_ = Precision::kF32;
  std::vector<float> data_;     // f32 panels, or empty
  std::vector<uint16_t> half_;  // f16 or bf16 panels, or empty
};

// y = x . W^T + beta * y for x [rows, w.in()] (row stride ldx) and y [rows, w.out()] (row
// stride ldy); beta = 0 never reads y. Work is split over (row block, panel range) items
// on `pool` (null: the caller alone). `isa` picks the AVX2/FMA or the portable kernel;
// f16 and bf16 panels under the AVX2 isa run AVX-512 tiles where EnabledCpuFeatures() has
// AVX-512 (PackedAvx512; FOLIO_PACKED_AVX512=0 keeps the AVX2 tiles, for measuring): each
// output is then the sum of two chains (even and odd k), still the same whatever the batch.
void PackedLinear(const float* x, int64_t ldx, int64_t rows, const PackedMatrix& w, float beta,
                  float* y, int64_t ldy, CpuIsa isa, ThreadPool* pool);
// Whether PackedLinear runs w on the AVX-512 16-bit tiles under `isa`.
bool PackedAvx512(CpuIsa isa, const PackedMatrix& w);
// PackedLinear with that choice made by the caller (tests run both where the CPU can):
// avx512 needs isa kAvx2, f16 or bf16 panels and a CPU with AVX-512 (CHECKed).
void PackedLinearWith(const float* x, int64_t ldx, int64_t rows, const PackedMatrix& w,
                      float beta, float* y, int64_t ldy, CpuIsa isa, bool avx512,
                      ThreadPool* pool);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_PACKED_GEMM_H_

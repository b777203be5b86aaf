#include <cblas.h>

#include <algorithm>

#include "services/worker/kernels/gemm.h"

namespace folio::worker::kernels {

void Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w, int64_t out,
            float beta, float* y, int64_t ldy) {
  if (rows <= 0) return;
  if (rows == 1) {
    // A single row is a matrix-vector product; OpenBLAS's sgemv beats sgemm with M = 1.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(out), static_cast<blasint>(in),
                1.0f, w, static_cast<blasint>(in), x, 1, beta, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
              static_cast<blasint>(out), static_cast<blasint>(in), 1.0f, x,
              static_cast<blasint>(ldx), w, static_cast<blasint>(in), beta, y,
              static_cast<blasint>(ldy));
}

void LinearOnPool(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w,
                  int64_t out, float beta, float* y, int64_t ldy, ThreadPool* pool) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // Slices of whole 16-feature groups keep the GEMM kernels on full vector tiles.
  const int64_t slice = (out / threads + 15) / 16 * 16;
  if (threads == 1 || slice >= out) {
    Linear(x, ldx, rows, in, w, out, beta, y, ldy);
    return;
  }
  const int64_t num_slices = (out + slice - 1) / slice;
  pool->ParallelFor(num_slices, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t o0 = s * slice;
      const int64_t n = std::min(slice, out - o0);
      if (rows == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(in),
                    1.0f, w + o0 * in, static_cast<blasint>(in), x, 1, beta, y + o0, 1);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                    static_cast<blasint>(n), static_cast<blasint>(in), 1.0f, x,
                    static_cast<blasint>(ldx), w + o0 * in, static_cast<blasint>(in), beta,
                    y + o0, static_cast<blasint>(ldy));
      }
    }
  });
}

void SetGemmThreads(int num_threads) { openblas_set_num_threads(num_threads < 1 ? 1 : num_threads); }

}  // namespace folio::worker::kernels

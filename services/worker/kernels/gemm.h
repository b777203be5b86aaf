// Linear layer on OpenBLAS: y = x . w^T (+ beta * y), with w stored row-major
// [out_features, in_features] as model weights are. All tokens of a step form the rows
// of x, so one call runs a projection for the whole batch. Thread-safety: OpenBLAS is
// reentrant; its thread count is a process-wide setting (SetGemmThreads).
#ifndef FOLIO_SERVICES_WORKER_KERNELS_GEMM_H_
#define FOLIO_SERVICES_WORKER_KERNELS_GEMM_H_

#include <cstdint>

#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

// x: [rows, in] (row stride ldx); w: [out, in]; y: [rows, out] (row stride ldy).
// beta = 0 overwrites y; beta = 1 accumulates (residual connections).
void Linear(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w, int64_t out,
            float beta, float* y, int64_t ldy);

// Linear with the output features split across `pool`, each slice one single-threaded
// OpenBLAS call (OpenBLAS's own thread count should then be 1). Keeps every thread of
// a step in one pool, instead of OpenBLAS's threads spinning while the kernels run.
void LinearOnPool(const float* x, int64_t ldx, int64_t rows, int64_t in, const float* w,
                  int64_t out, float beta, float* y, int64_t ldy, ThreadPool* pool);

// Sets OpenBLAS's thread count (process-wide), so its threads and the kernels' pool do
// not oversubscribe the cores.
void SetGemmThreads(int num_threads);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_GEMM_H_

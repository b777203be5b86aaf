#include "services/worker/kernels/thread_pool.h"

#include <algorithm>

namespace folio::worker::kernels {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  while (true) {
    const int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + grain_));
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || generation_ != seen; };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
      // Woken after the caller had run every chunk itself (a busy machine may keep a
      // worker off the CPU that long): nothing left, and the caller is not waiting.
      if (closed_) continue;
      ++busy_workers_;
    }
    RunChunks();
    {
      absl::MutexLock lock(&mu_);
      --busy_workers_;
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_.store(0, std::memory_order_relaxed);
    closed_ = false;
    ++generation_;
  }
  RunChunks();
  // Every chunk is claimed now. Wait only for the workers that joined the loop: one that
  // has not woken yet would find nothing to do.
  absl::MutexLock lock(&mu_);
  closed_ = true;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_workers_ == 0; };
  mu_.Await(absl::Condition(&done));
  fn_ = nullptr;
}

void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    grain = std::max<int64_t>(1, grain);
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  pool->ParallelFor(n, grain, fn);
}

}  // namespace folio::worker::kernels

#include "services/worker/kernels/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace folio::worker::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

bool YieldInSpin() {
  static const bool y = [] {
    const char* e = std::getenv("FOLIO_POOL_SPIN_YIELD");
    return e == nullptr || std::string(e) != "0";
  }();
  return y;
}

// Spins until done() or spin_us have passed; returns done()'s last value.
template <typename Done>
bool SpinFor(int spin_us, Done done) {
  if (done()) return true;
  if (spin_us <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  const bool kYield = YieldInSpin();
  while (true) {
    // The clock is read once per 16 checks (a check is a relaxed load and a pause).
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
    // Polite: on an idle core this returns at once; on one that other threads want
    // (a loaded machine) they run instead of the spin.
    if (kYield) std::this_thread::yield();
  }
}

}  // namespace

int DefaultPoolSpinUs() {
  static const int spin = [] {
    const char* e = std::getenv("FOLIO_POOL_SPIN_US");
    if (e == nullptr || *e == '\0') return kDefaultPoolSpinUs;
    return std::clamp(std::atoi(e), 0, 10000);
  }();
  return spin;
}

ThreadPool::ThreadPool(int num_threads, int spin_us)
    : spin_us_(spin_us < 0 ? DefaultPoolSpinUs() : spin_us) {
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    stopping_.store(true, std::memory_order_release);
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
    // Watch for the next loop a while before blocking (the header says why).
    SpinFor(spin_us_, [&] {
      return published_.load(std::memory_order_acquire) != seen ||
             stopping_.load(std::memory_order_relaxed);
    });
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || generation_ != seen; };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
      // Woken after the caller had run every chunk itself (a busy machine may keep a
      // worker off the CPU that long): nothing left, and the caller is not waiting.
      if (closed_) continue;
      busy_workers_.fetch_add(1, std::memory_order_relaxed);
    }
    RunChunks();
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The last one out: a caller blocked in Await re-checks when mu_ is released.
      absl::MutexLock lock(&mu_);
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
    published_.store(generation_, std::memory_order_release);
  }
  RunChunks();
  // Every chunk is claimed now. Wait only for the workers that joined the loop: one that
  // has not woken yet would find nothing to do.
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  auto done = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!SpinFor(spin_us_, done)) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done));
  }
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

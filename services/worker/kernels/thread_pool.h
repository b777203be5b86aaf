// ThreadPool: a small fixed pool that runs data-parallel loops for the CPU kernels.
//
// The calling thread takes part in every loop, so a pool of N threads starts N - 1
// workers, and waits at the end only for workers that took part: on a busy machine a
// worker woken late finds the loop done and the caller gone on.
//
// Waiting may be a short bounded spin before the block: with spin_us > 0 an idle worker
// watches for the next loop for up to spin_us microseconds (pause instructions, the core
// yielded after every 16 checks, no futex), then blocks in absl::Mutex::Await; the caller
// at the end of a loop watches for the workers' finish the same way. A decode step
// issues about 80 loops with a few microseconds of serial work between them, so a spin
// would skip a futex wake (and, in a VM, an interrupt into a halted vCPU) per loop. Past
// spin_us nothing spins, so an idle pool holds no CPU. Default 100 us: on the quiet
// 2-vCPU machine of issue 20 a loop of two 100 us pieces took 1.57x its ideal time
// blocking at once and 1.02x with the spin (typed_matmul_bench BM_PoolLoop, about 60 us
// of wake-up a loop); under load 7-13 the spin gained nothing measurable and cost CPU time
// (docs/benchmarks.md, issue 20 decode). $FOLIO_POOL_SPIN_US=0 blocks at once (before
// 2026-12-01); the yield keeps a loaded machine's other threads running. Kernels and GEMMs never run at the same time, so each may use all
// cores in turn.
//
// Thread-safety: ParallelFor may be called from one thread at a time (the engine's step
// thread); it is not reentrant. Construction and destruction are not concurrent with it.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_THREAD_POOL_H_
#define FOLIO_SERVICES_WORKER_KERNELS_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace folio::worker::kernels {

// The spin of new pools, in microseconds: $FOLIO_POOL_SPIN_US when set (0 disables the
// spin), else kDefaultPoolSpinUs.
constexpr int kDefaultPoolSpinUs = 100;
int DefaultPoolSpinUs();

class ThreadPool {
 public:
  // num_threads >= 1 counts the caller; values below 1 are treated as 1. spin_us < 0:
  // DefaultPoolSpinUs().
  explicit ThreadPool(int num_threads, int spin_us = -1);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  int spin_us() const { return spin_us_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), in chunks of at most
  // `grain` items, on the workers and the caller; returns when all are done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();

  const int spin_us_;
  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  // Bumped for each loop; a worker runs a loop once when it sees a new generation.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // generation_'s latest value, for the workers' spin (which reads it without mu_).
  std::atomic<uint64_t> published_{0};
  // Workers inside the current loop: incremented under mu_ (while the loop is open),
  // decremented without it when a worker is done; the caller waits for 0 once it has
  // closed the loop (spinning, then under mu_: the worker that brings it to 0 takes mu_
  // once so that a blocked caller re-checks).
  std::atomic<int> busy_workers_{0};
  // Set by the caller when every chunk of the current loop is claimed: workers that see
  // the loop only then skip it.
  bool closed_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_{false};  // stop_ for the spin
  // The current loop. Written by the caller under mu_ before the generation bump and
  // read by workers after they observed it (under mu_), so plain fields suffice.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  std::atomic<int64_t> next_{0};  // first index not yet claimed
};

// Runs fn over [0, n) on `pool`, or serially on the caller when pool is null.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                 const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_THREAD_POOL_H_

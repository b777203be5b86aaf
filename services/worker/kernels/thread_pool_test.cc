#include "services/worker/kernels/thread_pool.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace folio::worker::kernels {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ASSERT_LE(end - begin, grain);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPoolTest, NullPoolRunsSerially) {
  int calls = 0;
  ParallelFor(nullptr, 10, 10, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, ManyConsecutiveLoops) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.ParallelFor(5, 1, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  }
  EXPECT_EQ(total.load(), 10000);
}

// Loops back to back (the workers still spinning), and after pauses longer than the spin
// (the workers blocked): every index once either way, for every spin setting.
TEST(ThreadPoolTest, SpinningAndBlockedWorkersBothRunLoops) {
  for (int spin_us : {0, 20, 5000}) {
    ThreadPool pool(3, spin_us);
    EXPECT_EQ(pool.spin_us(), spin_us);
    std::atomic<int64_t> total{0};
    for (int rep = 0; rep < 300; ++rep) {
      if (rep % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(8));
      std::vector<std::atomic<int>> hits(37);
      pool.ParallelFor(37, 2, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        total.fetch_add(e - b);
      });
      for (int i = 0; i < 37; ++i) ASSERT_EQ(hits[i].load(), 1) << "spin " << spin_us;
    }
    EXPECT_EQ(total.load(), 300 * 37);
  }
}

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The spin is bounded: an idle pool holds no CPU. With 3 workers spinning without end,
// 300 ms of idling would cost ~900 ms of process CPU time (less on a loaded machine, but
// far above the bound); spinning 1 ms after the loop costs ~3 ms.
TEST(ThreadPoolTest, IdleWorkersStopSpinning) {
  ThreadPool pool(4, 1000);
  pool.ParallelFor(8, 1, [](int64_t, int64_t) {});
  const double before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(ProcessCpuSeconds() - before, 0.15);
}

}  // namespace
}  // namespace folio::worker::kernels

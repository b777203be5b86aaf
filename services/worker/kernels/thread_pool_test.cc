#include "services/worker/kernels/thread_pool.h"

#include <atomic>
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

}  // namespace
}  // namespace folio::worker::kernels

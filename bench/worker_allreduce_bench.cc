// Gloo all-reduce between tensor-parallel ranks in one process (threads, loopback TCP),
// f32, at the sizes a step all-reduces: [num_tokens, dim] with bench-28m's dim 512, for 1,
// 8 and 64 tokens, and a 64 KiB payload. Two ranks. One iteration is one all-reduce on
// every rank; the time is wall time (latency is the point), so on a loaded machine it
// measures the run queue as much as Gloo.
//
//   build/bin/worker_allreduce_bench
#include <memory>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/worker/dist/gloo_communicator.h"
#include "services/worker/dist/kv_store.h"

namespace folio::worker {
namespace {

constexpr int kRanks = 2;

void BM_AllReduce(benchmark::State& state) {
  const int64_t count = state.range(0);
  KvStore store;
  std::vector<std::unique_ptr<GlooCommunicator>> comms(kRanks);
  {
    std::vector<std::thread> join;
    for (int r = 0; r < kRanks; ++r) {
      join.emplace_back([&, r] {
        LocalGlooStore s(&store, absl::Seconds(30));
        GlooCommunicatorOptions o;
        o.rank = r;
        o.world_size = kRanks;
        absl::StatusOr<std::unique_ptr<GlooCommunicator>> c = GlooCommunicator::Create(o, s);
        CHECK(c.ok()) << c.status();
        comms[r] = *std::move(c);
      });
    }
    for (auto& t : join) t.join();
  }
  // Rank 0 runs on the benchmark's thread, the others follow it iteration by iteration.
  const int64_t iterations = state.max_iterations;
  std::vector<std::thread> peers;
  for (int r = 1; r < kRanks; ++r) {
    peers.emplace_back([&, r] {
      std::vector<float> v(count, 1.0f);
      for (int64_t i = 0; i < iterations; ++i) {
        CHECK(comms[r]->AllReduceSum(v.data(), count, CommDType::kF32).ok());
      }
    });
  }
  std::vector<float> v(count, 1.0f);
  for (auto _ : state) {
    CHECK(comms[0]->AllReduceSum(v.data(), count, CommDType::kF32).ok());
  }
  for (auto& t : peers) t.join();
  state.SetBytesProcessed(state.iterations() * count * 4);
}
BENCHMARK(BM_AllReduce)
    ->Arg(512)
    ->Arg(8 * 512)
    ->Arg(64 * 512)
    ->Arg(16384)
    ->Iterations(400)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace folio::worker

BENCHMARK_MAIN();

// absl::Mutex with and without deadlock detection: Debian's Abseil keeps it on (each lock
// updates a global lock-order graph), which the services pay on every lock of their hot
// paths (the step loop, the frontend's streams). InitProcess turns it off in release
// builds (common/process.cc); tests keep it on. Arg: 0 off, 1 on (Debian's default).
//
//   build/bin/mutex_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

namespace {

void SetDetection(benchmark::State& state) {
  absl::SetMutexDeadlockDetectionMode(state.range(0) != 0 ? absl::OnDeadlockCycle::kAbort
                                                          : absl::OnDeadlockCycle::kIgnore);
}

// One uncontended lock and unlock.
void BM_LockUnlock(benchmark::State& state) {
  static absl::Mutex mu;
  static int64_t counter = 0;
  SetDetection(state);
  for (auto _ : state) {
    absl::MutexLock lock(&mu);
    benchmark::DoNotOptimize(++counter);
  }
}
BENCHMARK(BM_LockUnlock)->ArgName("detection")->Arg(0)->Arg(1);

// Two locks held together, as a handler that takes its service's lock and then a call's.
void BM_NestedLocks(benchmark::State& state) {
  static absl::Mutex outer, inner;
  static int64_t counter = 0;
  SetDetection(state);
  for (auto _ : state) {
    absl::MutexLock a(&outer);
    absl::MutexLock b(&inner);
    benchmark::DoNotOptimize(++counter);
  }
}
BENCHMARK(BM_NestedLocks)->ArgName("detection")->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();

// In-process cost of handing out and taking back KV blocks, in allocate+free pairs per
// second (items_per_second):
//  * BM_BlockPool: BlockPool::Allocate / Release directly, `batch` blocks out then back.
//  * BM_ManagerStep: KvCacheManager::Step, the scheduler's path: one step creates `batch`
//    sequences and grants each one token (one block), the next step frees them.
//  * BM_ManagerDecodeStep: KvCacheManager::Step as a decode step: one token granted to
//    each of `seqs` live sequences (items = tokens granted). This is the domain-side work
//    inside cachemgr_rpc_bench's BM_DecodeStepRpc, without gRPC and protobuf.
// Single-threaded, like the cache manager's owner. Run with
//   build-sim/bin/cachemgr_pool_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/cachemgr/block_pool.h"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr {
namespace {

// The article's pool: 63.9 GB at 2 MiB per 16-token block.
constexpr int32_t kNumBlocks = 30469;
constexpr int32_t kBlockSize = 16;

void BM_BlockPool(benchmark::State& state) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  BlockPool pool(kNumBlocks, kBlockSize);
  std::vector<BlockId> ids(batch);
  for (auto _ : state) {
    for (int32_t i = 0; i < batch; ++i) ids[i] = pool.Allocate();
    benchmark::DoNotOptimize(ids.data());
    for (int32_t i = 0; i < batch; ++i) pool.Release(ids[i]);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  CHECK(pool.CheckInvariants().ok());
}
BENCHMARK(BM_BlockPool)->ArgName("batch")->Arg(1)->Arg(64)->Arg(256);

void BM_ManagerStep(benchmark::State& state) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  auto manager = KvCacheManager::Create(CacheConfig{
      .policy = PolicyKind::kPaged, .num_blocks = kNumBlocks, .block_size = kBlockSize});
  CHECK(manager.ok()) << manager.status();
  StepRequest grant;
  StepRequest free;
  for (int32_t i = 0; i < batch; ++i) {
    const SeqId id{static_cast<uint64_t>(i) + 1};
    grant.creates.push_back(CreateOp{.seq = id, .max_len = kBlockSize});
    grant.grants.push_back(GrantOp{.seq = id, .start_pos = 0, .token_ids = {i % 32000}});
    free.frees.push_back(id);
  }
  for (auto _ : state) {
    auto granted = (*manager)->Step(grant);
    benchmark::DoNotOptimize(granted);
    auto freed = (*manager)->Step(free);
    benchmark::DoNotOptimize(freed);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  CHECK((*manager)->Stats().pool.num_blocks_used == 0);
  CHECK((*manager)->CheckInvariants().ok());
}
BENCHMARK(BM_ManagerStep)->ArgName("batch")->Arg(1)->Arg(64)->Arg(256);

void BM_ManagerDecodeStep(benchmark::State& state) {
  constexpr int32_t kMaxLen = 1024;
  const int32_t num_seqs = static_cast<int32_t>(state.range(0));
  auto manager = KvCacheManager::Create(
      CacheConfig{.num_blocks = num_seqs * (kMaxLen / kBlockSize + 1), .block_size = kBlockSize});
  CHECK(manager.ok()) << manager.status();
  // Staggered lengths, as in cachemgr_rpc_bench, so recycling is spread over steps.
  std::vector<int32_t> lengths(num_seqs);
  StepRequest prefill;
  StepRequest decode;
  uint64_t next_id = 1;
  for (int32_t i = 0; i < num_seqs; ++i) {
    const SeqId id{next_id++};
    lengths[i] = 1 + (i * 131) % (kMaxLen - 1);
    prefill.creates.push_back(CreateOp{.seq = id, .max_len = kMaxLen});
    prefill.grants.push_back(
        GrantOp{.seq = id, .start_pos = 0, .token_ids = std::vector<int32_t>(lengths[i], 7)});
    decode.grants.push_back(GrantOp{.seq = id, .token_ids = {0}});
  }
  CHECK((*manager)->Step(prefill).ok());
  int64_t recycled = 0;
  for (auto _ : state) {
    decode.frees.clear();
    decode.creates.clear();
    for (int32_t i = 0; i < num_seqs; ++i) {
      GrantOp& grant = decode.grants[i];
      if (lengths[i] == kMaxLen) {
        decode.frees.push_back(grant.seq);
        grant.seq = SeqId{next_id++};
        decode.creates.push_back(CreateOp{.seq = grant.seq, .max_len = kMaxLen});
        lengths[i] = 0;
        ++recycled;
      }
      grant.start_pos = lengths[i]++;
      grant.token_ids[0] = grant.start_pos % 32000;
    }
    auto response = (*manager)->Step(decode);
    benchmark::DoNotOptimize(response);
  }
  state.SetItemsProcessed(state.iterations() * num_seqs);
  state.counters["recycled"] = static_cast<double>(recycled);
  CHECK_EQ((*manager)->Stats().num_grant_failures, 0);
}
BENCHMARK(BM_ManagerDecodeStep)->ArgName("seqs")->Arg(1)->Arg(64)->Arg(256);

}  // namespace
}  // namespace folio::cachemgr

BENCHMARK_MAIN();

// The KV tiers' cost per block against recomputing the block (issue #50): for each model,
// one block of 16 tokens loaded from a host segment into the pool (a step of one load,
// CpuModelRunner::Execute: what a host-tier hit costs the worker), or from its block file
// on disk (a step of one disk load: the file read, its checksums checked, the block copied
// in; the page cache warm, as for a block spilled recently), against the same
// 16 tokens computed as a prefill chunk after a 64-token prefix (CpuModelRunner::Execute,
// what a miss costs). Where loading were dearer, the cache manager should recompute; the
// ratio says how far that is.
//
// Models: stories260K and bench-28m from $FOLIO_MODELS_DIR (default ../shared/models), and
// the 1.1B Llama shape in F16 that ./folio bench peer writes
// (build/bench-models/peer/peer-1.1b-f16.gguf), each when present. 2 threads.
//
//   build/bin/kv_offload_bench [--benchmark_format=json]
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/host_kv_segment.h"
#include "services/worker/engine/kv_disk_store.h"
#include "services/worker/model/load_model.h"

namespace folio::worker {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPrefix = 64;

struct Engine {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<CpuModelRunner> runner;
  std::unique_ptr<HostKvSegment> host;
  std::unique_ptr<KvDiskStore> disk;
  std::string disk_root;
};

Engine* Make(const std::string& path) {
  auto* e = new Engine;
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  CHECK(w.ok()) << w.status();
  e->weights = *std::move(w);
  CpuModelRunnerOptions o;
  o.num_threads = 2;
  o.block_size = kBlockSize;
  o.kv_cache_bytes = int64_t{64} << 20;
  o.max_num_blocks = 16;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(*e->weights, o);
  CHECK(r.ok()) << r.status();
  e->runner = *std::move(r);
  const int64_t per_block = e->runner->kv_cache().bytes_per_block();
  const std::string name = "folio-offload-bench-" + std::to_string(getpid());
  CHECK(HostKvSegment::Unlink(name).ok());
  absl::StatusOr<std::unique_ptr<HostKvSegment>> h =
      HostKvSegment::Open(name, HostKvSegment::kHeaderBytes + 4 * per_block, per_block, path);
  CHECK(h.ok()) << h.status();
  e->host = *std::move(h);
  CHECK(HostKvSegment::Unlink(name).ok());  // the mapping stays until exit
  CHECK(e->runner->SetHostSegment(e->host.get()).ok());
  // The disk tier under a directory of this run's own (TMPDIR or /tmp), removed at exit.
  const char* tmp = std::getenv("TMPDIR");
  e->disk_root = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                 "/folio-offload-bench-" + std::to_string(getpid());
  absl::StatusOr<std::unique_ptr<KvDiskStore>> d = KvDiskStore::Open(KvDiskStoreOptions{
      .root = e->disk_root, .budget_bytes = int64_t{1} << 30, .identity = path,
      .block_size = kBlockSize, .bytes_per_block = per_block});
  CHECK(d.ok()) << d.status();
  e->disk = *std::move(d);
  CHECK(e->runner->SetDiskStore(e->disk.get()).ok());
  // The prefix the timed chunk attends to.
  StepInput prefill;
  SequenceStep s;
  for (int32_t i = 0; i < kPrefix; ++i) s.token_ids.push_back(3 + i % 200);
  s.block_table = {0, 1, 2, 3, 4};
  s.num_samples = 0;
  prefill.seqs.push_back(s);
  CHECK(e->runner->Execute(prefill).ok());
  return e;
}

void BM_RecomputeBlock(benchmark::State& state, Engine* e) {
  StepInput step;
  SequenceStep s;
  for (int32_t i = 0; i < kBlockSize; ++i) s.token_ids.push_back(5 + i);
  s.start_pos = kPrefix;
  s.block_table = {0, 1, 2, 3, 4};
  s.num_samples = 0;
  step.seqs.push_back(s);
  for (auto _ : state) CHECK(e->runner->Execute(step).ok());
  state.counters["bytes_per_block"] = static_cast<double>(e->host->bytes_per_block());
}

void BM_LoadBlock(benchmark::State& state, Engine* e) {
  StepInput store;
  store.host_transfers = {HostTransfer{.kind = HostTransfer::Kind::kStore, .block = 4, .host_slot = 1}};
  CHECK(e->runner->Execute(store).ok());
  StepInput load;
  load.host_transfers = {HostTransfer{.kind = HostTransfer::Kind::kLoad, .block = 5, .host_slot = 1}};
  for (auto _ : state) CHECK(e->runner->Execute(load).ok());
  state.counters["bytes_per_block"] = static_cast<double>(e->host->bytes_per_block());
  state.SetBytesProcessed(state.iterations() * e->host->bytes_per_block());
}

void BM_LoadBlockFromDisk(benchmark::State& state, Engine* e) {
  using Kind = HostTransfer::Kind;
  const std::vector<int32_t> tokens(kBlockSize, 7);
  StepInput spill;
  spill.host_transfers = {
      HostTransfer{.kind = Kind::kStore, .block = 4, .host_slot = 2},
      HostTransfer{.kind = Kind::kSpill, .host_slot = 2, .hash_hi = 1, .hash_lo = 2,
                   .tokens = tokens}};
  CHECK(e->runner->Execute(spill).ok());
  CHECK_GT(e->disk->stats().num_spills, 0);  // once per run of this function
  CHECK_EQ(e->disk->stats().num_spill_failures, 0);
  StepInput load;
  load.host_transfers = {
      HostTransfer{.kind = Kind::kLoadDisk, .block = 5, .hash_hi = 1, .hash_lo = 2}};
  for (auto _ : state) CHECK(e->runner->Execute(load).ok());
  state.counters["bytes_per_block"] = static_cast<double>(e->disk->bytes_per_block());
  state.SetBytesProcessed(state.iterations() * e->disk->bytes_per_block());
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const char* env = std::getenv("FOLIO_MODELS_DIR");
  const std::string models = env != nullptr && *env != '\0' ? env : "../shared/models";
  const std::vector<std::pair<std::string, std::string>> candidates = {
      {"stories260K", models + "/stories260K/stories260K.gguf"},
      {"bench-28m", models + "/bench-28m-f16.gguf"},
      {"1.1b-f16", "build/bench-models/peer/peer-1.1b-f16.gguf"}};
  std::vector<folio::worker::Engine*> engines;
  for (const auto& [label, path] : candidates) {
    if (!std::filesystem::exists(path)) {
      LOG(WARNING) << label << ": " << path << " not found, skipped";
      continue;
    }
    folio::worker::Engine* e = folio::worker::Make(path);
    engines.push_back(e);
    benchmark::RegisterBenchmark(("load_block/" + label).c_str(), folio::worker::BM_LoadBlock, e)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("load_block_from_disk/" + label).c_str(),
                                 folio::worker::BM_LoadBlockFromDisk, e)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("recompute_block/" + label).c_str(),
                                 folio::worker::BM_RecomputeBlock, e)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  for (folio::worker::Engine* e : engines) std::filesystem::remove_all(e->disk_root);
  return 0;
}

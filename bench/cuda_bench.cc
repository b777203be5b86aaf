// CUDA worker benchmarks, for the device check (tests/gpu/device_check.sh):
//
//  * BM_CopyBandwidth: cudaMemcpy device-to-device of 2 GiB. Its bytes read + written per
//    second are the baseline every attention figure is divided by ("frac_of_copy"): the
//    bandwidth this device actually reaches, measured in the same run.
//  * BM_PagedDecodeAttention/{context}/{batch}/{paged}/{partition}: decode attention at the shape of
//    Llama-3-8B (32 query heads over 8 KV heads, head size 128, f16 KV). Paged = 16-token
//    blocks scattered over the pool; contiguous (paged = 0) = one block per sequence as
//    long as its context, the layout of a non-paged cache, run by the same kernel.
//    partition: keys per thread block (0 = the kernel's default).
//    bytes_per_second counts the K and V bytes the step must read.
//  * BM_Decode/{batch}: whole decode steps of a model with Llama-3-8B's layer shapes and
//    vocabulary but kLayers layers, random weights made on the device, f16, batch
//    sequences at context 512; tokens per second = batch / step time.
//
// Times come from CUDA events around the launches (manual time), after a warm-up.
//
//   build/bin/cuda_bench --benchmark_format=json
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/worker/cuda/cuda_model_runner.h"
#include "services/worker/cuda/device_buffer.h"
#include "services/worker/cuda/kernels.h"

namespace folio::worker::cuda {
namespace {

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kLayers = 4;

// Copy bandwidth of the last BM_CopyBandwidth run, bytes per second.
double g_copy_bandwidth = 0;

class EventTimer {
 public:
  EventTimer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void Start() { cudaEventRecord(start_); }
  double StopSeconds() {
    cudaEventRecord(stop_);
    cudaEventSynchronize(stop_);
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms / 1e3;
  }

 private:
  cudaEvent_t start_, stop_;
};

DeviceBuffer MustAllocate(int64_t bytes) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes, "benchmark");
  CHECK(b.ok()) << b.status();
  return *std::move(b);
}

void BM_CopyBandwidth(benchmark::State& state) {
  const int64_t bytes = int64_t{2} << 30;
  DeviceBuffer a = MustAllocate(bytes), b = MustAllocate(bytes);
  cudaMemset(a.get(), 1, bytes);
  cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice);  // warm-up
  EventTimer timer;
  double total = 0;
  for (auto _ : state) {
    timer.Start();
    cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice);
    const double s = timer.StopSeconds();
    state.SetIterationTime(s);
    total += s;
  }
  g_copy_bandwidth = 2.0 * bytes * state.iterations() / total;
  state.SetBytesProcessed(2 * bytes * state.iterations());
}
BENCHMARK(BM_CopyBandwidth)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

void BM_PagedDecodeAttention(benchmark::State& state) {
  const int context = static_cast<int>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  const bool paged = state.range(2) != 0;
  const int partition = static_cast<int>(state.range(3));  // 0 = the default
  const int block_size = paged ? 16 : context;
  const int blocks_per_seq = (context + block_size - 1) / block_size;
  const int num_blocks = batch * blocks_per_seq;
  const int64_t slot_elems = int64_t{kKvHeads} * kHeadDim;
  const int64_t cache_elems = int64_t{num_blocks} * block_size * slot_elems;
  DeviceBuffer k = MustAllocate(cache_elems * 2), v = MustAllocate(cache_elems * 2);
  LaunchFillUniform(k.get(), cache_elems, DType::kF16, 1, -1, 1, nullptr);
  LaunchFillUniform(v.get(), cache_elems, DType::kF16, 2, -1, 1, nullptr);
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  if (paged) std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
  std::vector<int32_t> row_seq(batch), row_context(batch, context);
  std::iota(row_seq.begin(), row_seq.end(), 0);
  DeviceBuffer d_tables = MustAllocate(blocks.size() * 4), d_seq = MustAllocate(batch * 4),
               d_ctx = MustAllocate(batch * 4);
  cudaMemcpy(d_tables.get(), blocks.data(), blocks.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seq.get(), row_seq.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_ctx.get(), row_context.data(), batch * 4, cudaMemcpyHostToDevice);
  const int64_t q_elems = int64_t{batch} * kHeads * kHeadDim;
  DeviceBuffer q = MustAllocate(q_elems * 4), out = MustAllocate(q_elems * 4);
  LaunchFillUniform(q.get(), q_elems, DType::kF32, 3, -1, 1, nullptr);
  const int64_t ws = PagedAttentionWorkspaceFloats(batch, kHeads, kHeadDim, context, partition);
  DeviceBuffer workspace = MustAllocate(std::max<int64_t>(ws, 1) * 4);

  KvView kv{k.get(), v.get(), DType::kF16, num_blocks, block_size, kKvHeads, kHeadDim};
  PagedAttentionParams p;
  p.q = q.as<float>();
  p.q_row_stride = kHeads * kHeadDim;
  p.out = out.as<float>();
  p.out_row_stride = kHeads * kHeadDim;
  p.num_rows = batch;
  p.num_heads = kHeads;
  p.scale = 0.088f;
  p.row_seq = d_seq.as<int32_t>();
  p.row_context = d_ctx.as<int32_t>();
  p.block_tables = d_tables.as<int32_t>();
  p.block_table_stride = blocks_per_seq;
  p.max_context = context;
  p.workspace = workspace.as<float>();
  p.workspace_floats = ws;
  p.partition_size = partition;
  CHECK(LaunchPagedAttention(p, kv, nullptr).ok());  // warm-up
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  constexpr int kLaunches = 10;
  EventTimer timer;
  double total = 0;
  for (auto _ : state) {
    timer.Start();
    for (int i = 0; i < kLaunches; ++i) CHECK(LaunchPagedAttention(p, kv, nullptr).ok());
    const double s = timer.StopSeconds() / kLaunches;
    state.SetIterationTime(s);
    total += s;
  }
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  const double bytes = 2.0 * batch * context * slot_elems * 2;  // K and V, f16
  const double bandwidth = bytes * state.iterations() / total;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["us_per_step"] = total / state.iterations() * 1e6;
  if (g_copy_bandwidth > 0) state.counters["frac_of_copy"] = bandwidth / g_copy_bandwidth;
}
BENCHMARK(BM_PagedDecodeAttention)
    ->ArgNames({"context", "batch", "paged", "partition"})
    ->ArgsProduct({{512, 2048, 8192, 32768}, {32}, {1, 0}, {0}})
    ->Args({8192, 128, 1, 0})
    ->Args({8192, 128, 0, 0})
    ->Args({8192, 32, 1, 256})
    ->Args({8192, 32, 1, 1024})
    ->Args({2048, 1, 1, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);

void BM_Decode(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr int kContext = 512;
  ModelConfig c;
  c.name = "llama-3-8b-shaped";
  c.dim = 4096;
  c.hidden_dim = 14336;
  c.num_layers = kLayers;
  c.num_heads = kHeads;
  c.num_kv_heads = kKvHeads;
  c.head_dim = kHeadDim;
  c.vocab_size = 128256;
  c.max_seq_len = 8192;
  c.rope_theta = 500000.0f;
  CudaModelRunnerOptions o;
  o.block_size = 16;
  o.compute_dtype = DType::kF16;
  o.kv_cache_bytes = int64_t{4} << 30;
  o.max_num_batched_tokens = 512;
  o.max_num_seqs = 256;
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> r = CudaModelRunner::CreateRandom(c, 42, o);
  CHECK(r.ok()) << r.status();
  const int blocks_per_seq = kContext / 16 + 1;
  CHECK_LE(int64_t{batch} * blocks_per_seq, (*r)->num_blocks());
  StepInput step;
  for (int s = 0; s < batch; ++s) {
    SequenceStep seq;
    seq.seq_id = s;
    seq.token_ids = {1 + s};
    seq.start_pos = kContext - 1;
    for (int b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(s * blocks_per_seq + b);
    seq.sampling.temperature = 0.0f;
    step.seqs.push_back(std::move(seq));
  }
  CHECK((*r)->Execute(step).ok());  // warm-up
  for (auto _ : state) {
    absl::StatusOr<StepOutput> out = (*r)->Execute(step);  // ends with a device sync
    CHECK(out.ok()) << out.status();
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["layers"] = kLayers;
  state.counters["weight_gib"] = static_cast<double>((*r)->memory().weight_bytes) / (1 << 30);
}
BENCHMARK(BM_Decode)->ArgName("batch")->Arg(1)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)->UseRealTime();

}  // namespace
}  // namespace folio::worker::cuda

BENCHMARK_MAIN();

// Paged vs contiguous attention, decode, at contexts 512, 2048 and 8192 (one run), and
// prefill chunks on the tiled kernel vs the per-query kernel (BM_PrefillAttention).
//
// Shapes are bench-28m's: 8 query heads over 4 KV heads (GQA 2), head_dim 64, f16 KV,
// 4 sequences decoding one token each, 2 threads. "Paged" scatters each sequence's
// 16-token blocks randomly over the pool. "Contiguous" gives each sequence one block as
// long as its context, i.e. the plain [context, kv_heads, head_dim] layout of a
// non-paged cache, and runs the same kernel code over it, so the difference is the cost
// of paging alone (block-table lookups and the jumps between blocks).
//
// Rates are per second of process CPU time (both threads), not wall time: the build
// machines are shared, and CPU time is what stays comparable under load.
//
// BM_PrefillAttention/<chunk>/<prefix>/<group>: one sequence's prefill chunk of `chunk`
// queries after `prefix` cached tokens, 4 kv heads x head_dim 64, group = query heads per
// kv head (2: bench-28m; 8: the 1.1B shape), f16 KV in scattered 16-token blocks, 2
// threads. Each iteration runs the per-query kernel and the tiled kernel on the same
// inputs, timed apart by process CPU time: per_query_ms, tiled_ms and
// speedup = per_query_ms / tiled_ms.
//
// BM_PrefillKernels/<chunk>/<prefix>/<group>: the same inputs, the tiled kernel on AVX2
// against the tiled kernel on AVX-512 (avx2_ms, avx512_ms, speedup).
//
// BM_DecodeKernels/<seqs>/<context>/<group>: one decode step of `seqs` sequences at
// `context` tokens each (the serving shape: bench-28m at 32 clients is seqs 32, group 2),
// 4 kv heads x head_dim 64, f16 KV in scattered 16-token blocks, 2 threads. Each
// iteration runs the AVX2 and the AVX-512 per-query kernels (PagedAttentionArgs::avx512)
// on the same inputs, alternating which goes first, timed apart by process CPU time:
// avx2_us, avx512_us and speedup = avx2_us / avx512_us (skipped without AVX-512).
//
// BM_KvDtypes/<seqs>/<context>/<group>/<chunk>: f16 KV against q8_0 KV (int8 rows with
// an f32 scale, --kv_dtype=q8_0) on the default path of this CPU: the same K/V values
// (N(0, 1)) written by WriteKv into two pools of scattered 16-token blocks with the same
// block tables, `seqs` sequences at `context` tokens, each step `chunk` queries per
// sequence (1: decode; more: a prefill chunk on the tiled kernel), 4 kv heads x head_dim
// 64, 2 threads. Each iteration runs both, alternating which goes first, timed apart by
// process CPU time: f16_us, q8_us, speedup = f16_us / q8_us.
//
// BM_WindowDecode/<seqs>/<context>/<window>/<softcap>: decode rows of such layers, GQA 2,
// the AVX2 per-query kernel (specialised by group) against the AVX-512 one (skipped
// without AVX-512): avx2_us, avx512_us, speedup.
//
// BM_WindowAttention/<seqs>/<chunk>/<context>/<window>/<softcap>: sliding-window layers
// (Gemma 2/3's local layers; softcap > 0: Gemma 2's score softcap) on the default path of
// this CPU: `seqs` sequences at `context` tokens, each step `chunk` queries per sequence
// (1: decode), GQA 2, 4 kv heads x head_dim 64, f16 KV in scattered 16-token blocks, 2
// threads. Each iteration runs the per-query kernel's generic body (tiled_prefill off:
// the only path windows and softcaps had before) and the tiled kernel, alternating which
// goes first: per_query_us, tiled_us, speedup. Prefill chunks only: decode rows take the
// per-query kernel either way (one-query tiles measured 0.87x at 32 x 1024 tokens).
//
//   build/bin/worker_attention_bench
//   build/bin/worker_attention_bench --benchmark_filter=Prefill
//   build/bin/worker_attention_bench --benchmark_filter=DecodeKernels
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include <time.h>

#include <sys/mman.h>

#include "benchmark/benchmark.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/paged_attention.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {
namespace {

constexpr int kNumSeqs = 4;
constexpr int kNumHeads = 8;
constexpr int kNumKvHeads = 4;
constexpr int kHeadDim = 64;
constexpr int kThreads = 2;

// KV storage as the engine's KvCache allocates it: 2 MiB aligned, transparent huge pages.
class HugeBuffer {
 public:
  explicit HugeBuffer(size_t n) : n_(n) {
    const size_t bytes = (n * sizeof(uint16_t) + kHuge - 1) / kHuge * kHuge;
    data_ = static_cast<uint16_t*>(std::aligned_alloc(kHuge, bytes));
    madvise(data_, bytes, MADV_HUGEPAGE);
  }
  ~HugeBuffer() { std::free(data_); }
  uint16_t& operator[](size_t i) { return data_[i]; }
  uint16_t* data() { return data_; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20;
  size_t n_;
  uint16_t* data_;
};

// An f16 KV pool of `num_blocks` blocks of `block_size` tokens (kNumKvHeads x kHeadDim),
// filled from `rng` with values on a coarse half grid, and its block ids: in order, or
// shuffled by `rng` (`scatter`) as a paged cache scatters a sequence's blocks.
struct KvPool {
  KvPool(int num_blocks, int block_size, bool scatter, std::mt19937& rng)
      : elems(static_cast<size_t>(num_blocks) * block_size * kNumKvHeads * kHeadDim),
        k(elems),
        v(elems),
        ids(num_blocks) {
    kv.dtype = KvDType::kF16;
    kv.num_blocks = num_blocks;
    kv.block_size = block_size;
    kv.num_kv_heads = kNumKvHeads;
    kv.head_dim = kHeadDim;
    std::uniform_int_distribution<int> level(-64, 64);
    for (size_t i = 0; i < elems; ++i) {
      k[i] = FloatToHalf(level(rng) / 32.0f);
      v[i] = FloatToHalf(level(rng) / 32.0f);
    }
    kv.k = k.data();
    kv.v = v.data();
    std::iota(ids.begin(), ids.end(), 0);
    if (scatter) std::shuffle(ids.begin(), ids.end(), rng);
  }
  size_t elems;
  HugeBuffer k, v;
  std::vector<int32_t> ids;
  KvCacheView kv;
};

// Attention over `num_heads` query heads of kHeadDim, rows of q and out packed.
PagedAttentionArgs AttentionArgs(const std::vector<float>& q, std::vector<float>& out,
                                 int num_heads) {
  PagedAttentionArgs args;
  args.q = q.data();
  args.q_row_stride = num_heads * kHeadDim;
  args.out = out.data();
  args.out_row_stride = num_heads * kHeadDim;
  args.num_heads = num_heads;
  args.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  return args;
}

// The kernels' path, for labels: the AVX-512 kernels when args take them.
const char* PathLabel(const PagedAttentionArgs& args) {
  return args.isa == CpuIsa::kAvx2 && args.avx512 ? "avx512" : CpuIsaName(args.isa);
}

void RunDecodeAttention(benchmark::State& state, bool paged) {
  const int context = static_cast<int>(state.range(0));
  const int block_size = paged ? 16 : context;
  const int blocks_per_seq = (context + block_size - 1) / block_size;
  const int num_blocks = kNumSeqs * blocks_per_seq;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  KvPool pool_kv(num_blocks, block_size, /*scatter=*/paged, rng);
  std::vector<AttentionSeq> seqs;
  for (int s = 0; s < kNumSeqs; ++s) {
    seqs.push_back({s, 1, context, pool_kv.ids.data() + s * blocks_per_seq});
  }
  const int width = kNumHeads * kHeadDim;
  std::vector<float> q(kNumSeqs * width), out(kNumSeqs * width);
  for (float& x : q) x = normal(rng);

  const PagedAttentionArgs args = AttentionArgs(q, out, kNumHeads);
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    PagedAttention(args, seqs, pool_kv.kv, &pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * kNumSeqs * context * kNumKvHeads * kHeadDim * sizeof(uint16_t);
  state.counters["tokens/s"] =
      benchmark::Counter(kNumSeqs, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV_GB/s"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(PathLabel(args));
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// kernels == false: the per-query kernel against the tiled kernel (the default ISA path);
// true: the tiled kernel on AVX2 against the tiled kernel on AVX-512.
void RunPrefill(benchmark::State& state, bool kernels) {
  if (kernels && (!EnabledCpuFeatures().avx512 || BestCpuIsa() != CpuIsa::kAvx2)) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  const int chunk = static_cast<int>(state.range(0));
  const int prefix = static_cast<int>(state.range(1));
  const int group = static_cast<int>(state.range(2));
  const int num_heads = kNumKvHeads * group;
  const int context = prefix + chunk;
  const int block_size = 16;
  const int num_blocks = (context + block_size - 1) / block_size;

  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  KvPool pool_kv(num_blocks, block_size, /*scatter=*/true, rng);
  const KvCacheView& kv = pool_kv.kv;
  const std::vector<AttentionSeq> seqs = {{0, chunk, context, pool_kv.ids.data()}};
  const int width = num_heads * kHeadDim;
  std::vector<float> q(static_cast<size_t>(chunk) * width), out(q.size());
  for (float& x : q) x = normal(rng);

  PagedAttentionArgs args = AttentionArgs(q, out, num_heads);
  ThreadPool pool(kThreads);
  double a_s = 0, b_s = 0;  // per-query / tiled, or AVX2 / AVX-512 tiled
  for (auto _ : state) {
    // Alternate which kernel goes first, so neither always finds the other's cache state.
    for (int pass = 0; pass < 2; ++pass) {
      const bool second = (pass == 0) == (state.iterations() % 2 == 0);
      if (kernels) {
        args.isa = CpuIsa::kAvx2;
        args.avx512 = second;
      } else {
        args.tiled_prefill = second;
      }
      const double t0 = ProcessCpuSeconds();
      PagedAttention(args, seqs, kv, &pool);
      benchmark::DoNotOptimize(out.data());
      (second ? b_s : a_s) += ProcessCpuSeconds() - t0;
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters[kernels ? "avx2_ms" : "per_query_ms"] = a_s / n * 1e3;
  state.counters[kernels ? "avx512_ms" : "tiled_ms"] = b_s / n * 1e3;
  state.counters["speedup"] = a_s / b_s;
  if (!kernels) state.SetLabel(PathLabel(args));
}

void BM_PrefillAttention(benchmark::State& state) { RunPrefill(state, false); }
void BM_PrefillKernels(benchmark::State& state) { RunPrefill(state, true); }

void BM_DecodeKernels(benchmark::State& state) {
  if (!EnabledCpuFeatures().avx512 || BestCpuIsa() != CpuIsa::kAvx2) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int group = static_cast<int>(state.range(2));
  const int num_heads = kNumKvHeads * group;
  const int blocks_per_seq = (context + 15) / 16;
  std::mt19937 rng(3);
  KvPool pool_kv(num_seqs * blocks_per_seq, 16, /*scatter=*/true, rng);
  std::vector<AttentionSeq> seqs;
  for (int s = 0; s < num_seqs; ++s) {
    seqs.push_back({s, 1, context, pool_kv.ids.data() + s * blocks_per_seq});
  }
  std::vector<float> q(static_cast<size_t>(num_seqs) * num_heads * kHeadDim), out(q.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  PagedAttentionArgs args = AttentionArgs(q, out, num_heads);
  args.isa = CpuIsa::kAvx2;
  ThreadPool pool(kThreads);
  double avx2_s = 0, avx512_s = 0;
  for (auto _ : state) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool wide = (pass == 0) == (state.iterations() % 2 == 0);
      args.avx512 = wide;
      const double t0 = ProcessCpuSeconds();
      PagedAttention(args, seqs, pool_kv.kv, &pool);
      benchmark::DoNotOptimize(out.data());
      (wide ? avx512_s : avx2_s) += ProcessCpuSeconds() - t0;
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["avx2_us"] = avx2_s / n * 1e6;
  state.counters["avx512_us"] = avx512_s / n * 1e6;
  state.counters["speedup"] = avx2_s / avx512_s;
}

void BM_KvDtypes(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int group = static_cast<int>(state.range(2));
  const int chunk = static_cast<int>(state.range(3));
  const int num_heads = kNumKvHeads * group;
  const int blocks_per_seq = (context + 15) / 16;
  const int num_blocks = num_seqs * blocks_per_seq;
  std::mt19937 rng(4);
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const size_t elems = static_cast<size_t>(num_blocks) * 16 * kNumKvHeads * kHeadDim;
  // HugeBuffer(elems) holds elems f16 values: more than the q8_0 pool's bytes.
  HugeBuffer f16k(elems), f16v(elems), q8k(elems), q8v(elems);
  KvCacheView kv[2];
  for (int d = 0; d < 2; ++d) {
    kv[d].dtype = d == 0 ? KvDType::kF16 : KvDType::kQ8;
    kv[d].num_blocks = num_blocks;
    kv[d].block_size = 16;
    kv[d].num_kv_heads = kNumKvHeads;
    kv[d].head_dim = kHeadDim;
  }
  kv[0].k = f16k.data();
  kv[0].v = f16v.data();
  kv[1].k = q8k.data();
  kv[1].v = q8v.data();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kv_width = kNumKvHeads * kHeadDim;
  std::vector<AttentionSeq> seqs;
  for (int s = 0; s < num_seqs; ++s) {
    const int32_t* table = ids.data() + s * blocks_per_seq;
    std::vector<float> k(static_cast<size_t>(context) * kv_width), v(k.size());
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    std::vector<int64_t> slots;
    for (int p = 0; p < context; ++p) slots.push_back(SlotForPosition(table, 16, p));
    for (const KvCacheView& view : kv) WriteKv(k.data(), v.data(), kv_width, slots, view);
    seqs.push_back({s * chunk, chunk, context, table});
  }
  std::vector<float> q(static_cast<size_t>(num_seqs) * chunk * num_heads * kHeadDim), out(q.size());
  for (float& x : q) x = normal(rng);
  PagedAttentionArgs args = AttentionArgs(q, out, num_heads);
  ThreadPool pool(kThreads);
  double s[2] = {0, 0};
  for (auto _ : state) {
    for (int pass = 0; pass < 2; ++pass) {
      const int d = (pass == 0) == (state.iterations() % 2 == 0) ? 1 : 0;
      const double t0 = ProcessCpuSeconds();
      PagedAttention(args, seqs, kv[d], &pool);
      benchmark::DoNotOptimize(out.data());
      s[d] += ProcessCpuSeconds() - t0;
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["f16_us"] = s[0] / n * 1e6;
  state.counters["q8_us"] = s[1] / n * 1e6;
  state.counters["speedup"] = s[0] / s[1];
  state.SetLabel(PathLabel(args));
}

// Windowed (and softcapped) layers, `num_seqs` sequences at `context` tokens with `chunk`
// queries each, GQA 2: `decode` compares the AVX2 generic body with the AVX-512 per-query
// kernel, else the per-query kernel with the tiled one (the default ISA path).
void RunWindow(benchmark::State& state, int num_seqs, int chunk, int context, int window,
               int softcap, bool decode) {
  if (decode && (!EnabledCpuFeatures().avx512 || BestCpuIsa() != CpuIsa::kAvx2)) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  const int num_heads = kNumKvHeads * 2;
  const int blocks_per_seq = (context + 15) / 16;
  std::mt19937 rng(decode ? 6 : 5);
  KvPool pool_kv(num_seqs * blocks_per_seq, 16, /*scatter=*/true, rng);
  std::vector<AttentionSeq> seqs;
  for (int s = 0; s < num_seqs; ++s) {
    seqs.push_back({s * chunk, chunk, context, pool_kv.ids.data() + s * blocks_per_seq});
  }
  std::vector<float> q(static_cast<size_t>(num_seqs) * chunk * num_heads * kHeadDim),
      out(q.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  PagedAttentionArgs args = AttentionArgs(q, out, num_heads);
  if (decode) args.isa = CpuIsa::kAvx2;
  args.window = window;
  args.softcap = static_cast<float>(softcap);
  ThreadPool pool(kThreads);
  double s[2] = {0, 0};  // per-query (AVX2 with decode), tiled (AVX-512 with decode)
  for (auto _ : state) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool second = (pass == 0) == (state.iterations() % 2 == 0);
      (decode ? args.avx512 : args.tiled_prefill) = second;
      const double t0 = ProcessCpuSeconds();
      PagedAttention(args, seqs, pool_kv.kv, &pool);
      benchmark::DoNotOptimize(out.data());
      s[second ? 1 : 0] += ProcessCpuSeconds() - t0;
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters[decode ? "avx2_us" : "per_query_us"] = s[0] / n * 1e6;
  state.counters[decode ? "avx512_us" : "tiled_us"] = s[1] / n * 1e6;
  state.counters["speedup"] = s[0] / s[1];
  if (!decode) state.SetLabel(PathLabel(args));
}

void BM_WindowAttention(benchmark::State& state) {
  RunWindow(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
            static_cast<int>(state.range(2)), static_cast<int>(state.range(3)),
            static_cast<int>(state.range(4)), /*decode=*/false);
}

// Decode rows of windowed (and softcapped) layers: the AVX2 per-query kernel against the
// AVX-512 one.
void BM_WindowDecode(benchmark::State& state) {
  RunWindow(state, static_cast<int>(state.range(0)), 1, static_cast<int>(state.range(1)),
            static_cast<int>(state.range(2)), static_cast<int>(state.range(3)),
            /*decode=*/true);
}

void BM_DecodeAttentionPaged(benchmark::State& state) { RunDecodeAttention(state, true); }
void BM_DecodeAttentionContiguous(benchmark::State& state) { RunDecodeAttention(state, false); }

// Interleaved by context, so both layouts of one context run back to back.
#define FOLIO_ATTENTION_PAIR(ctx)                                                         \
  BENCHMARK(BM_DecodeAttentionContiguous)->Arg(ctx)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond); \
  BENCHMARK(BM_DecodeAttentionPaged)->Arg(ctx)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond)
FOLIO_ATTENTION_PAIR(512);
FOLIO_ATTENTION_PAIR(2048);
FOLIO_ATTENTION_PAIR(8192);

// {seqs, context, group}: the serving step of bench-28m (32 x GQA 2) and the 1.1B shape
// (GQA 8), at short and long contexts.
BENCHMARK(BM_DecodeKernels)
    ->ArgNames({"seqs", "context", "group"})
    ->Args({32, 256, 2})
    ->Args({32, 1024, 2})
    ->Args({4, 2048, 2})
    ->Args({32, 256, 8})
    ->Args({32, 1024, 8})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

// {seqs, context, group, chunk}: decode at the serving shapes (as BM_DecodeKernels) and
// prefill chunks of 128 after a prefix.
BENCHMARK(BM_KvDtypes)
    ->ArgNames({"seqs", "context", "group", "chunk"})
    ->Args({32, 256, 2, 1})
    ->Args({32, 1024, 2, 1})
    ->Args({4, 2048, 2, 1})
    ->Args({32, 256, 8, 1})
    ->Args({32, 1024, 8, 1})
    ->Args({1, 1152, 2, 128})
    ->Args({1, 1152, 8, 128})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

// {seqs, chunk, context, window, softcap}: a prefill chunk after a prefix with Gemma 3's
// window alone and with Gemma 2's softcap too, two at once, and a window wider than the
// context.
BENCHMARK(BM_WindowAttention)
    ->ArgNames({"seqs", "chunk", "context", "window", "softcap"})
    ->Args({1, 512, 2048, 512, 0})
    ->Args({2, 256, 1024, 512, 0})
    ->Args({1, 512, 2048, 512, 50})
    ->Args({1, 512, 512, 4096, 0})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

// {seqs, context, window, softcap}: a serving batch and a long context, Gemma 3's window
// alone and with Gemma 2's softcap.
BENCHMARK(BM_WindowDecode)
    ->ArgNames({"seqs", "context", "window", "softcap"})
    ->Args({32, 1024, 512, 0})
    ->Args({32, 1024, 512, 50})
    ->Args({4, 4096, 1024, 0})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

// {chunk, prefix, group}: chunks from position 0 and after a cached prefix, GQA 2 and 8.
#define FOLIO_PREFILL_ARGS(b)                                                           \
  BENCHMARK(b)                                                                          \
      ->ArgNames({"chunk", "prefix", "group"})                                          \
      ->Args({128, 0, 2})                                                               \
      ->Args({512, 0, 2})                                                               \
      ->Args({128, 1024, 2})                                                            \
      ->Args({512, 1536, 2})                                                            \
      ->Args({128, 0, 8})                                                               \
      ->Args({512, 0, 8})                                                               \
      ->Args({128, 1024, 8})                                                            \
      ->Args({512, 1536, 8})                                                            \
      ->MeasureProcessCPUTime()                                                         \
      ->Unit(benchmark::kMillisecond)
FOLIO_PREFILL_ARGS(BM_PrefillAttention);
FOLIO_PREFILL_ARGS(BM_PrefillKernels);

}  // namespace
}  // namespace folio::worker::kernels

BENCHMARK_MAIN();

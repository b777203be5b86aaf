// End-to-end CPU engine speed on bench-28m-f16.gguf ($FOLIO_MODELS_DIR), 2 threads:
// decode tokens/s at 1, 8, 32 and 64 sequences and prefill tokens/s, each next to an
// OpenBLAS sgemm ceiling measured in the same run on the model's own GEMM shapes (the
// engine's fused QKV, wo, fused gate/up, down and LM head), for the same number of rows.
//
// Each runs twice, one after the other: GEMMs by Folio's kernel on packed weights (gemm:2,
// the default) and by OpenBLAS sgemm on the runner's pool (gemm:1, the earlier default).
// Wall-clock rates; the CPU column is all threads' CPU time.
//
// Counters: tokens/s; sgemm_tok/s (tokens/s if the step were nothing but those GEMMs);
// frac_of_sgemm = tokens/s / sgemm_tok/s; GFLOP/s at the model's 51.4 MFLOP per token.
//
//   FOLIO_MODELS_DIR=/work/shared/models build-engine/bin/worker_decode_bench
//   FOLIO_MODELS_DIR=DIR FOLIO_BENCH_MODEL=bench-28m-q8_0.gguf ...: another file of DIR
//   FOLIO_BENCH_SGEMM=0 ...: skip the sgemm ceiling (large files)
//   OMP_WAIT_POLICY=passive FOLIO_BENCH_BF16_GEMM=onednn|folio ...: a BF16 file's batched
//   projections by oneDNN or by Folio's kernels (FOLIO_BENCH_ONEDNN_MIN_ROWS: threshold;
//   FOLIO_BENCH_BF16_BLOCKED=0: oneDNN on the stored rows instead of its blocked layout)
//   OMP_WAIT_POLICY=passive FOLIO_BENCH_DEQUANT_MIN_ROWS=16 ...: a quantized file's batched
//   projections dequantized into oneDNN's bf16 matmul (0 or unset: Folio's integer kernels)
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/kernels/gemm.h"
#include "services/worker/model/load_model.h"

namespace folio::worker {
namespace {

constexpr int kThreads = 2;
constexpr int kPrompt = 128;       // context each decoding sequence starts from
constexpr int kMaxContext = 384;   // then wraps back to kPrompt (slots are rewritten)
constexpr int kBlockSize = 16;

const ModelWeights* Weights() {
  static const ModelWeights* weights = [] () -> const ModelWeights* {
    const char* dir = std::getenv("FOLIO_MODELS_DIR");
    if (dir == nullptr) return nullptr;
    // FOLIO_BENCH_MODEL: another file of that folder (e.g. a bench-28m-shaped Q8_0 or
    // BF16 file written by folio-make-model) in place of bench-28m-f16.gguf.
    const char* file = std::getenv("FOLIO_BENCH_MODEL");
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        LoadModel(std::string(dir) + "/" + (file != nullptr ? file : "bench-28m-f16.gguf"));
    CHECK(w.ok()) << w.status();
    return w->release();
  }();
  return weights;
}

std::unique_ptr<CpuModelRunner> MakeRunner(int num_seqs, GemmThreading threading) {
  CpuModelRunnerOptions o;
  o.gemm_threading = threading;
  // FOLIO_BENCH_F16_PANELS=0: f16 read in place by the typed kernel instead of panels.
  if (const char* p = std::getenv("FOLIO_BENCH_F16_PANELS")) o.f16_panels = std::string(p) != "0";
  // FOLIO_BENCH_BF16_GEMM=onednn: BF16 projections at >= FOLIO_BENCH_ONEDNN_MIN_ROWS
  // (default kDefaultOnednnMinRows) rows by oneDNN (run with OMP_WAIT_POLICY=passive).
  if (const char* g = std::getenv("FOLIO_BENCH_BF16_GEMM")) {
    CHECK(std::string(g) == "onednn" || std::string(g) == "folio") << "FOLIO_BENCH_BF16_GEMM=" << g;
    o.bf16_gemm = std::string(g) == "onednn" ? Bf16Gemm::kOnednn : Bf16Gemm::kFolio;
  }
  if (const char* m = std::getenv("FOLIO_BENCH_ONEDNN_MIN_ROWS")) o.onednn_min_rows = std::atoi(m);
  // FOLIO_BENCH_BF16_BLOCKED=0: with oneDNN, BF16 read in place (no blocked copy).
  if (const char* b = std::getenv("FOLIO_BENCH_BF16_BLOCKED")) {
    o.bf16_blocked = std::string(b) != "0";
  }
  // FOLIO_BENCH_DEQUANT_MIN_ROWS=N: quantized projections at >= N rows dequantized into
  // oneDNN's bf16 matmul (0, the default here: Folio's integer kernels).
  if (const char* m = std::getenv("FOLIO_BENCH_DEQUANT_MIN_ROWS")) o.dequant_min_rows = std::atoi(m);
  o.block_size = kBlockSize;
  o.num_threads = kThreads;
  // f16 K and V of every layer per token (bench-28m: 8 KiB; the 1.1B shape: 32 KiB).
  const ModelConfig& c = Weights()->config;
  const int64_t kv_per_token = int64_t{c.num_layers} * 2 * c.num_kv_heads * c.head_dim * 2;
  o.kv_cache_bytes = int64_t{num_seqs} * (kMaxContext + kBlockSize) * kv_per_token + (64 << 20);
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(*Weights(), o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

// Seconds per run of the engine's GEMMs for `rows` token rows and `logit_rows` LM-head
// rows, on random matrices of the model's shapes (best of several runs).
double SgemmSeconds(const ModelConfig& c, int rows, int logit_rows) {
  // FOLIO_BENCH_SGEMM=0: no ceiling (on a 1.1B file it would hold the model in f32, ~4
  // GB, and take minutes); sgemm_tok/s and frac_of_sgemm are then 0.
  if (const char* s = std::getenv("FOLIO_BENCH_SGEMM"); s != nullptr && std::string(s) == "0") {
    return 1e30;
  }
  const int64_t d = c.dim, q = int64_t{c.num_heads} * c.head_dim,
                kvd = int64_t{c.num_kv_heads} * c.head_dim, h = c.hidden_dim;
  struct Shape { int64_t in, out; };
  const Shape layer[] = {{d, q + 2 * kvd}, {q, d}, {d, 2 * h}, {h, d}};
  // Every layer gets its own matrices, as in the model, so batch-1 GEMVs stream the
  // same number of weight bytes from memory as the engine does.
  std::vector<std::vector<float>> w;
  for (int l = 0; l < c.num_layers; ++l) {
    for (const Shape& s : layer) w.emplace_back(s.in * s.out, 0.01f);
  }
  std::vector<float> lm(int64_t{c.vocab_size} * d, 0.01f);
  const int64_t widest = std::max<int64_t>({d, q + 2 * kvd, 2 * h, c.vocab_size});
  std::vector<float> x(rows * widest, 0.5f), y(rows * widest);
  // The ceiling is OpenBLAS with its own kThreads threads, whatever the runner uses.
  const int saved_threads = openblas_get_num_threads();
  openblas_set_num_threads(kThreads);
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < c.num_layers; ++l) {
      for (size_t i = 0; i < 4; ++i) {
        kernels::Linear(x.data(), layer[i].in, rows, layer[i].in, w[l * 4 + i].data(), layer[i].out,
                        0.0f, y.data(), layer[i].out);
      }
    }
    kernels::Linear(x.data(), d, logit_rows, d, lm.data(), c.vocab_size, 0.0f, y.data(),
                    c.vocab_size);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  openblas_set_num_threads(saved_threads);
  return best;
}

std::string ThreadingLabel(GemmThreading t) {
  switch (t) {
    case GemmThreading::kPacked:
      return " gemm:packed";
    case GemmThreading::kKernelPool:
      return " gemm:pool";
    case GemmThreading::kOpenBlas:
      break;
  }
  return " gemm:openblas";
}

void ReportCounters(benchmark::State& state, const ModelConfig& c, int tokens_per_iter,
                    double sgemm_s) {
  state.counters["tokens/s"] =
      benchmark::Counter(tokens_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      tokens_per_iter * 51.4e6 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sgemm_tok/s"] = tokens_per_iter / sgemm_s;
}

void BM_Decode(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  const int num_seqs = static_cast<int>(state.range(0));
  const auto threading = static_cast<GemmThreading>(state.range(1));
  std::unique_ptr<CpuModelRunner> runner = MakeRunner(num_seqs, threading);
  const ModelConfig& c = runner->config();
  const int blocks_per_seq = (kMaxContext + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> ids(num_seqs * blocks_per_seq);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(ids.begin(), ids.end(), rng);

  StepInput step;
  for (int s = 0; s < num_seqs; ++s) {
    SequenceStep seq;
    seq.seq_id = s;
    seq.block_table.assign(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
    seq.sampling.temperature = 0;
    for (int i = 0; i < kPrompt; ++i) seq.token_ids.push_back(3 + (s * 131 + i * 17) % (c.vocab_size - 3));
    step.seqs.push_back(seq);
  }
  CHECK(runner->Execute(step).ok());  // prefill every sequence
  for (SequenceStep& seq : step.seqs) {
    seq.start_pos = kPrompt;
    seq.token_ids = {5};
  }
  const double sgemm_s = SgemmSeconds(c, num_seqs, num_seqs);
  for (auto _ : state) {
    absl::StatusOr<StepOutput> out = runner->Execute(step);
    CHECK(out.ok()) << out.status();
    for (size_t s = 0; s < step.seqs.size(); ++s) {
      SequenceStep& seq = step.seqs[s];
      seq.token_ids[0] = out->seqs[s].samples[0].token_id;
      seq.start_pos = seq.start_pos + 1 < kMaxContext ? seq.start_pos + 1 : kPrompt;
    }
  }
  ReportCounters(state, c, num_seqs, sgemm_s);
  state.SetLabel("context " + std::to_string(kPrompt) + ".." + std::to_string(kMaxContext) +
                 ThreadingLabel(threading));
}

void BM_Prefill(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  const int prompt = static_cast<int>(state.range(0));
  const auto threading = static_cast<GemmThreading>(state.range(1));
  std::unique_ptr<CpuModelRunner> runner = MakeRunner(1, threading);
  const ModelConfig& c = runner->config();
  StepInput step;
  SequenceStep seq;
  for (int i = 0; i < (prompt + kBlockSize - 1) / kBlockSize; ++i) seq.block_table.push_back(i);
  for (int i = 0; i < prompt; ++i) seq.token_ids.push_back(3 + (i * 17) % (c.vocab_size - 3));
  seq.sampling.temperature = 0;
  step.seqs = {seq};
  const double sgemm_s = SgemmSeconds(c, prompt, 1);
  for (auto _ : state) {
    CHECK(runner->Execute(step).ok());
  }
  ReportCounters(state, c, prompt, sgemm_s);
  state.SetLabel(ThreadingLabel(threading));
}

// Second argument: GemmThreading (2 = packed weights and Folio's kernel on the runner's pool,
// the default; 1 = OpenBLAS on the runner's pool, the earlier default; 0 = OpenBLAS threads,
// not run by default: it was the slowest).
BENCHMARK(BM_Decode)
    ->ArgsProduct({{1, 8, 16, 32, 64}, {2, 1}})
    ->ArgNames({"seqs", "gemm"})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{128, 512}, {2, 1}})
    ->ArgNames({"tokens", "gemm"})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace folio::worker

// frac_of_sgemm needs the measured rate, which Google Benchmark finalises after the
// benchmark function returns; this reporter derives it from the two final counters.
class FractionReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> copy = runs;
    for (Run& r : copy) {
      auto tok = r.counters.find("tokens/s");
      auto ceil = r.counters.find("sgemm_tok/s");
      if (tok == r.counters.end() || ceil == r.counters.end() || r.iterations == 0) continue;
      r.counters["frac_of_sgemm"] = tok->second.value / ceil->second.value;
    }
    ConsoleReporter::ReportRuns(copy);
  }
};

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  FractionReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

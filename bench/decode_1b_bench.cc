// Single-stream decode on the 1.1B Llama shape: Folio's CPU runner against llama.cpp's
// libllama (the npm prebuilt, through folio_llama_ref), 2 threads each, in one run.
//
// The model: dim 2048, 16 layers, 32 heads / 8 KV heads, ffn 8192, vocab 32000, context
// 4096, random weights (random_model.h, seed 1), written once in F16
// (llama-1.1b-random-f16.gguf, 2.2 GB) and quantized to Q8_0 by llama.cpp's own quantizer
// (reference::Quantize: llama-1.1b-random-q8_0.gguf, 1.2 GB), in $FOLIO_BENCH_MODELS_DIR
// (default build/bench-models; making them takes a few minutes and ~5 GB of memory).
//
// Each benchmark is one generation: a 1-token prompt (BOS), then 32 single-token decode
// steps on the KV cache, greedy; the time of those 32 steps is the iteration time (manual
// time), tokens/s = 32 / that. llama.cpp's side is LlamaModel::GreedyIncremental (one
// llama_decode per token, CPU backend, no weight repacking: use_extra_bufts off), Folio's
// is CpuModelRunner::Execute with one sequence. The two engines alternate, per type, for
// --rounds rounds (default 5): on a shared machine compare medians, and note the load
// (each line's label carries /proc/loadavg at its start).
//
// Besides tokens/s each line reports cpu_s/32tok: the CPU seconds the whole process
// (every thread: Folio's pool, llama.cpp's threadpool, spinning included) spent over the
// 32 timed steps, which says more than wall time on a loaded machine.
//
// --threads (default 2) sets both engines' threads; --types (default F16,Q8_0) the files
// measured, any of llama.cpp's quantizer names (BF16, Q4_0, Q4_K_M, ...), each converted
// from the F16 file once.
//
//   build/bin/decode_1b_bench [--rounds=5] [--threads=2] [--types=F16,Q8_0,Q4_0,Q4_K_M]
//       [--benchmark_format=json]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

int g_threads = 2;  // --threads
constexpr int kGenerate = 32;  // timed single-token decode steps
constexpr int kBlockSize = 16;
constexpr int32_t kBos = 1;  // random_model.h's vocabulary: <unk>, <s>, </s>, bytes...

std::string ModelsDir() {
  const char* dir = std::getenv("FOLIO_BENCH_MODELS_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "build/bench-models";
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return "load " + a + " " + b + " " + c;
}

// The model file of `type` ("F16", "Q8_0", "Q4_K_M", ...), made if missing.
std::string ModelPath(const std::string& type) {
  std::filesystem::create_directories(ModelsDir());
  const std::string f16 = ModelsDir() + "/llama-1.1b-random-f16.gguf";
  if (!std::filesystem::exists(f16)) {
    RandomModelOptions o;
    o.dim = 2048;
    o.hidden_dim = 8192;
    o.num_layers = 16;
    o.num_heads = 32;
    o.num_kv_heads = 8;
    o.vocab_size = 32000;
    o.context_length = 4096;
    o.dtype = DType::kF16;
    o.seed = 1;
    o.weight_std = 0.02f;
    LOG(INFO) << "writing " << f16;
    const absl::Status s = WriteRandomModel(o, f16 + ".tmp");
    CHECK(s.ok()) << s;
    std::filesystem::rename(f16 + ".tmp", f16);
  }
  if (type == "F16") return f16;
  const std::string q = ModelsDir() + "/llama-1.1b-random-" + absl::AsciiStrToLower(type) + ".gguf";
  if (!std::filesystem::exists(q)) {
    LOG(INFO) << "quantizing " << f16 << " to " << type << " with llama.cpp";
    const absl::Status s = reference::Quantize(f16, q + ".tmp", type, g_threads);
    CHECK(s.ok()) << s;
    std::filesystem::rename(q + ".tmp", q);
  }
  return q;
}

struct FolioEngine {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<CpuModelRunner> runner;
};

FolioEngine& Folio(const std::string& type) {
  static auto* engines = new std::map<std::string, FolioEngine>();
  FolioEngine& e = (*engines)[type];
  if (e.runner == nullptr) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(ModelPath(type));
    CHECK(w.ok()) << w.status();
    e.weights = *std::move(w);
    CpuModelRunnerOptions o;
    o.num_threads = g_threads;
    // FOLIO_BENCH_F16_PANELS=0: f16 read in place by the typed kernel instead of panels.
    if (const char* p = std::getenv("FOLIO_BENCH_F16_PANELS")) o.f16_panels = std::string(p) != "0";
    o.block_size = kBlockSize;
    o.kv_cache_bytes = int64_t{64} << 20;
    absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(*e.weights, o);
    CHECK(r.ok()) << r.status();
    e.runner = *std::move(r);
  }
  return e;
}

reference::LlamaModel& Llama(const std::string& type) {
  static auto* models = new std::map<std::string, std::unique_ptr<reference::LlamaModel>>();
  std::unique_ptr<reference::LlamaModel>& m = (*models)[type];
  if (m == nullptr) {
    reference::LlamaModelOptions o;
    o.n_ctx = 512;
    o.n_threads = g_threads;
    absl::StatusOr<std::unique_ptr<reference::LlamaModel>> l =
        reference::LlamaModel::Load(ModelPath(type), o);
    CHECK(l.ok()) << l.status();
    m = *std::move(l);
  }
  return *m;
}

// CPU seconds every thread of this process has used (pool threads included).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One generation on Folio: prompt {bos}, then kGenerate timed single-token steps; their
// wall seconds are returned, their process CPU seconds go to *cpu_seconds when set.
double FolioGenerate(CpuModelRunner& runner, int32_t bos, double* cpu_seconds = nullptr) {
  SequenceStep seq;
  seq.seq_id = 1;
  seq.sampling.temperature = 0;
  for (int i = 0; i < (kGenerate + 2 + kBlockSize - 1) / kBlockSize; ++i) seq.block_table.push_back(i);
  seq.token_ids = {bos};
  StepInput step;
  step.seqs = {seq};
  absl::StatusOr<StepOutput> out = runner.Execute(step);
  CHECK(out.ok()) << out.status();
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kGenerate; ++i) {
    step.seqs[0].start_pos += static_cast<int32_t>(step.seqs[0].token_ids.size());
    step.seqs[0].token_ids = {out->seqs[0].samples[0].token_id};
    out = runner.Execute(step);
    CHECK(out.ok()) << out.status();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cpu_seconds != nullptr) *cpu_seconds = ProcessCpuSeconds() - cpu0;
  return wall;
}

void BM_FolioDecode(benchmark::State& state, std::string type) {
  FolioEngine& e = Folio(type);
  const std::string load = LoadAverage();
  double cpu = 0;
  for (auto _ : state) {
    double seconds = 0;
    state.SetIterationTime(FolioGenerate(*e.runner, kBos, &seconds));
    cpu += seconds;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(kGenerate, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpu_s/32tok"] =
      benchmark::Counter(cpu / static_cast<double>(state.iterations()));
  state.SetLabel("folio " + type + ", " + std::to_string(g_threads) + " threads, " + load);
}

void BM_LlamaCppDecode(benchmark::State& state, std::string type) {
  reference::LlamaModel& m = Llama(type);
  const std::string load = LoadAverage();
  double cpu = 0;
  for (auto _ : state) {
    double seconds = 0;
    double cpu_seconds = 0;
    absl::StatusOr<std::vector<int32_t>> t =
        m.GreedyIncremental({m.bos()}, kGenerate + 1, &seconds, &cpu_seconds);
    CHECK(t.ok()) << t.status();
    state.SetIterationTime(seconds);
    cpu += cpu_seconds;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(kGenerate, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpu_s/32tok"] =
      benchmark::Counter(cpu / static_cast<double>(state.iterations()));
  state.SetLabel("llama.cpp " + type + ", " + std::to_string(g_threads) + " threads, " + load);
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  int rounds = 5;
  std::vector<std::string> types = {"F16", "Q8_0"};
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(argv[i] + 9);
    } else if (std::string(argv[i]).rfind("--types=", 0) == 0) {
      types = absl::StrSplit(std::string(argv[i] + 8), ',', absl::SkipEmpty());
    } else if (std::string(argv[i]).rfind("--threads=", 0) == 0) {
      folio::worker::g_threads = std::max(1, std::atoi(argv[i] + 10));
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (absl::Status s = folio::reference::ReferenceAvailable(); !s.ok()) {
    LOG(ERROR) << "llama.cpp reference missing (./folio reference): " << s;
    return 1;
  }
  using folio::worker::BM_FolioDecode;
  using folio::worker::BM_LlamaCppDecode;
  for (const std::string& type : types) {
    // Load and touch both engines once (page faults, first-use allocations) before timing.
    folio::worker::FolioEngine& e = folio::worker::Folio(type);
    folio::worker::FolioGenerate(*e.runner, folio::worker::kBos);
    CHECK_EQ(folio::worker::Llama(type).bos(), folio::worker::kBos);
    folio::worker::Llama(type).GreedyIncremental({folio::worker::Llama(type).bos()}, 4, nullptr).IgnoreError();
  }
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& type : types) {
      benchmark::RegisterBenchmark(("folio/" + type + "/round" + std::to_string(r)).c_str(),
                                   BM_FolioDecode, type)
          ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("llama.cpp/" + type + "/round" + std::to_string(r)).c_str(),
                                   BM_LlamaCppDecode, type)
          ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

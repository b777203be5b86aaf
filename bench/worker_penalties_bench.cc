// What penalties, logit_bias and min_tokens cost a decode step: the CPU engine on
// bench-28m-f16.gguf ($FOLIO_MODELS_DIR), 2 threads, 32 sequences sampling at temperature
// 0.8, each with a 128-token context. "penalties:1" gives every sequence presence,
// frequency and repetition penalties, 20 logit_bias entries, a suppressed EOS and a
// history as the scheduler ships it (the prompt's distinct tokens, 96 generated tokens
// with repeats); "penalties:0" gives none. BM_DecodeAlternating runs the two steps in
// turn within one loop, so both see the same machine state, and reports on/off.
// BM_Sample times the sampler alone on those 32 rows, on and off (CPU time, the figure
// least disturbed by a busy machine); BM_SchedulerHistory the scheduler's side: building
// the 32 histories.
//
//   FOLIO_MODELS_DIR=/work/shared/models build/bin/worker_penalties_bench
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "services/scheduler/token_history.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/sampler.h"
#include "services/worker/model/load_model.h"

namespace folio::worker {
namespace {

constexpr int kThreads = 2;
constexpr int kSeqs = 32;
constexpr int kPrompt = 128;
constexpr int kMaxContext = 384;  // then wraps back to kPrompt (slots are rewritten)
constexpr int kBlockSize = 16;
constexpr int kOutput = 96;       // generated tokens in each history

const ModelWeights* Weights() {
  static const ModelWeights* weights = []() -> const ModelWeights* {
    const char* dir = std::getenv("FOLIO_MODELS_DIR");
    if (dir == nullptr) return nullptr;
    absl::StatusOr<std::unique_ptr<ModelWeights>> w =
        LoadModel(std::string(dir) + "/bench-28m-f16.gguf");
    CHECK(w.ok()) << w.status();
    return w->release();
  }();
  return weights;
}

scheduler::RequestSpec PenaltySpec(const std::vector<int32_t>& prompt, int32_t vocab, int s) {
  scheduler::RequestSpec spec;
  spec.prompt = prompt;
  spec.sampling.temperature = 0.8f;
  spec.sampling.seed = 1000 + s;
  spec.sampling.presence_penalty = 0.5f;
  spec.sampling.frequency_penalty = 0.3f;
  spec.sampling.repetition_penalty = 1.2f;
  for (int i = 0; i < 20; ++i) spec.sampling.logit_bias.push_back({(s * 7 + i * 97) % vocab, -2.0f});
  std::sort(spec.sampling.logit_bias.begin(), spec.sampling.logit_bias.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token_id < b.token_id; });
  spec.sampling.logit_bias.erase(
      std::unique(spec.sampling.logit_bias.begin(), spec.sampling.logit_bias.end(),
                  [](const LogitBias& a, const LogitBias& b) { return a.token_id == b.token_id; }),
      spec.sampling.logit_bias.end());
  spec.max_tokens = 256;
  spec.min_tokens = 200;
  return spec;
}

struct Bench {
  std::unique_ptr<CpuModelRunner> runner;
  StepInput plain, penalised;
  std::vector<scheduler::RequestSpec> specs;
  std::vector<std::vector<int32_t>> outputs;
};

std::unique_ptr<Bench> MakeBench() {
  auto b = std::make_unique<Bench>();
  CpuModelRunnerOptions o;
  o.block_size = kBlockSize;
  o.num_threads = kThreads;
  o.kv_cache_bytes = int64_t{kSeqs} * (kMaxContext + kBlockSize) * 8192 + (64 << 20);
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(*Weights(), o);
  CHECK(r.ok()) << r.status();
  b->runner = *std::move(r);
  const ModelConfig& c = b->runner->config();
  const int blocks_per_seq = (kMaxContext + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> ids(kSeqs * blocks_per_seq);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_int_distribution<int32_t> token(3, 3 + 200);  // repeats within a history
  for (int s = 0; s < kSeqs; ++s) {
    SequenceStep seq;
    seq.seq_id = s;
    seq.block_table.assign(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
    seq.sampling.temperature = 0.8f;
    seq.sampling.seed = 1000 + s;
    for (int i = 0; i < kPrompt; ++i) seq.token_ids.push_back(3 + (s * 131 + i * 17) % (c.vocab_size - 3));
    b->plain.seqs.push_back(seq);
    b->specs.push_back(PenaltySpec(seq.token_ids, c.vocab_size, s));
    std::vector<int32_t> out(kOutput);
    for (int32_t& t : out) t = token(rng);
    b->outputs.push_back(out);
  }
  CHECK(b->runner->Execute(b->plain).ok());  // prefill every sequence
  for (int s = 0; s < kSeqs; ++s) {
    SequenceStep& seq = b->plain.seqs[s];
    seq.start_pos = kPrompt;
    seq.token_ids = {5};
  }
  b->penalised = b->plain;
  for (int s = 0; s < kSeqs; ++s) {
    SequenceStep& seq = b->penalised.seqs[s];
    seq.sampling = b->specs[s].sampling;
    seq.history = scheduler::MakeTokenHistory(b->specs[s], scheduler::PromptTokenSet(b->specs[s]),
                                              b->outputs[s], Weights()->vocab.eos_id);
  }
  return b;
}

void Advance(StepInput* step, const StepOutput& out) {
  for (size_t s = 0; s < step->seqs.size(); ++s) {
    SequenceStep& seq = step->seqs[s];
    seq.token_ids[0] = out.seqs[s].samples[0].token_id;
    seq.start_pos = seq.start_pos + 1 < kMaxContext ? seq.start_pos + 1 : kPrompt;
  }
}

void BM_Decode(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  std::unique_ptr<Bench> b = MakeBench();
  StepInput& step = state.range(0) ? b->penalised : b->plain;
  for (auto _ : state) {
    absl::StatusOr<StepOutput> out = b->runner->Execute(step);
    CHECK(out.ok()) << out.status();
    Advance(&step, *out);
  }
  state.counters["tokens/s"] = benchmark::Counter(kSeqs, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(state.range(0) ? "penalties on" : "penalties off");
}

void BM_DecodeAlternating(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  std::unique_ptr<Bench> b = MakeBench();
  double off_s = 0, on_s = 0;
  for (auto _ : state) {
    for (int which = 0; which < 2; ++which) {
      StepInput& step = which ? b->penalised : b->plain;
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<StepOutput> out = b->runner->Execute(step);
      (which ? on_s : off_s) += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(out.ok()) << out.status();
      Advance(&step, *out);
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["off_ms"] = 1e3 * off_s / n;
  state.counters["on_ms"] = 1e3 * on_s / n;
  state.counters["on/off"] = on_s / off_s;
}

void BM_SchedulerHistory(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  std::unique_ptr<Bench> b = MakeBench();
  std::vector<std::vector<int32_t>> prompt_sets;
  for (const auto& spec : b->specs) prompt_sets.push_back(scheduler::PromptTokenSet(spec));
  for (auto _ : state) {
    for (int s = 0; s < kSeqs; ++s) {
      benchmark::DoNotOptimize(
          scheduler::MakeTokenHistory(b->specs[s], prompt_sets[s], b->outputs[s], Weights()->vocab.eos_id));
    }
  }
  state.SetLabel("32 histories");
}

// The sampler alone on the 32 rows of one step (the model's vocabulary, logits from the
// model's own step): what the transform adds, in CPU time, free of the model's cost.
void BM_Sample(benchmark::State& state) {
  if (Weights() == nullptr) {
    state.SkipWithError("set FOLIO_MODELS_DIR (e.g. /work/shared/models)");
    return;
  }
  std::unique_ptr<Bench> b = MakeBench();
  StepInput& step = state.range(0) ? b->penalised : b->plain;
  for (SequenceStep& seq : b->plain.seqs) seq.return_logits = true;
  absl::StatusOr<StepOutput> out = b->runner->Execute(b->plain);
  CHECK(out.ok()) << out.status();
  Sampler sampler;
  int64_t position = kPrompt;
  for (auto _ : state) {
    for (int s = 0; s < kSeqs; ++s) {
      SequenceOutput o;
      sampler.Process(out->seqs[s].logits, step.seqs[s], position, &o);
      benchmark::DoNotOptimize(o.samples[0].token_id);
    }
    ++position;
  }
  state.SetLabel(std::string(state.range(0) ? "penalties on" : "penalties off") + ", vocab " +
                 std::to_string(b->runner->config().vocab_size));
}

BENCHMARK(BM_Decode)->ArgName("penalties")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeAlternating)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sample)->ArgName("penalties")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SchedulerHistory)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace folio::worker

BENCHMARK_MAIN();

// Structured output's cost: one sampling step of 32 sequences over a 128K-token vocabulary,
// constrained by a JSON schema against unconstrained, in the same run.
//
// The step is what structured output adds to: the worker's sampler over 32 logits rows
// (temperature 1, top_p 0.95; random logits), and, constrained, the scheduler's side as
// well: each sequence's matcher advanced by the token it drew and its next mask filled
// (GrammarMatcher::FillNextTokenBitmask), the mask applied before sampling. The model's
// forward pass is left out, so the ratio is an upper bound on the cost in a real step.
// The 32 sequences stand at 32 different points of valid outputs of the schema (random
// walks through the grammar), moving one token per step; the grammar's mask memo is warm,
// as on a server that serves the schema again (BM_MaskMiss times a cold mask).
//
// Vocabulary: arg 0 a random 128K vocabulary (seeded: byte strings of 1 to 10 bytes drawn
// from English-like text, the 256 single bytes included); arg 1 Llama 3's (llama.cpp's
// models/ggml-vocab-llama-bpe.gguf, via the reference; skipped without it).
//
// Second arg: 0 greedy, 1 sampled (temperature 1).
//
//   build/bin/structured_bench --benchmark_filter=Alternating
#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/structured/grammar_matcher.h"
#include "common/structured/json_schema.h"
#include "common/tokenizer/tokenizer.h"
#include "glog/logging.h"
#include "services/worker/engine/sampler.h"
#include "services/worker/model/gguf_vocab.h"
#include "tests/reference/llama_ref.h"

namespace folio::structured {
namespace {

constexpr int kSeqs = 32;
constexpr int kRandomVocab = 128256;

const char kSchema[] = R"({"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 40},
    "author": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 24},
        "born": {"type": "integer", "minimum": 1800, "maximum": 2024}},
      "required": ["name", "born"]},
    "genre": {"enum": ["fiction", "poetry", "history", "science"]},
    "rating": {"type": "number", "minimum": 0, "maximum": 5},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    "published": {"type": "string", "format": "date"}},
  "required": ["title", "author", "genre", "rating", "tags", "published"]})";

std::shared_ptr<const TokenVocabulary> RandomVocabulary() {
  std::mt19937 rng(123);
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  const std::string common = "  eeeettaaoinshrdlucmfwypvbgkqjxz,.\"'{}[]:0123456789-\n";
  std::uniform_int_distribution<int> len(1, 10), pick(0, common.size() - 1);
  while (static_cast<int>(bytes.size()) < kRandomVocab - 1) {
    std::string t;
    for (int n = len(rng); n > 0; --n) t += common[pick(rng)];
    bytes.push_back(t);
  }
  bytes.push_back("");  // EOS
  return std::make_shared<const TokenVocabulary>(std::move(bytes),
                                                 std::vector<int32_t>{kRandomVocab - 1});
}

std::shared_ptr<const TokenVocabulary> Llama3Vocabulary() {
  // Only the vocabulary file is needed, not the reference library.
  absl::StatusOr<Vocab> vocab =
      worker::LoadGgufVocab(reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf");
  if (!vocab.ok()) return nullptr;
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*std::move(vocab));
  if (!t.ok()) return nullptr;
  return TokenVocabulary::FromTokenizer(*t);
}

struct Fixture {
  std::shared_ptr<const TokenVocabulary> vocab;
  std::shared_ptr<const CompiledGrammar> grammar;
  // kSeqs walks: the matcher state before each token of a valid output.
  std::vector<std::vector<GrammarMatcher>> walks;
  std::vector<std::vector<int32_t>> tokens;  // the token each walk took at each state
  std::vector<std::vector<float>> logits;  // [kSeqs][vocab]
};

// Random walks through the grammar: each step takes a random allowed token (or ends).
void Walks(const std::shared_ptr<const CompiledGrammar>& g, int32_t vocab_size, Fixture* f) {
  std::mt19937 rng(7);
  f->walks.resize(kSeqs);
  f->tokens.resize(kSeqs);
  std::vector<uint32_t> mask(BitmaskWords(vocab_size));
  for (int w = 0; w < kSeqs; ++w) {
    auto& walk = f->walks[w];
    GrammarMatcher m(g);
    while (!m.IsTerminated() && walk.size() < 400) {
      walk.push_back(m);
      CHECK(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab_size; ++id) {
        if (BitmaskTest(mask, id) && !m.grammar().vocab().bytes(id).empty()) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      const int32_t id = allowed[rng() % allowed.size()];
      CHECK(m.AcceptToken(id));
      f->tokens[w].push_back(id);
    }
  }
}

Fixture* GetFixture(int which) {
  static Fixture* fixtures[2] = {nullptr, nullptr};
  if (fixtures[which] != nullptr) return fixtures[which];
  std::shared_ptr<const TokenVocabulary> vocab = which == 0 ? RandomVocabulary() : Llama3Vocabulary();
  if (vocab == nullptr) return nullptr;
  auto* f = new Fixture;
  f->vocab = vocab;
  f->grammar = *CompiledGrammar::Create(*JsonSchemaToGrammar(kSchema, {}), vocab);
  Walks(f->grammar, vocab->size(), f);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  f->logits.assign(kSeqs, std::vector<float>(vocab->size()));
  for (auto& row : f->logits) {
    for (float& x : row) x = normal(rng);
  }
  fixtures[which] = f;
  return f;
}

// mode 0: greedy; 1: temperature 1, no truncation (the sampler's cheapest paths, where
// the grammar's share is largest).
worker::SequenceStep SamplingStep(int mode) {
  worker::SequenceStep s;
  s.sampling.temperature = mode == 0 ? 0.0f : 1.0f;
  s.sampling.top_p = 1.0f;
  s.sampling.seed = 5;
  s.num_samples = 1;
  return s;
}

// One step of kSeqs sequences at walk offset `t`; constrained: the scheduler's mask fill
// and advance around the sampler.
void Step(Fixture* f, bool constrained, int64_t t, worker::Sampler* sampler,
          std::vector<worker::SequenceStep>* steps) {
  for (int s = 0; s < kSeqs; ++s) {
    const auto& walk = f->walks[s];
    worker::SequenceStep& seq = (*steps)[s];
    worker::SequenceOutput out;
    if (!constrained) {
      sampler->Process(f->logits[s], seq, t, &out);
      benchmark::DoNotOptimize(out.samples[0].token_id);
      continue;
    }
    GrammarMatcher m = walk[(t + s) % walk.size()];
    seq.history.allowed_token_bitmask.resize(BitmaskWords(f->vocab->size()));
    CHECK(m.FillNextTokenBitmask(absl::MakeSpan(seq.history.allowed_token_bitmask)).ok());
    sampler->Process(f->logits[s], seq, t, &out);
    CHECK(m.AcceptToken(out.samples[0].token_id));
    benchmark::DoNotOptimize(m.IsTerminated());
  }
}

void BM_Step(benchmark::State& state) {
  Fixture* f = GetFixture(static_cast<int>(state.range(0)));
  if (f == nullptr) {
    state.SkipWithError("the Llama 3 vocabulary needs the reference (./folio reference)");
    return;
  }
  const bool constrained = state.range(2) != 0;
  worker::Sampler sampler;
  std::vector<worker::SequenceStep> steps(kSeqs, SamplingStep(static_cast<int>(state.range(1))));
  for (int64_t t = 0; t < 400; ++t) Step(f, constrained, t, &sampler, &steps);  // warm the memo
  int64_t t = 0;
  for (auto _ : state) Step(f, constrained, t++, &sampler, &steps);
  state.SetLabel(absl::StrCat(f->vocab->size(), " tokens, ", state.range(1) ? "sampled" : "greedy",
                              constrained ? ", constrained" : ", free"));
}
BENCHMARK(BM_Step)->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// This thread's CPU time: on a shared machine, wall time counts the other processes too.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Both in one loop, in turn, so a busy machine's drift falls on both alike: the counters
// are each variant's mean step CPU time and their ratio.
void BM_Alternating(benchmark::State& state) {
  Fixture* f = GetFixture(static_cast<int>(state.range(0)));
  if (f == nullptr) {
    state.SkipWithError("the Llama 3 vocabulary needs the reference (./folio reference)");
    return;
  }
  worker::Sampler sampler;
  const int mode = static_cast<int>(state.range(1));
  std::vector<worker::SequenceStep> free_steps(kSeqs, SamplingStep(mode));
  std::vector<worker::SequenceStep> steps(kSeqs, SamplingStep(mode));
  for (int64_t t = 0; t < 400; ++t) Step(f, true, t, &sampler, &steps);
  double free_s = 0, constrained_s = 0;
  int64_t t = 0;
  for (auto _ : state) {
    const double a = ThreadCpuSeconds();
    Step(f, false, t, &sampler, &free_steps);
    const double b = ThreadCpuSeconds();
    Step(f, true, t, &sampler, &steps);
    const double c = ThreadCpuSeconds();
    free_s += b - a;
    constrained_s += c - b;
    ++t;
  }
  state.counters["free_ms"] = 1e3 * free_s / t;
  state.counters["constrained_ms"] = 1e3 * constrained_s / t;
  state.counters["ratio"] = constrained_s / free_s;
  state.SetLabel(absl::StrCat(f->vocab->size(), " tokens, ", mode ? "sampled" : "greedy"));
}
BENCHMARK(BM_Alternating)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// The scheduler's side alone, per step of 32 sequences: each matcher's next mask (a memo
// hit) and its advance by a token.
void BM_SchedulerSide(benchmark::State& state) {
  Fixture* f = GetFixture(static_cast<int>(state.range(0)));
  if (f == nullptr) {
    state.SkipWithError("the Llama 3 vocabulary needs the reference (./folio reference)");
    return;
  }
  std::vector<uint32_t> mask(BitmaskWords(f->vocab->size()));
  const bool advance = state.range(1) != 0;
  int64_t t = 0;
  for (auto _ : state) {
    for (int s = 0; s < kSeqs; ++s) {
      const size_t k = (t + s) % f->tokens[s].size();
      GrammarMatcher m = f->walks[s][k];
      if (advance) {
        CHECK(m.AcceptToken(f->tokens[s][k]));
      } else {
        CHECK(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
      }
      benchmark::DoNotOptimize(mask.data());
    }
    ++t;
  }
  state.SetLabel(absl::StrCat(f->vocab->size(), " tokens, ", advance ? "advance" : "mask"));
}
BENCHMARK(BM_SchedulerSide)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

// A cold mask: the grammar compiled afresh (an empty memo), then the mask of one state of
// each of the 32 walks, each a full walk of the vocabulary trie. per_mask_ms is the mean.
void BM_MaskMiss(benchmark::State& state) {
  Fixture* f = GetFixture(static_cast<int>(state.range(0)));
  if (f == nullptr) {
    state.SkipWithError("the Llama 3 vocabulary needs the reference (./folio reference)");
    return;
  }
  const std::string text = *JsonSchemaToGrammar(kSchema, {});
  std::vector<uint32_t> mask(BitmaskWords(f->vocab->size()));
  double seconds = 0;
  int64_t t = 0, masks = 0;
  for (auto _ : state) {
    std::shared_ptr<const CompiledGrammar> g = *CompiledGrammar::Create(text, f->vocab);
    for (int s = 0; s < kSeqs; ++s) {
      const std::vector<int32_t>& tokens = f->tokens[s];
      const size_t k = (t * 7 + s) % tokens.size();
      GrammarMatcher m(g);
      for (size_t i = 0; i < k; ++i) CHECK(m.AcceptToken(tokens[i]));
      auto a = std::chrono::steady_clock::now();
      CHECK(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      ++masks;
    }
    ++t;
  }
  state.counters["per_mask_ms"] = 1e3 * seconds / static_cast<double>(masks);
  state.SetLabel(absl::StrCat(f->vocab->size(), " tokens"));
}
BENCHMARK(BM_MaskMiss)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(2);

// Compiling a grammar (parse, position table, the ambiguity probe of grammar_matcher.h),
// what a schema's first request pays at Submit: arg 0 the 6-property schema above, 1
// OpenAI's json_object grammar (recursive: the probe runs to its budget).
void BM_Compile(benchmark::State& state) {
  const std::string text =
      state.range(0) == 0 ? *JsonSchemaToGrammar(kSchema, {}) : JsonObjectGrammar();
  auto vocab = std::make_shared<const TokenVocabulary>(std::vector<std::string>{"a"},
                                                       std::vector<int32_t>{});
  for (auto _ : state) {
    auto g = CompiledGrammar::Create(text, vocab);
    CHECK(g.ok()) << g.status();
    benchmark::DoNotOptimize(g->get());
  }
  state.SetLabel(state.range(0) == 0 ? "6-property schema" : "json_object");
}
BENCHMARK(BM_Compile)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace folio::structured

BENCHMARK_MAIN();

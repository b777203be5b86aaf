// Byte-level BPE encoding speed: Folio's Tokenizer against llama.cpp's llama_tokenize
// (through folio_llama_ref) in the same binary, on the same 100 KB of English (Folio's own
// docs/*.md, concatenated in name order and cut at 100 KiB), with the Llama 3 vocabulary
// (llama.cpp's models/ggml-vocab-llama-bpe.gguf). Both run with add_special and
// parse_special on, the way a prompt is encoded. Bytes/s is the throughput; compare the
// two lines of one run.
//
//   build/bin/tokenizer_bench [--benchmark_repetitions=3]
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "services/worker/model/gguf_vocab.h"
#include "tests/reference/llama_ref.h"

namespace folio {
namespace {

constexpr size_t kTextBytes = 100 * 1024;

const std::string& EnglishText() {
  static const std::string* text = [] {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(FOLIO_SOURCE_DIR "/docs")) {
      if (e.path().extension() == ".md") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str();
      if (all.size() >= kTextBytes) break;
    }
    size_t n = std::min(all.size(), kTextBytes);
    while (n > 0 && (static_cast<uint8_t>(all[n]) & 0xC0) == 0x80) --n;  // whole characters
    return new std::string(all.substr(0, n));
  }();
  return *text;
}

std::string VocabPath() {
  return reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
}

void BM_FolioEncode(benchmark::State& state) {
  absl::StatusOr<Vocab> vocab = worker::LoadGgufVocab(VocabPath());
  if (!vocab.ok()) {
    state.SkipWithError(std::string(vocab.status().message()).c_str());
    return;
  }
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*std::move(vocab));
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  const std::string& text = EnglishText();
  size_t num_tokens = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<int32_t>> ids =
        t->Encode(text, AddBos::kVocabDefault, ParseSpecial::kYes);
    benchmark::DoNotOptimize(ids);
    num_tokens = ids->size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(num_tokens);
}
BENCHMARK(BM_FolioEncode)->Unit(benchmark::kMillisecond);

void BM_LlamaTokenize(benchmark::State& state) {
  if (absl::Status s = reference::ReferenceAvailable(); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> m =
      reference::LlamaModel::Load(VocabPath(), reference::LlamaModelOptions{.vocab_only = true});
  if (!m.ok()) {
    state.SkipWithError(std::string(m.status().message()).c_str());
    return;
  }
  const std::string& text = EnglishText();
  size_t num_tokens = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<int32_t>> ids =
        (*m)->Tokenize(text, {.add_special = true, .parse_special = true});
    benchmark::DoNotOptimize(ids);
    num_tokens = ids->size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(num_tokens);
}
BENCHMARK(BM_LlamaTokenize)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace folio

BENCHMARK_MAIN();

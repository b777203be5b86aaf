// llama.cpp as an independent reference for tests and benchmarks: its
// tokenizer, its logits and its quantizer, from the prebuilt libllama that the
// npm package node-llama-cpp ships, and the llama.cpp source of the same
// release (vocabularies with test vectors, chat templates, gguf-py).
//
// `./folio reference` (run by `./folio test`) installs both under
// <build>/reference:
//   node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/   libllama,
//   libggml*, CPU variants llama.cpp/ the source bundle, checked out
// Folio never judges Folio: tests compare against this, never against Folio's
// own output.
//
// Thread-compatible: one LlamaModel per thread. The library's global state
// (backend initialisation, log silencing) is set up once, on first use, under a
// lock.
#ifndef FOLIO_TESTS_REFERENCE_LLAMA_REF_H_
#define FOLIO_TESTS_REFERENCE_LLAMA_REF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct llama_model;
struct llama_context;

namespace folio::reference {

// $FOLIO_REFERENCE_DIR when set, else the build tree's reference folder.
std::string ReferenceDir();
// ReferenceDir() + "/llama.cpp": models/ggml-vocab-*.gguf (+ .inp/.out),
// models/templates/, gguf-py/, include/.
std::string LlamaCppSourceDir();
// OK when the reference is installed (the library was built against it and its
// files are there); otherwise FAILED_PRECONDITION saying how to install it.
absl::Status ReferenceAvailable();
// True when a missing reference must fail tests rather than skip them
// ($FOLIO_REQUIRE_REFERENCE is 1: `./folio test` sets it, so CI cannot pass by
// skipping).
bool ReferenceRequired();

struct LlamaModelOptions {
  bool vocab_only = false;  // tokenizer only: no weights, no context
  int n_ctx = 512;          // context length of the decode context
  int n_threads = 2;
  // K and V cache in q8_0 (llama_context_params type_k = type_v = GGML_TYPE_Q8_0, as
  // `-ctk q8_0 -ctv q8_0`), with flash attention on (llama.cpp needs it for a quantized
  // V cache). false: llama.cpp's default f16 cache.
  bool q8_0_kv = false;
};

struct TokenizeOptions {
  bool add_special = true;    // BOS/EOS as the vocabulary says
  bool parse_special = true;  // control and user-defined tokens written as text are matched
};

struct PieceOptions {
  bool special = true;  // render control tokens as their text
};

// One model (or vocabulary) loaded by llama.cpp, with repacking off
// (`use_extra_bufts = false`: this build crashes on quantized files on some
// CPUs with it on).
class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& path,
                                                          const LlamaModelOptions& options);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  bool IsEndOfGeneration(int32_t token) const;

  absl::StatusOr<std::vector<int32_t>> Tokenize(std::string_view text,
                                                const TokenizeOptions& options) const;
  std::string TokenToPiece(int32_t token, const PieceOptions& options) const;

  // The logits of every position of `tokens`, decoded as one fresh sequence
  // from position 0 (the KV cache is cleared first): [tokens.size()][n_vocab].
  // Needs a non-vocab-only model.
  absl::StatusOr<std::vector<std::vector<float>>> Logits(const std::vector<int32_t>& tokens);
  // Greedy continuation: `n` tokens after `prompt` (argmax of the logits, ties
  // to the lower id); it does not stop at end-of-generation tokens.
  absl::StatusOr<std::vector<int32_t>> Greedy(const std::vector<int32_t>& prompt, int n);
  // The same continuation decoded the way a server does: the prompt once (its last
  // logits give the first token), then n - 1 single-token llama_decode calls on the KV
  // cache (needs prompt + n <= n_ctx). `generate_seconds`, when set, receives the wall
  // time of those n - 1 decodes (argmax included), for benchmarks; `generate_cpu_seconds`
  // the CPU time the whole process spent over them (every thread's, spinning included).
  absl::StatusOr<std::vector<int32_t>> GreedyIncremental(const std::vector<int32_t>& prompt,
                                                         int n, double* generate_seconds,
                                                         double* generate_cpu_seconds = nullptr);

 private:
  LlamaModel() = default;
  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  LlamaModelOptions options_;
};

// llama.cpp's quantizer (`llama_model_quantize`) from `in_path` to `out_path`.
// `ftype` is llama.cpp's name: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K.
absl::Status Quantize(const std::string& in_path, const std::string& out_path,
                      std::string_view ftype, int n_threads);

}  // namespace folio::reference

// In a gtest body: skip when the reference is missing, or fail under `./folio
// test`.
#define FOLIO_SKIP_WITHOUT_REFERENCE()                                              \
  do {                                                                              \
    const absl::Status folio_ref_status = ::folio::reference::ReferenceAvailable(); \
    if (!folio_ref_status.ok()) {                                                   \
      if (::folio::reference::ReferenceRequired()) {                                \
        FAIL() << folio_ref_status;                                                 \
      }                                                                             \
      GTEST_SKIP() << folio_ref_status;                                             \
    }                                                                               \
  } while (0)

#endif  // FOLIO_TESTS_REFERENCE_LLAMA_REF_H_

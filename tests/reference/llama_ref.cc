// Built when CMake found the reference (FOLIO_REFERENCE_LIB_DIR names its
// libraries).
#include "tests/reference/llama_ref.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ggml-backend.h"
#include "llama.h"

namespace folio::reference {
namespace {

// Silence llama.cpp's logging except errors: tests read their own output.
void QuietLog(ggml_log_level level, const char* text, void* /*user*/) {
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

void InitOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(QuietLog, nullptr);
    // The CPU backend is a set of variants (haswell, skylakex, zen4, ...) that
    // ggml picks from at run time; they sit beside libllama.
    ggml_backend_load_all_from_path(FOLIO_REFERENCE_LIB_DIR);
    llama_backend_init();
  });
}

}  // namespace

std::string ReferenceDir() {
  if (const char* d = std::getenv("FOLIO_REFERENCE_DIR"); d != nullptr && *d != '\0') return d;
  return FOLIO_REFERENCE_DEFAULT_DIR;
}

std::string LlamaCppSourceDir() { return ReferenceDir() + "/llama.cpp"; }

absl::Status ReferenceAvailable() {
  for (const std::string& f : {std::string(FOLIO_REFERENCE_LIB_DIR) + "/libllama.v0.5.0.so",
                               LlamaCppSourceDir() + "/include/llama.h"}) {
    if (!std::filesystem::exists(f)) {
      return absl::FailedPreconditionError(absl::StrCat("llama.cpp reference not installed (", f,
                                                        " is missing): run ./folio reference"));
    }
  }
  return absl::OkStatus();
}

bool ReferenceRequired() {
  const char* r = std::getenv("FOLIO_REQUIRE_REFERENCE");
  return r != nullptr && std::string_view(r) == "1";
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path,
                                                             const LlamaModelOptions& options) {
  if (absl::Status s = ReferenceAvailable(); !s.ok()) return s;
  InitOnce();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = options.vocab_only;
  mp.use_extra_bufts = false;
  mp.n_gpu_layers = 0;
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->options_ = options;
  m->model_ = llama_model_load_from_file(path.c_str(), mp);
  if (m->model_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("llama.cpp could not load ", path));
  }
  if (!options.vocab_only) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(options.n_ctx);
    cp.n_batch = static_cast<uint32_t>(options.n_ctx);
    cp.n_ubatch = static_cast<uint32_t>(options.n_ctx);
    cp.n_threads = options.n_threads;
    cp.n_threads_batch = options.n_threads;
    cp.no_perf = true;
    if (options.q8_0_kv) {
      cp.type_k = GGML_TYPE_Q8_0;
      cp.type_v = GGML_TYPE_Q8_0;
      cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    }
    m->ctx_ = llama_init_from_model(m->model_, cp);
    if (m->ctx_ == nullptr) {
      return absl::InternalError(absl::StrCat("llama.cpp could not make a context for ", path));
    }
  }
  return m;
}

LlamaModel::~LlamaModel() {
  if (ctx_ != nullptr) llama_free(ctx_);
  if (model_ != nullptr) llama_model_free(model_);
}

int32_t LlamaModel::n_vocab() const { return llama_vocab_n_tokens(llama_model_get_vocab(model_)); }
int32_t LlamaModel::bos() const { return llama_vocab_bos(llama_model_get_vocab(model_)); }
int32_t LlamaModel::eos() const { return llama_vocab_eos(llama_model_get_vocab(model_)); }
bool LlamaModel::IsEndOfGeneration(int32_t token) const {
  return llama_vocab_is_eog(llama_model_get_vocab(model_), token);
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::Tokenize(std::string_view text,
                                                          const TokenizeOptions& o) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<int32_t> ids(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                             static_cast<int32_t>(ids.size()), o.add_special, o.parse_special);
  if (n < 0 && n != INT32_MIN) {
    ids.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), o.add_special, o.parse_special);
  }
  if (n < 0) return absl::InternalError("llama_tokenize failed");
  ids.resize(static_cast<size_t>(n));
  return ids;
}

std::string LlamaModel::TokenToPiece(int32_t token, const PieceOptions& o) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::string out(64, '\0');
  int32_t n = llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0,
                                   o.special);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0,
                             o.special);
  }
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

absl::StatusOr<std::vector<std::vector<float>>> LlamaModel::Logits(
    const std::vector<int32_t>& tokens) {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("vocab-only model has no logits");
  if (tokens.empty() || static_cast<int>(tokens.size()) > options_.n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokens.size(), " tokens: need 1..n_ctx (", options_.n_ctx, ")"));
  }
  llama_memory_clear(llama_get_memory(ctx_), true);
  llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(tokens.size());
  const int32_t rc = llama_decode(ctx_, batch);
  llama_batch_free(batch);
  if (rc != 0) return absl::InternalError(absl::StrCat("llama_decode returned ", rc));
  const int32_t nv = n_vocab();
  std::vector<std::vector<float>> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* l = llama_get_logits_ith(ctx_, static_cast<int32_t>(i));
    if (l == nullptr) return absl::InternalError("llama_get_logits_ith returned null");
    out[i].assign(l, l + nv);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::Greedy(const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    // A fresh decode of the whole sequence each step: simple, and independent
    // of llama.cpp's KV-cache reuse (the test models are small).
    absl::StatusOr<std::vector<std::vector<float>>> l = Logits(seq);
    if (!l.ok()) return l.status();
    const std::vector<float>& last = l->back();
    const int32_t next =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> LlamaModel::GreedyIncremental(
    const std::vector<int32_t>& prompt, int n, double* generate_seconds,
    double* generate_cpu_seconds) {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("vocab-only model has no logits");
  if (prompt.empty() || static_cast<int>(prompt.size()) + n > options_.n_ctx) {
    return absl::InvalidArgumentError(absl::StrCat(prompt.size(), " + ", n,
                                                   " tokens: need 1..n_ctx (", options_.n_ctx, ")"));
  }
  llama_memory_clear(llama_get_memory(ctx_), true);
  const int32_t nv = n_vocab();
  auto decode = [&](const std::vector<int32_t>& tokens, int32_t pos0) -> absl::StatusOr<int32_t> {
    llama_batch batch = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = pos0 + static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = i + 1 == tokens.size();
    }
    batch.n_tokens = static_cast<int32_t>(tokens.size());
    const int32_t rc = llama_decode(ctx_, batch);
    llama_batch_free(batch);
    if (rc != 0) return absl::InternalError(absl::StrCat("llama_decode returned ", rc));
    const float* l = llama_get_logits_ith(ctx_, -1);
    if (l == nullptr) return absl::InternalError("llama_get_logits_ith returned null");
    return static_cast<int32_t>(std::max_element(l, l + nv) - l);
  };
  absl::StatusOr<int32_t> next = decode(prompt, 0);
  if (!next.ok()) return next.status();
  std::vector<int32_t> out = {*next};
  auto process_cpu = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double cpu0 = process_cpu();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < n; ++i) {
    next = decode({out.back()}, static_cast<int32_t>(prompt.size()) + i - 1);
    if (!next.ok()) return next.status();
    out.push_back(*next);
  }
  if (generate_seconds != nullptr) {
    *generate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (generate_cpu_seconds != nullptr) *generate_cpu_seconds = process_cpu() - cpu0;
  return out;
}

absl::Status Quantize(const std::string& in_path, const std::string& out_path,
                      std::string_view ftype, int n_threads) {
  if (absl::Status s = ReferenceAvailable(); !s.ok()) return s;
  static const auto* kTypes = new absl::flat_hash_map<std::string_view, llama_ftype>{
      {"F32", LLAMA_FTYPE_ALL_F32},          {"F16", LLAMA_FTYPE_MOSTLY_F16},
      {"BF16", LLAMA_FTYPE_MOSTLY_BF16},     {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
      {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
      {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
      {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},     {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
      {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
      {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
      {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
  };
  auto it = kTypes->find(ftype);
  if (it == kTypes->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown llama.cpp file type '", std::string(ftype), "'"));
  }
  InitOnce();
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.nthread = n_threads;
  p.ftype = it->second;
  if (llama_model_quantize(in_path.c_str(), out_path.c_str(), &p) != 0) {
    return absl::InternalError(absl::StrCat("llama_model_quantize ", in_path, " -> ", out_path,
                                            " (", std::string(ftype), ") failed"));
  }
  return absl::OkStatus();
}

}  // namespace folio::reference

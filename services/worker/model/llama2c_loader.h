// Loader for llama2.c checkpoints (the legacy "v0" format of Karpathy's run.c).
//
// Layout (all little-endian): 7 int32 header {dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len}, then f32 tensors, each stacked over layers:
//   tok_emb[vocab, dim], rms_att[L, dim], wq[L, H*hd, dim], wk[L, KV*hd, dim],
//   wv[L, KV*hd, dim], wo[L, dim, H*hd], rms_ffn[L, dim], w1[L, hidden, dim],
//   w2[L, dim, hidden], w3[L, hidden, dim], rms_final[dim],
//   freq_cis_real[seq, hd/2], freq_cis_imag[seq, hd/2], and, only when the header's
//   vocab_size is negative, wcls[vocab, dim] (an unshared classifier).
// The tokenizer is a separate file in the same folder: tok<vocab_size>.bin if present,
// else tokenizer.bin. The views point into the mapped checkpoint (no copies).
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_LLAMA2C_LOADER_H_
#define FOLIO_SERVICES_WORKER_MODEL_LLAMA2C_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

inline constexpr int64_t kLlama2cHeaderBytes = 7 * 4;

// Fills weights->config and every tensor view of `weights` (not the vocab) from a
// checkpoint held in `bytes`; the views point into `bytes`, which must outlive them.
// `name` is used in error messages. InvalidArgument for a bad header (non-positive
// sizes, dim not divisible by n_heads, ...) and for a size that does not match the
// header exactly, with the expected and actual sizes.
absl::Status ParseLlama2cCheckpoint(absl::Span<const uint8_t> bytes, absl::string_view name,
                                    ModelWeights* weights);

// The tokenizer path for a checkpoint: <dir>/tok<vocab_size>.bin if it exists, else
// <dir>/tokenizer.bin if it exists, else NotFound naming both candidates.
absl::StatusOr<std::string> FindLlama2cTokenizer(const std::string& checkpoint_path,
                                                 int32_t vocab_size);

// Maps `path`, parses it and loads the vocabulary found by FindLlama2cTokenizer.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cModel(const std::string& path);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_LLAMA2C_LOADER_H_

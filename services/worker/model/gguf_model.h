// Builds ModelWeights (the Llama family: architectures llama, qwen2, qwen3, see
// architecture.h) from a parsed GGUF file.
//
// Reads the <arch>.* hyper-parameters (attention.key_length, rope.freq_base, linear
// rope.scaling) and the tokenizer.ggml.* vocabulary, finds every
// tensor by its llama.cpp name, checks its type and shape against the configuration,
// and points the views at the tensor data inside the parsed span (no copies). GGUF
// lists dimensions innermost first, so a tensor stored with ne = {in, out} becomes a
// view of shape {out, in}. A missing output.weight means the classifier is tied to
// token_embd.weight; so does an output.weight byte-identical to token_embd.weight (a
// converter's copy of a shared classifier), in which case lm_head views token_embd.
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_GGUF_MODEL_H_
#define FOLIO_SERVICES_WORKER_MODEL_GGUF_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Fills config, tensor views and vocab of `weights` from `gguf`. The views point into
// the span `gguf` was parsed from. Unimplemented for an architecture outside
// architecture.h's table (the message names the supported ones), a tensor the
// architecture has no use for, or a tokenizer model other than "llama" and "gpt2"
// (gguf_vocab.h); InvalidArgument for a missing or
// ill-typed key, a missing tensor, or a shape that does not match the configuration,
// each message naming the file and the key or tensor.
absl::Status BuildLlamaWeights(const GgufFile& gguf, ModelWeights* weights);

// ModelConfig::stored_type for `gguf`: llama.cpp's name for general.file_type when the
// file has a known one, else the upper-cased name of the type with the most tensor bytes.
std::string GgufStoredType(const GgufFile& gguf);

// Maps `path`, parses it as GGUF and builds the weights; they own the mapping.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufModel(const std::string& path);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_GGUF_MODEL_H_

// Loads a Hugging Face checkpoint folder (config.json, model.safetensors or its sharded
// index, tokenizer.json and the optional tokenizer_config.json / generation_config.json)
// into ModelWeights: the Llama family of architecture.h, weights memory-mapped and kept
// as stored (F32, F16, BF16).
//
// Tensors are found by transformers' names (model.embed_tokens, model.layers.N.self_attn.
// q_proj, ..., model.norm, lm_head) and checked against config.json: shape, and dtype
// (torch_dtype, or F32, which checkpoints use for some small tensors). Safetensors shapes
// are row-major [out, in] already, so views take them as they are. Q and K rows stay as
// transformers stores them: the RoPE style comes from RopeStyleFor(arch,
// QkLayout::kHuggingFace) (architecture.h), the one place beside the GGUF case. A tensor
// the architecture has no use for is refused by name (the rotary inv_freq buffers old
// checkpoints carry are skipped: they are derived from config.json). With
// tie_word_embeddings the classifier views model.embed_tokens, as transformers ties it.
// Llama 3.1's RoPE factors are computed from config.json into a buffer the weights own.
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_HF_MODEL_H_
#define FOLIO_SERVICES_WORKER_MODEL_HF_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// True when `path` is a folder holding a config.json (how LoadModel tells a checkpoint
// folder from a model file).
bool IsHfCheckpointDir(const std::string& path);

// Loads the checkpoint folder `dir`. Errors name the file and the key or tensor:
// NotFound for a missing config.json, tokenizer.json, weights file or shard;
// InvalidArgument for malformed files, a missing tensor, a wrong shape or a dtype the
// config does not allow; Unimplemented for an unsupported architecture, RoPE type,
// tokenizer feature or unused tensor.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadHfModel(const std::string& dir);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_HF_MODEL_H_

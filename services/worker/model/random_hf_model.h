// A random-weight Hugging Face checkpoint folder (config.json, model.safetensors or
// shards with model.safetensors.index.json, tokenizer.json, tokenizer_config.json,
// generation_config.json) of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
// Qwen3ForCausalLM, laid out as transformers saves one: tensor names and [out, in]
// shapes of transformers, Q/K rows unpermuted, every tensor in the config's dtype.
//
// Weights are N(0, std) from a seeded generator (the same seed gives the same folder);
// norms are 1 + N(0, 0.1) so a test sees them applied; Qwen2's Q/K/V biases N(0, std).
// The tokenizer is a given tokenizer.json (the vocabulary size is then at least its
// size), or a small byte-level BPE one of Folio's own (MakeByteLevelTokenizerJson).
// For folio-make-model --format=hf and the tests. Free functions; safe to call from
// any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_RANDOM_HF_MODEL_H_
#define FOLIO_SERVICES_WORKER_MODEL_RANDOM_HF_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct RandomHfOptions {
  std::string hf_class = "LlamaForCausalLM";  // config.json architectures[0]
  int32_t dim = 64;
  int32_t hidden_dim = 160;
  int32_t num_layers = 2;
  int32_t num_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 0;       // 0: dim / heads (and no head_dim key)
  int32_t vocab_size = 0;     // 0: the tokenizer's size
  int32_t context_length = 2048;
  DType dtype = DType::kBF16;  // torch_dtype: kBF16, kF16 or kF32
  uint64_t seed = 1234;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  float weight_std = 0.02f;
  float embedding_std = 0.0f;  // of embed_tokens and lm_head; 0: weight_std
  bool tied_embeddings = false;
  // The rope_scaling object as JSON text ("" for null), e.g.
  // {"rope_type": "llama3", "factor": 8.0, ...}.
  std::string rope_scaling_json;
  // Write rope_scaling_json as rope_parameters (transformers >= 4.56), rope_theta inside.
  bool rope_parameters = false;
  int32_t num_shards = 1;      // > 1: model-0000i-of-0000N.safetensors + the index
  std::string tokenizer_json;  // "" -> MakeByteLevelTokenizerJson()
  std::string chat_template;   // written to tokenizer_config.json when not empty
  // tokenizer_config.json bos_token and eos_token ("" -> null); the defaults are Folio's
  // own tokenizer's, so set them for another tokenizer.json.
  std::string bos_token = "<|begin_of_text|>";
  std::string eos_token = "<|eot_id|>";
  std::vector<int32_t> eos_token_ids;  // generation_config.json (empty: no file)
  // Qwen3MoeForCausalLM and MixtralForCausalLM: experts of expert_hidden_dim units
  // (Qwen3-MoE's moe_intermediate_size; Mixtral's are hidden_dim wide), a router of
  // N(0, router_std); norm_topk_prob as given (Qwen3-MoE).
  int32_t num_experts = 8;
  int32_t num_experts_used = 2;
  int32_t expert_hidden_dim = 64;
  float router_std = 0.5f;
  bool norm_topk_prob = true;
  // Phi3ForCausalLM (qkv_proj and gate_up_proj fused): > 0 writes Phi-3.5's LongRoPE,
  // rope_scaling {"type": "longrope", long_factor, short_factor} and a top-level
  // original_max_position_embeddings of this many tokens.
  int32_t longrope_original_context = 0;
  // Gemma2ForCausalLM / Gemma3ForCausalLM: sliding_window (Gemma 3 also writes
  // sliding_window_pattern 6 and rope_local_base_freq 10000), the four norms of a layer
  // (input, post_attention, pre_ and post_feedforward; stored as w for (1 + w), so
  // N(0, 0.1)), hidden_activation gelu_pytorch_tanh, tied embeddings.
  int32_t sliding_window = 16;
  int32_t sliding_window_pattern = 6;  // Gemma 3: every this-th layer is global
};

// A small byte-level BPE tokenizer.json: the 256 byte pieces, a few hundred merges of
// common English letter pairs, the Llama 3 Split pre-tokenizer, and the special tokens
// <|begin_of_text|> (added as BOS by the post-processor), <|end_of_text|>, <|eot_id|>
// appended after the merged pieces.
std::string MakeByteLevelTokenizerJson();

// A small SentencePiece-style tokenizer.json, shaped as Llama 2's and Mistral's: <unk>,
// <s>, </s>, the 256 byte-fallback pieces <0x00>..<0xFF>, "▁" and the printable ASCII
// characters, merged pieces of a few English words with and without "▁"; normalizer
// Prepend("▁") + Replace(" " -> "▁"), no pre-tokenizer, <s> added by the post-processor,
// decoder Replace + ByteFallback + Fuse + Strip.
std::string MakeSentencePieceTokenizerJson();

// Rewrites a legacy SentencePiece-style tokenizer.json (normalizer Prepend("▁") +
// Replace(" " -> "▁"), no pre-tokenizer: Llama 2's, MakeSentencePieceTokenizerJson()) into
// the form transformers' LlamaConverter writes for legacy false (Mistral v0.3, newer
// Llama/Mistral conversions): normalizer null, pre_tokenizer {"type": "Metaspace",
// "replacement": "▁", "prepend_scheme": `prepend_scheme`, "split": `split`}; everything
// else (vocab, merges, added tokens, post-processor, decoder) kept. InvalidArgument when
// `legacy_json` is not such a file or `prepend_scheme` not always/first/never.
absl::StatusOr<std::string> MetaspaceTokenizerJson(const std::string& legacy_json,
                                                   const std::string& prepend_scheme, bool split);

// Writes the folder `dir` (created if absent; files in it are replaced).
// InvalidArgument for impossible options (unknown class, sizes, a vocabulary smaller
// than the tokenizer, a block dtype).
absl::Status WriteRandomHfCheckpoint(const RandomHfOptions& options, const std::string& dir);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_RANDOM_HF_MODEL_H_

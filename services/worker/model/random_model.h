// A random-weight Llama-family model in GGUF form (architecture llama, qwen2, qwen3,
// qwen3moe, gemma2, gemma3 or phi3; llama and qwen3moe with experts),
// for benchmarks, tests and fuzz seeds.
//
// Weights are drawn from N(0, std) with a seeded generator (so a seed always gives the
// same file); norm weights are 1, Q/K norms (qwen3) 1 + N(0, 0.1), Q/K/V biases (qwen2)
// N(0, std). The architecture's tensors and <arch>.* keys are written as llama.cpp's
// converter would: qwen2 has biases, qwen3 Q/K norms; rope_freqs adds Llama 3.1-style
// frequency factors (1 for the fast pairs up to 8 for the slow ones). The vocabulary is SentencePiece-style: <unk>, <s>,
// </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, then filler pieces. All llama.*,
// general.* and tokenizer.ggml.* metadata that LoadModel and llama.cpp read are
// written. Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_RANDOM_MODEL_H_
#define FOLIO_SERVICES_WORKER_MODEL_RANDOM_MODEL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct RandomModelOptions {
  std::string architecture = "llama";  // llama, qwen2 or qwen3
  std::string name = "folio-random";
  int32_t dim = 64;
  int32_t hidden_dim = 172;
  int32_t num_layers = 2;
  int32_t num_heads = 8;
  int32_t num_kv_heads = 4;
  int32_t vocab_size = 512;        // at least kMinRandomVocab
  int32_t context_length = 512;
  DType dtype = DType::kF32;       // of the matrices; norms are always f32
  uint64_t seed = 1234;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  float weight_std = 0.02f;
  float embedding_std = 0.0f;      // of token_embd (and output); 0: weight_std
  int32_t head_dim = 0;            // per-head width; 0: dim / heads, else attention.key_length
  bool rope_freqs = false;         // write rope_freqs.weight (llama only)
  float rope_scaling_factor = 0.0f;  // > 0: rope.scaling.type linear with this factor
  bool tied_embeddings = false;    // omit output.weight
  // Mixture of experts (qwen3moe, or Mixtral-style under llama): num_experts > 0 writes
  // <arch>.expert_count / expert_used_count (and, for qwen3moe,
  // expert_feed_forward_length = expert_hidden_dim, 0: hidden_dim), an f32 router
  // ffn_gate_inp of N(0, router_std) and the 3-D ffn_{gate,up,down}_exps in `dtype`
  // instead of the dense MLP.
  int32_t num_experts = 0;
  int32_t num_experts_used = 0;
  int32_t expert_hidden_dim = 0;
  float router_std = 0.5f;
  // Gemma 2 / 3 (architecture gemma2 or gemma3): post_attention_norm and post_ffw_norm
  // (1 + N(0, 0.1), as the converters store 1 + w), tied embeddings (gemma2 always),
  // Q/K norms (gemma3), and these keys when > 0: <arch>.attention.sliding_window,
  // attn_logit_softcapping and final_logit_softcapping (gemma2; llama.cpp's defaults 50
  // and 30 apply when absent), rope.freq_base_swa.
  int32_t sliding_window = 0;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  float rope_theta_local = 0.0f;
  // phi3: Q/K/V fused in attn_qkv and gate/up in ffn_up (always), and with
  // longrope_original_context > 0 LongRoPE as Phi-3.5's converter writes it:
  // rope.scaling.original_context_length, rope.scaling.attn_factor (sqrt(1 + ln(s) /
  // ln(original)), s = context_length / original) and rope_factors_long / _short.
  int32_t longrope_original_context = 0;
  std::string chat_template;       // written as tokenizer.chat_template when not empty
  // Written as tokenizer.chat_template.<name>.
  std::vector<std::pair<std::string, std::string>> named_chat_templates;
  // A GGUF file (e.g. llama.cpp's models/ggml-vocab-llama-bpe.gguf) whose tokenizer.* keys
  // are copied as they are instead of the SentencePiece vocabulary; vocab_size is then its
  // token count (the option's value is ignored). chat_template and named_chat_templates,
  // when set, replace the file's.
  std::string vocab_from;
  // With vocab_from: tokens given new pieces (id, piece), e.g. Llama 3.0's reserved control
  // tokens named as Llama 3.1 names them (<|python_tag|>). InvalidArgument for an id
  // outside the file's tokens.
  std::vector<std::pair<int32_t, std::string>> rename_tokens;
};

// 3 control tokens + 256 byte tokens.
inline constexpr int32_t kMinRandomVocab = 259;

// InvalidArgument when the options describe an impossible model (an unknown
// architecture, non-positive sizes, dim not divisible by num_heads without head_dim,
// odd head_dim, num_heads not a multiple of num_kv_heads, vocab below kMinRandomVocab,
// q8_0 with dim or hidden_dim not a multiple of 32, rope_freqs on a non-llama model).
absl::Status ValidateRandomModelOptions(const RandomModelOptions& options);

// The SentencePiece-style vocabulary described above, `vocab_size` pieces.
Vocab MakeRandomModelVocab(int32_t vocab_size);

// The GGUF file's bytes. With vocab_from, NotFound / InvalidArgument naming the file when
// it cannot be read or has no tokenizer.ggml.tokens.
absl::StatusOr<std::string> MakeRandomModelGguf(const RandomModelOptions& options);

// Writes the GGUF file to `path`.
absl::Status WriteRandomModel(const RandomModelOptions& options, const std::string& path);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_RANDOM_MODEL_H_

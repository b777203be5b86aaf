// Reads a Hugging Face checkpoint's config.json into a ModelConfig, for the classes
// architecture.h maps to a unit: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, and the mixtures of experts Qwen3MoeForCausalLM and
// MixtralForCausalLM (num_experts / num_local_experts, num_experts_per_tok,
// moe_intermediate_size, norm_topk_prob; see ReadHfExperts).
//
// Keys read (transformers' defaults where a key is absent or null): hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// head_dim, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
// tie_word_embeddings, torch_dtype (or its newer name dtype), hidden_act (silu only),
// attention_bias / mlp_bias (Llama; only Q/K/V biases are supported), partial_rotary_factor
// (1 only), rope_scaling, sliding_window / use_sliding_window / max_window_layers.
//
//  - rope_scaling: null or rope_type "default" (none); "linear" (positions / factor);
//    "llama3" (Llama 3.1's per-frequency divisors, computed here exactly as llama.cpp's
//    converter computes its rope_freqs tensor from factor, low_freq_factor,
//    high_freq_factor and original_max_position_embeddings). Any other type (yarn,
//    dynamic, longrope, ...) is refused by name. transformers >= 4.56 names the object
//    rope_parameters and may put rope_theta inside it: read the same way (it wins over
//    rope_scaling, which must then name the same type; a rope_theta in both must agree).
//  - sliding_window: honoured, never ignored. When the window is active (Mistral: a
//    non-null sliding_window; Qwen2/3: use_sliding_window with a layer at or past
//    max_window_layers) and narrower than max_position_embeddings, the served context is
//    capped at the window, inside which sliding-window attention equals full attention;
//    the cap is logged.
//  - Q/K layout: the unit's RoPE style for a Hugging Face checkpoint comes from
//    RopeStyleFor(arch, QkLayout::kHuggingFace) (architecture.h), the one place that
//    knows GGUF's permuted rows from the unpermuted rotate_half rows.
//
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_HF_CONFIG_H_
#define FOLIO_SERVICES_WORKER_MODEL_HF_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/worker/model/architecture.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct HfConfig {
  ModelConfig config;  // everything but vocab_size checks and qkv_bias/qk_norm presence
  const Architecture* arch = nullptr;
  DType torch_dtype = DType::kBF16;  // the dtype the weights are meant to be stored in
  // Llama 3.1 scaling: [head_dim / 2] frequency divisors; empty otherwise.
  std::vector<float> rope_freqs;
  // rope_parameters.sliding_attention.rope_theta (Gemma 3 in transformers >= 4.57), or 0.
  float rope_theta_local = 0.0f;
};

// Parses `json_text` (the contents of config.json; `name` prefixes errors, e.g. the
// path). InvalidArgument naming the file and key for malformed JSON, a missing or
// ill-typed key, inconsistent head counts; Unimplemented naming the key for an
// unsupported architecture, RoPE type, activation, bias, partial rotary factor or dtype.
absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json_text, absl::string_view name);

// Llama 3.1's RoPE frequency divisors for `head_dim` and `theta` (one per pair), as
// llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors)
// computes them.
std::vector<float> Llama3RopeFreqFactors(int32_t head_dim, float theta, float factor,
                                         float low_freq_factor, float high_freq_factor,
                                         int32_t original_context);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_HF_CONFIG_H_

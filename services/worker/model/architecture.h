// Architecture: one GGUF `general.architecture` the loader understands, as a small named
// unit: its metadata prefix, its RoPE layout and which optional tensors it has. The GGUF
// model loader (gguf_model.h) picks the unit from the file's metadata; adding the next
// Llama-family architecture touches this table (and the forward pass if it needs a new
// operation). Units follow llama.cpp's definitions (llama_model_rope_type and the
// tensor lists of llama-arch.cpp):
//   llama  (Llama 2/3.x, Mistral, Mistral-Nemo): interleaved RoPE (the converter
//          permuted Q/K for it), optional Q/K/V biases, optional rope_freqs (Llama 3.1).
//   qwen2  (Qwen2, Qwen2.5): NEOX RoPE, Q/K/V biases required.
//   qwen3: NEOX RoPE, per-head RMSNorm on Q and K before RoPE, no biases.
//   qwen3moe (Qwen3-MoE): qwen3's attention; every MLP is a mixture of experts
//          (<arch>.expert_count, expert_used_count, expert_feed_forward_length;
//          ffn_gate_inp and ffn_{gate,up,down}_exps).
//   gemma2 (Gemma 2): NEOX RoPE, embeddings scaled by sqrt(dim), GeGLU, RMSNorms after
//          attention and MLP as well as before, attention and final logit softcaps,
//          sliding-window attention on even layers, tied embeddings.
//   gemma3 (Gemma 3 text): gemma2's layout with per-head Q/K RMSNorm instead of the
//          attention softcap, five local layers to one global, local layers with their
//          own RoPE base (rope.freq_base_swa, 10000) and no RoPE scaling.
//   phi3 (Phi-3, Phi-3.5, Phi-4): NEOX RoPE, Q/K/V fused in attn_qkv (or separate), gate
//          and up fused in ffn_up, LongRoPE's rope_factors_long / rope_factors_short
//          and rope.scaling.attn_factor where the file has them; its sliding_window key
//          is ignored, as llama.cpp does.
//   llama also takes Mixtral-style experts (llama.expert_count > 0: ffn_gate_inp and
//          ffn_{gate,up,down}_exps, each expert feed_forward_length wide).
// Immutable table; safe to read from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_ARCHITECTURE_H_
#define FOLIO_SERVICES_WORKER_MODEL_ARCHITECTURE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

enum class TensorPresence { kNone, kOptional, kRequired };

struct Architecture {
  const char* name;          // general.architecture, also the metadata key prefix
  RopeStyle rope_style;
  TensorPresence qkv_bias;   // blk.N.attn_{q,k,v}.bias
  TensorPresence qk_norm;    // blk.N.attn_{q,k}_norm.weight
  TensorPresence rope_freqs; // rope_freqs.weight
  TensorPresence experts;    // <arch>.expert_count and blk.N.ffn_*_exps: a mixture of experts
  int32_t gemma = 0;         // 2 or 3: Gemma's layout and keys (gguf_model.cc ReadGemma)
  bool phi3 = false;         // Phi-3's fused tensors and LongRoPE factors (ReadPhi3)
};

// The unit named `name`, or nullptr.
const Architecture* FindArchitecture(absl::string_view name);

// "'llama', 'qwen2', 'qwen3', 'qwen3moe', 'gemma2', 'gemma3', 'phi3'" for error messages.
std::string SupportedArchitectures();

// Where a model's Q and K projection rows come from, which decides the RoPE pairing:
//   kGguf: as llama.cpp's converter wrote them. For "llama" it permuted each head's rows
//     (convert_hf_to_gguf.py's `permute`) so that adjacent pairs rotate together: the
//     unit's rope_style (interleaved); the other units were written unpermuted (NEOX).
//   kHuggingFace: as a Hugging Face checkpoint stores them, unpermuted, for
//     transformers' `rotate_half`, which turns (i, i + head_dim/2) together: NEOX for
//     every unit.
// The one place that maps a file's Q/K layout to the forward pass's RoPE style.
enum class QkLayout { kGguf, kHuggingFace };
RopeStyle RopeStyleFor(const Architecture& arch, QkLayout layout);

// The unit for a Hugging Face config.json `architectures` entry (LlamaForCausalLM and
// MistralForCausalLM -> llama, Qwen2ForCausalLM -> qwen2, Qwen3ForCausalLM -> qwen3),
// or nullptr.
const Architecture* FindHfArchitecture(absl::string_view hf_class);

// "'LlamaForCausalLM', ..." for error messages.
std::string SupportedHfArchitectures();

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_ARCHITECTURE_H_

// Model weights as loaded from a file: the Llama configuration and typed views of each
// tensor. Views point into a memory-mapped file (or into buffers the loader owns); the
// ModelWeights object owns whatever backs them, so views stay valid for its lifetime.
// Immutable after loading; safe to read from many threads.
#ifndef FOLIO_SERVICES_WORKER_MODEL_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/tokenizer/vocab.h"

namespace folio::worker {

// How a tensor's values are stored. The block types keep a row as whole blocks of
// values (weight_format.h gives each one's geometry and dequantizer).
enum class DType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kQ4_K,
                   kQ5_K, kQ6_K };

const char* DTypeName(DType dtype);

// Rotary embedding layout: kInterleaved rotates adjacent pairs (0,1), (2,3), ... (llama
// GGUFs, whose Q/K rows the converter permuted for it); kNeox rotates (i, i + n/2)
// (qwen2, qwen3), as llama.cpp's llama_model_rope_type says.
enum class RopeStyle { kInterleaved, kNeox };

// A read-only 1-D or 2-D tensor. Shapes are row-major as the math reads them: a
// projection matrix is [out_features, in_features], so row r holds output r's weights
// (a GGUF file lists the same tensor with ne = {in, out}). Block types store each row as
// cols() / block_values whole blocks (weight_format.h); data is never widened in place.
struct TensorView {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  std::vector<int64_t> shape;

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
  int64_t num_elements() const;
};

struct ModelConfig {
  std::string architecture = "llama";
  std::string name;
  // How the weights are stored, for display: llama.cpp's file-type name from
  // general.file_type ("Q4_K_M", "F16", ...), else the type holding most tensor bytes
  // ("Q4_K"); "F32" for llama2.c checkpoints.
  std::string stored_type;
  int32_t dim = 0;          // model width (embedding length)
  int32_t hidden_dim = 0;   // SwiGLU inner width
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;     // per-head width of Q, K and V (attention.key_length; dim / num_heads
                            // unless the file says otherwise)
  int32_t vocab_size = 0;
  int32_t max_seq_len = 0;  // context length the model was trained for
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions times this (1 / factor)
  RopeStyle rope_style = RopeStyle::kInterleaved;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;  // lm_head is tok_embeddings
  bool qkv_bias = false;         // layers have bq, bk, bv (qwen2)
  bool qk_norm = false;          // layers have q_norm, k_norm (qwen3)
  bool rope_freq_factors = false;  // rope_freqs is present (Llama 3.1 scaling)
  // Mixture of experts (qwen3moe; Mixtral-style experts under llama). With num_experts
  // > 0 every layer's MLP is num_experts SwiGLU experts of expert_hidden_dim units and a
  // router: each token takes the num_experts_used experts of highest softmax probability
  // (ties to the lower index), weighted by those probabilities, rescaled to sum to 1 when
  // expert_weights_norm, then times expert_weights_scale. hidden_dim is then unused.
  int32_t num_experts = 0;
  int32_t num_experts_used = 0;
  int32_t expert_hidden_dim = 0;
  bool expert_weights_norm = true;
  float expert_weights_scale = 1.0f;

  bool moe() const { return num_experts > 0; }

  // Gemma 2 / Gemma 3 (each neutral for the other units).
  float embedding_scale = 1.0f;   // token embeddings times this (Gemma: sqrt(dim))
  bool gelu_mlp = false;          // GeGLU, gelu(gate) * up, instead of SwiGLU
  bool post_norms = false;        // each sublayer's output RMS-normalised before the residual
  float attention_scale = 0.0f;   // the query scale; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;      // > 0: attention scores softcapped (Gemma 2)
  float final_softcap = 0.0f;     // > 0: logits softcapped
  // Sliding-window layers: local_layers[l] (empty: none) sees only the last
  // sliding_window positions, with its own RoPE base and linear scale.
  int32_t sliding_window = 0;
  std::vector<bool> local_layers;
  float rope_theta_local = 10000.0f;
  float rope_freq_scale_local = 1.0f;
  // Added to every RMSNorm weight as read (Hugging Face Gemma stores w for its (1 + w);
  // Gemma's GGUFs already hold 1 + w).
  float norm_offset = 0.0f;

  bool is_local(int32_t layer) const {
    return sliding_window > 0 && static_cast<size_t>(layer) < local_layers.size() &&
           local_layers[layer];
  }

  int64_t q_dim() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{num_kv_heads} * head_dim; }
};

struct LayerWeights {
  TensorView attn_norm;  // [dim]
  TensorView wq;         // [num_heads * head_dim, dim]
  TensorView wk;         // [num_kv_heads * head_dim, dim]
  TensorView wv;         // [num_kv_heads * head_dim, dim]
  TensorView wo;         // [dim, num_heads * head_dim]
  TensorView ffn_norm;   // [dim]
  TensorView w_gate;     // [hidden_dim, dim]   (llama2.c w1)
  TensorView w_down;     // [dim, hidden_dim]   (llama2.c w2)
  TensorView w_up;       // [hidden_dim, dim]   (llama2.c w3)
  // Present only when the config says so (data == nullptr otherwise).
  TensorView bq, bk, bv;        // [q_dim], [kv_dim], [kv_dim] (qkv_bias)
  TensorView q_norm, k_norm;    // [head_dim], shared by every head (qk_norm)
  TensorView post_attn_norm, post_ffn_norm;  // [dim] (post_norms)
  // Mixture of experts (config.moe(); then w_gate, w_up and w_down are empty).
  struct Expert {
    TensorView w_gate;  // [expert_hidden_dim, dim]
    TensorView w_up;    // [expert_hidden_dim, dim]
    TensorView w_down;  // [dim, expert_hidden_dim]
  };
  TensorView router;            // [num_experts, dim] (GGUF ffn_gate_inp)
  std::vector<Expert> experts;  // num_experts views (slices of a GGUF file's 3-D tensors)
};

class ModelWeights {
 public:
  virtual ~ModelWeights() = default;

  ModelConfig config;
  TensorView tok_embeddings;  // [vocab_size, dim]
  std::vector<LayerWeights> layers;
  TensorView final_norm;      // [dim]
  TensorView lm_head;         // [vocab_size, dim]; same view as tok_embeddings when tied
  TensorView rope_freqs;      // [head_dim / 2] frequency divisors (rope_freq_factors), f32
  Vocab vocab;

  // Tells the owner of the memory behind `tensors` that nothing reads it any more (a
  // runner that repacked them): a memory-mapped file drops the whole pages their union
  // covers from the resident set and the page cache (they fault back in from the file
  // if read again; a page shared with a tensor not listed stays). The default does
  // nothing, for weights held in ordinary buffers. Safe from any thread.
  virtual void ReleasePages(absl::Span<const TensorView> tensors) const { (void)tensors; }
  void ReleasePages(const TensorView& t) const { ReleasePages(absl::MakeConstSpan(&t, 1)); }

  // Bytes of the model file(s) mapped behind the views; 0 for weights in buffers.
  virtual int64_t file_bytes() const { return 0; }
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_WEIGHTS_H_

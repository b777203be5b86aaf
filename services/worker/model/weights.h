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

#include "common/tokenizer/vocab.h"

namespace folio::worker {

enum class DType { kF32, kF16, kBF16, kQ8_0 };

const char* DTypeName(DType dtype);

// A read-only 1-D or 2-D tensor. Shapes are row-major as the math reads them: a
// projection matrix is [out_features, in_features], so row r holds output r's weights
// (a GGUF file lists the same tensor with ne = {in, out}). For kQ8_0, rows are stored in
// blocks of 32 values: an f16 scale followed by 32 int8s (34 bytes per block).
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
  int32_t dim = 0;          // model width (embedding length)
  int32_t hidden_dim = 0;   // SwiGLU inner width
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;     // dim / num_heads
  int32_t vocab_size = 0;
  int32_t max_seq_len = 0;  // context length the model was trained for
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;  // lm_head is tok_embeddings
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
};

class ModelWeights {
 public:
  virtual ~ModelWeights() = default;

  ModelConfig config;
  TensorView tok_embeddings;  // [vocab_size, dim]
  std::vector<LayerWeights> layers;
  TensorView final_norm;      // [dim]
  TensorView lm_head;         // [vocab_size, dim]; same view as tok_embeddings when tied
  Vocab vocab;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_WEIGHTS_H_

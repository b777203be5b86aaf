// CpuWeights: the model's weights as f32 matrices laid out for the CPU forward pass.
//
// Weights are converted to f32 once, at load time (f16/bf16/q8_0 are widened with the
// model library's dequant helpers): OpenBLAS sgemm then runs every projection, at the
// cost of 4 bytes per parameter in memory. Projections that read the same input are
// fused into one matrix so a step runs one GEMM for them: Q, K and V become wqkv
// [q_dim + 2 * kv_dim, dim]; gate and up become w_gate_up [2 * hidden_dim, dim].
// Immutable after Create; safe to read from many threads.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wqkv;       // [q_dim + 2 * kv_dim, dim]: rows of wq, then wk, then wv
  std::vector<float> wo;         // [dim, q_dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w_gate_up;  // [2 * hidden_dim, dim]: rows of w_gate, then w_up
  std::vector<float> w_down;     // [dim, hidden_dim]
};

struct CpuWeights {
  ModelConfig config;
  std::vector<float> tok_embeddings;  // [vocab_size, dim]
  std::vector<CpuLayerWeights> layers;
  std::vector<float> final_norm;      // [dim]
  std::vector<float> lm_head;         // [vocab_size, dim]; empty when tied to tok_embeddings

  const float* lm_head_data() const {
    return lm_head.empty() ? tok_embeddings.data() : lm_head.data();
  }

  // Checks the configuration and every tensor's shape (InvalidArgument naming the
  // tensor on a mismatch) and converts.
  static absl::StatusOr<CpuWeights> Create(const ModelWeights& weights);
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_

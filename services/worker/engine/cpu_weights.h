// CpuWeights: one rank's weights widened to f32 matrices, the host staging of the CUDA
// runner's upload. (The CPU runner keeps weights as stored: weight_shard.h.) This file
// also holds the tensor-parallel split helpers both use.
//
// Weights are converted to f32 (any stored type, with the model library's dequant
// helpers), at the cost of 4 bytes per parameter in memory. Projections that read the same input are
// fused into one matrix so a step runs one GEMM for them: Q, K and V become wqkv
// [q_dim + 2 * kv_dim, dim]; gate and up become w_gate_up [2 * hidden_dim, dim].
//
// Tensor parallelism (Megatron style) over `TpShard{rank, size}`: each rank converts only
// its slice of the memory-mapped tensors, nothing more.
//   - Column-parallel (a slice of output rows): wq, wk, wv by whole heads (rank r holds
//     query heads [r*H/tp, (r+1)*H/tp) and KV heads [r*KV/tp, (r+1)*KV/tp), which keeps
//     every query head with its GQA KV head), w_gate and w_up by a range of hidden units.
//   - Row-parallel (a slice of input columns, the same ranges): wo and w_down. Their
//     outputs are partial sums that the runner all-reduces.
//   - Vocab-parallel: tok_embeddings and lm_head by a range of vocabulary rows.
//   - Replicated: the norms.
// The number of KV heads must divide by the TP degree (InvalidArgument otherwise: KV
// heads are split, never replicated); hidden_dim and vocab_size may split unevenly.
// With TpShard{0, 1} (the default) the rank holds the whole model.
// Immutable after Create; safe to read from many threads.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_
#define FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Which tensor-parallel rank of how many.
struct TpShard {
  int32_t rank = 0;
  int32_t size = 1;
};

// Rank `rank`'s part [begin, end) of n items split over `size` ranks as evenly as whole
// items allow: [n * rank / size, n * (rank + 1) / size).
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange SplitEvenly(int64_t n, int32_t size, int32_t rank);

// OK when a model of this shape splits over shard.size ranks and shard.rank is one of
// them; InvalidArgument saying why not otherwise (KV heads that do not divide, ...).
absl::Status CheckTpShard(const ModelConfig& config, TpShard shard);

struct CpuLayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wqkv;       // [q_dim + 2 * kv_dim, dim] (this rank's heads): wq, wk, wv rows
  std::vector<float> wo;         // [dim, q_dim] (this rank's heads' columns)
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w_gate_up;  // [2 * hidden_dim, dim] (this rank's units): w_gate, w_up rows
  std::vector<float> w_down;     // [dim, hidden_dim] (this rank's units' columns)

  int64_t size_bytes() const;
};

struct CpuWeights {
  ModelConfig config;  // the whole model's shape
  TpShard shard;
  // This rank's share of the model (the whole model when shard.size == 1).
  int32_t num_heads = 0;     // query heads
  int32_t num_kv_heads = 0;  // KV heads (and so the KV cache's heads)
  int32_t hidden_dim = 0;    // SwiGLU units
  ShardRange vocab;          // vocabulary rows of tok_embeddings and lm_head

  std::vector<float> tok_embeddings;  // [vocab.size(), dim]: rows vocab.begin ..
  std::vector<CpuLayerWeights> layers;
  std::vector<float> final_norm;      // [dim]
  std::vector<float> lm_head;         // [vocab.size(), dim]; empty when tied to tok_embeddings

  const float* lm_head_data() const {
    return lm_head.empty() ? tok_embeddings.data() : lm_head.data();
  }

  int64_t q_dim() const { return int64_t{num_heads} * config.head_dim; }
  int64_t kv_dim() const { return int64_t{num_kv_heads} * config.head_dim; }

  // Bytes of f32 this rank holds: all of it, and the transformer layers' part alone.
  int64_t size_bytes() const;
  int64_t layer_bytes() const;

  // Checks the configuration, the shard and every tensor's shape (InvalidArgument naming
  // the tensor on a mismatch, or saying why the model does not split over shard.size
  // ranks) and converts this rank's slices.
  static absl::StatusOr<CpuWeights> Create(const ModelWeights& weights, TpShard shard = {});
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_CPU_WEIGHTS_H_

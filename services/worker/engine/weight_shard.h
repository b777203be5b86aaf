// WeightShard: one tensor-parallel rank's weights as typed views into the model's
// tensors (the memory-mapped file), never widened: the CPU runner's weights.
//
// Each projection is a ShardMatrix: the row ranges and column range of the stored
// tensors that this rank multiplies by, in output order, so Q, K and V form one matrix
// (and gate and up another) without a copy. typed() gives it to the kernels
// (kernels/typed_gemm.h), each part with its stored type's dequantizer
// (model/weight_format.h). Only the small vectors are f32 copies: norms, biases, the
// Q/K norms and the RoPE frequency factors.
//
// Tensor parallelism (Megatron style) over TpShard{rank, size}, as in cpu_weights.h:
// Q/K/V rows (and their biases) by whole heads, gate/up rows and down columns by a
// range of hidden units, wo columns by this rank's query heads, embeddings and LM head
// by vocabulary rows; norms (and Q/K norms) replicated. A column split must start on a
// block of the stored type (32 values for the legacy quantizations, 256 for K-quants):
// hidden units are split in whole blocks of w_down's type, and a head split that would
// cut a block of wo is refused (InvalidArgument saying which tensor, its type and the
// TP degree that would work).
// Immutable after Create; safe to read from many threads. The tensors' memory must
// outlive it (the ModelWeights it came from).
#ifndef FOLIO_SERVICES_WORKER_ENGINE_WEIGHT_SHARD_H_
#define FOLIO_SERVICES_WORKER_ENGINE_WEIGHT_SHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// The typed-matmul kernel family of a stored type: kF16, kBF16, kQ8_0 and the 4/5/6-bit
// block types (q4_0..q5_1, q4_K, q5_K, q6_K) have their own integer or half kernels;
// every other type is kOther, read through its dequantizer.
kernels::StoredKind StoredKindOf(DType dtype);

struct ShardMatrix {
  struct Part {
    TensorView tensor;  // the whole stored tensor [rows, cols]
    std::string name;   // for messages
    ShardRange rows;    // its rows this matrix uses, in order
  };
  std::vector<Part> parts;  // output features in order
  ShardRange cols;          // the same columns of every part: [cols.begin, cols.end)

  int64_t out() const;
  int64_t in() const { return cols.size(); }
  bool all_of(DType dtype) const;
  // Bytes of stored data this matrix reads.
  int64_t stored_bytes() const;
  kernels::TypedMatrix typed() const;
};

struct ShardLayer {
  std::vector<float> attn_norm;  // [dim]
  ShardMatrix qkv;               // [q_dim + 2 * kv_dim, dim] (this rank's heads)
  std::vector<float> qkv_bias;   // [q_dim + 2 * kv_dim] or empty
  std::vector<float> q_norm;     // [head_dim] or empty
  std::vector<float> k_norm;     // [head_dim] or empty
  ShardMatrix wo;                // [dim, q_dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> post_attn_norm;  // [dim] or empty (config.post_norms)
  std::vector<float> post_ffn_norm;   // [dim] or empty
  ShardMatrix gate_up;           // [2 * hidden_dim, dim]: this rank's gate rows, then up rows
  ShardMatrix down;              // [dim, hidden_dim]
  // Mixture of experts (config.moe(); gate_up and down are then empty): the router,
  // whole on every rank, and this rank's expert_hidden_dim units of each expert, split
  // as the dense MLP's hidden units are (so every rank routes alike and runs every
  // chosen expert on its slice; the down projection's partial sums are all-reduced).
  // Routing alike needs every rank's router GEMM to give the same bits: the all-reduce
  // leaves the same activations everywhere, and the ranks must run the same kernels
  // (the same CPU kind), as a tensor-parallel group on one machine kind does.
  struct Expert {
    ShardMatrix gate_up;  // [2 * expert_hidden_dim, dim]
    ShardMatrix down;     // [dim, expert_hidden_dim]
  };
  ShardMatrix router;            // [num_experts, dim]
  std::vector<Expert> experts;   // num_experts
};

struct WeightShard {
  ModelConfig config;  // the whole model's shape
  TpShard shard;
  int32_t num_heads = 0;     // this rank's query heads
  int32_t num_kv_heads = 0;  // this rank's KV heads
  int32_t hidden_dim = 0;    // this rank's SwiGLU units (dense MLPs)
  int32_t expert_hidden_dim = 0;  // this rank's units of each expert (config.moe())
  ShardRange vocab;          // vocabulary rows of the embeddings and the LM head

  ShardMatrix tok_embeddings;     // [vocab.size(), dim]
  ShardMatrix lm_head;            // [vocab.size(), dim]; tok_embeddings' tensor when tied
  std::vector<float> final_norm;  // [dim]
  std::vector<float> rope_freqs;  // [head_dim / 2] or empty
  std::vector<ShardLayer> layers;

  int64_t q_dim() const { return int64_t{num_heads} * config.head_dim; }
  int64_t kv_dim() const { return int64_t{num_kv_heads} * config.head_dim; }

  // Checks the configuration, every tensor's shape and type, and the split; then takes
  // this rank's views. InvalidArgument naming the tensor (or the reason the model does
  // not split over shard.size ranks) otherwise.
  static absl::StatusOr<WeightShard> Create(const ModelWeights& weights, TpShard shard = {});
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_WEIGHT_SHARD_H_

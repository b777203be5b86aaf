// CpuModelRunner: the CPU backend of ModelRunner. Runs the Llama forward pass over a
// whole step at once: all new tokens of all sequences form one [num_tokens, dim]
// activation matrix, so every projection is one OpenBLAS sgemm for the batch, and
// attention reads the paged KV cache through each sequence's block table.
//
//   embed -> for each layer:
//              RMSNorm -> fused QKV GEMM -> RoPE(q, k) -> write K/V into slots
//              -> paged attention (GQA) -> wo GEMM (+ residual)
//              -> RMSNorm -> fused gate/up GEMM -> SwiGLU -> down GEMM (+ residual)
//         -> final RMSNorm and LM head, only for the last row of each sequence that
//            needs logits -> sampling
//
// Owns its f32 weights (cpu_weights.h), the KV cache, a thread pool for the kernels and
// the activation buffers. By default (GemmThreading::kPacked) every projection's weights
// are also packed once, at creation, into the panels of Folio's own GEMM kernel
// (packed_gemm.h), which runs on the kernels' pool: OpenBLAS would repack the weights on
// every call. kKernelPool runs OpenBLAS sgemm on the same pool (each thread one slice of
// output features, OpenBLAS's process-wide thread count set to 1), so no OpenBLAS thread
// spins while attention runs; kOpenBlas hands the GEMMs to OpenBLAS's threads instead
// (its count set to num_threads). Once packed, the f32 projection matrices are released,
// so under kPacked a model costs its panels (f16 for a model shipped in f16, whose
// matrices pack losslessly in f16 on the AVX2 path; f32 otherwise) plus the f32
// embeddings and norms. The OpenBLAS modes keep and read the f32 matrices; they are kept
// to measure against.
// Tensor parallelism: given a Communicator of world size tp, the runner is one rank. It
// holds only its shard of the weights (cpu_weights.h) and its KV heads, and every rank of
// the group must Execute the same steps in the same order (the collectives pair up by
// order). Per step it issues 1 + 2 * num_layers all-reduces of [num_tokens, dim] f32 (the
// vocab-parallel embedding, then each layer's attention output and MLP output) and, when
// any sequence needs logits, one gather of the logit rows to rank 0. Only rank 0 samples:
// the other ranks answer each sequence with its seq_id and nothing else.
//
// Thread-compatible: one step thread calls Execute.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_CPU_MODEL_RUNNER_H_
#define FOLIO_SERVICES_WORKER_ENGINE_CPU_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/engine/kv_cache.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/engine/sampler.h"
#include "services/worker/engine/step.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/packed_gemm.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// How the GEMMs run.
enum class GemmThreading {
  kOpenBlas,    // OpenBLAS sgemm on its own threads (set to num_threads)
  kKernelPool,  // OpenBLAS sgemm on the runner's pool: output features split, OpenBLAS at 1 thread
  kPacked,      // Folio's kernel on weights packed at creation, on the runner's pool
};

struct CpuModelRunnerOptions {
  int32_t block_size = 16;                              // tokens per KV block
  kernels::KvDType kv_dtype = kernels::KvDType::kF16;   // KV cache element type
  int64_t kv_cache_bytes = int64_t{256} << 20;          // budget for the KV pool
  int64_t max_num_blocks = 0;                           // cap on the pool; 0 = what fits
  int32_t num_threads = 0;                              // kernels and OpenBLAS; 0 = all cores
  kernels::CpuIsa isa = kernels::BestCpuIsa();          // kernels' path (tests force one)
  GemmThreading gemm_threading = GemmThreading::kPacked;
  // The tensor-parallel group this runner is one rank of (not owned; must outlive the
  // runner). Null: the whole model on this runner.
  Communicator* communicator = nullptr;
};

class CpuModelRunner final : public ModelRunner {
 public:
  // Converts the weights (the runner keeps no reference to `weights`) and allocates the
  // KV pool. InvalidArgument for an unsupported or inconsistent model or bad options.
  static absl::StatusOr<std::unique_ptr<CpuModelRunner>> Create(
      const ModelWeights& weights, const CpuModelRunnerOptions& options);

  absl::StatusOr<StepOutput> Execute(const StepInput& step) override;

  const ModelConfig& config() const override { return weights_.config; }
  int32_t block_size() const override { return kv_->shape().block_size; }
  int64_t num_blocks() const override { return kv_->num_blocks(); }

  const KvCache& kv_cache() const { return *kv_; }
  // This rank's weights (its shard under tensor parallelism): its shape, the norms and
  // the embeddings. Under kPacked the projection matrices (and an untied LM head) live
  // only in their packed panels, and their f32 vectors here are empty.
  const CpuWeights& weights() const { return weights_; }
  // Bytes of weights this runner holds (f32 and packed), and of those the transformer
  // layers'.
  int64_t weight_bytes() const;
  int64_t layer_weight_bytes() const;
  int32_t num_threads() const { return pool_.num_threads(); }

 private:
  CpuModelRunner(CpuWeights weights, std::unique_ptr<KvCache> kv, int32_t num_threads,
                 const CpuModelRunnerOptions& options);

  bool tensor_parallel() const { return comm_ != nullptr && comm_->world_size() > 1; }

  // Final norm and LM head for the rows that need logits; on rank 0 leaves the full
  // [num_logit_rows, vocab_size] logits in logits_ (gathered from every rank's slice).
  absl::Status ComputeLogits(const std::vector<int64_t>& logit_rows, int64_t num_logit_rows);

  // One projection's weights: row-major [out, in], and packed under kPacked.
  struct Linear {
    const float* w = nullptr;
    int64_t out = 0;
    int64_t in = 0;
    kernels::PackedMatrix packed;
  };
  struct LayerLinears {
    Linear qkv, wo, gate_up, down;
  };

  // y = x . w^T (+ beta * y) the way gemm_threading_ says.
  void Gemm(const float* x, int64_t ldx, int64_t rows, const Linear& w, float beta, float* y,
            int64_t ldy);

  // Grows the activation buffers for a step of num_tokens tokens, num_logit_rows rows.
  void Reserve(int64_t num_tokens, int64_t num_logit_rows);

  CpuWeights weights_;  // projections released after packing under kPacked
  std::unique_ptr<KvCache> kv_;
  kernels::ThreadPool pool_;
  const kernels::CpuIsa isa_;
  const GemmThreading gemm_threading_;
  Sampler sampler_;
  Communicator* const comm_;  // null without tensor parallelism
  std::vector<LayerLinears> linears_;  // per layer; w points into weights_ unless kPacked
  Linear lm_head_;                     // this rank's vocabulary rows

  // Per-step buffers, reused across steps.
  std::vector<float> x_;        // [num_tokens, dim] residual stream
  std::vector<float> xb_;       // [num_tokens, dim] normalised input of a sublayer
  std::vector<float> qkv_;      // [num_tokens, q_dim + 2 * kv_dim]
  std::vector<float> attn_;     // [num_tokens, q_dim]
  std::vector<float> gate_up_;  // [num_tokens, 2 * hidden_dim]
  std::vector<float> hidden_;   // [num_tokens, hidden_dim]
  std::vector<float> logits_;   // [num_logit_rows, vocab_size] (rank 0)
  // Tensor parallelism: this rank's logit slice, padded to the largest slice
  // [num_logit_rows, vocab_chunk], and what rank 0 gathers [tp, num_logit_rows, vocab_chunk].
  std::vector<float> local_logits_;
  std::vector<float> gathered_logits_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_CPU_MODEL_RUNNER_H_

// CpuModelRunner: the CPU backend of ModelRunner. Runs the forward pass of the Llama
// family (llama 2/3.x and Mistral, qwen2, qwen3, gemma2, gemma3, and the mixtures of
// experts qwen3moe and Mixtral-style llama) over a whole step at once: all new
// tokens of all sequences form one [num_tokens, dim] activation matrix, so every
// projection is one GEMM for the batch, and attention reads the paged KV cache through
// each sequence's block table.
//
//   embed (x sqrt(dim): Gemma) -> for each layer:
//              RMSNorm -> fused QKV GEMM (+ bias: qwen2) -> per-head RMSNorm of q, k
//              (qwen3) -> RoPE(q, k) (interleaved or NEOX, scaled) -> write K/V into slots
//              -> paged attention (GQA; Gemma: sliding windows on local layers, which
//              also take their own RoPE base; Gemma 2: softcapped scores) -> wo GEMM
//              (+ residual; Gemma: RMSNorm of the output first, the "post-norm")
//              -> RMSNorm -> fused gate/up GEMM -> SwiGLU (Gemma: GeGLU) -> down GEMM
//                 (+ residual; Gemma: post-norm first)
//                 or, in a mixture of experts: router GEMM -> top-k routing
//                 (moe_routing.h) -> per chosen expert, its tokens' rows gathered ->
//                 gate/up GEMM -> SwiGLU -> down GEMM -> weighted sum (+ residual);
//                 each expert's weights are read once a step, whatever the batch
//         -> final RMSNorm and LM head (Gemma 2: logits softcapped), only for the last
//            row of each sequence that
//            needs logits -> sampling
//
// Weights stay as stored (weight_shard.h: typed views into the memory-mapped file). Under
// GemmThreading::kPacked (the default) each projection runs one of two ways:
//   - packed: f32 and (on AVX2, unless options.f16_panels is off) f16 and bf16
//     projections (bf16 only when oneDNN does not take its batches, see bf16_gemm) are
//     repacked once, at creation, into the panels of Folio's own GEMM kernel
//     (packed_gemm.h) in the same precision, so the panels take the bytes the file did;
//     the file pages each matrix came from are released as soon as it is packed
//     (ModelWeights::ReleasePages), so resident memory, at its peak during the load too,
//     holds no more than one matrix twice;
//   - typed: every other type is read in place from the mapping by kernels/typed_gemm.h:
//     q8_0 (and f16 / bf16 without panels) by their own SIMD kernels (the best path CPUID
//     offers: AVX2, AVX-512, VNNI, BF16; portable when options.isa is kPortable), q4_0 ...
//     q6_K a few rows dequantized at a time. No second copy of these weights exists.
//     With options.bf16_gemm (folio-worker's --bf16_gemm), all-bf16 projections at
//     >= onednn_min_rows token rows run oneDNN's bf16 matmul on the same stored rows
//     (kernels/onednn_gemm.h: no copy either), on this runner's thread count, unless
//     they are blocked (below). With
//     options.dequant_min_rows > 0 (--dequant_gemm_min_rows), the other typed
//     projections (q8_0, the 4/5/6-bit blocks) at >= that many rows are dequantized to
//     bf16 a chunk of rows per thread at a time and multiplied by oneDNN
//     (OnednnGemm::LinearDequantized): one chunk per thread is resident, not a copy;
//   - blocked: where oneDNN takes BF16 batches, runs on a CPU with AVX-512 and keeps bf16
//     weights in its BA16a64b2a layout (and options.bf16_blocked is on), all-bf16
//     projections are copied once, at creation, into that layout
//     (kernels/blocked_bf16.h; the file pages released as for panels): oneDNN reads it
//     as it is at >= onednn_min_rows rows and Folio's GEMV below that.
// Nothing is widened to f32 beyond the norms, biases and small per-thread buffers.
// kKernelPool and kOpenBlas run OpenBLAS sgemm on f32 copies of the projections (widened
// at creation: 4 bytes a weight, against the memory rule) and are kept to measure against.
// Tensor parallelism: given a Communicator of world size tp, the runner is one rank. It
// holds only its shard of the weights (weight_shard.h) and its KV heads, and every rank of
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
#include "absl/types/span.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/engine/weight_shard.h"
#include "services/worker/engine/kv_cache.h"
#include "services/worker/engine/kv_layer_groups.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/engine/moe_routing.h"
#include "services/worker/engine/sampler.h"
#include "services/worker/engine/step.h"
#include "services/worker/kernels/blocked_bf16.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/onednn_gemm.h"
#include "services/worker/kernels/packed_gemm.h"
#include "services/worker/kernels/rope.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// How the GEMMs run.
enum class GemmThreading {
  kOpenBlas,    // OpenBLAS sgemm on its own threads (set to num_threads)
  kKernelPool,  // OpenBLAS sgemm on the runner's pool: output features split, OpenBLAS at 1 thread
  kPacked,      // Folio's kernel on weights packed at creation, on the runner's pool
};

// Who multiplies BF16 projections at >= onednn_min_rows token rows (kPacked only; fewer
// rows always take Folio's kernels). kOnednn: oneDNN's bf16 matmul on the stored rows
// (kernels/onednn_gemm.h; Create fails when the build or the CPU has none); kAuto: oneDNN
// when it can run here, else Folio's kernels (logged); kFolio: Folio's kernels always.
// oneDNN sums in its own order, so with it a row's result depends on whether its step had
// >= onednn_min_rows rows (not batch-invariant); kFolio keeps every row's sum the same.
enum class Bf16Gemm { kFolio, kAuto, kOnednn };
const char* Bf16GemmName(Bf16Gemm g);
// The threshold measured for oneDNN against Folio's bf16 kernels (docs/benchmarks.md,
// issue 21).
inline constexpr int32_t kDefaultOnednnMinRows = 8;

// The threshold measured for quantized projections dequantized into oneDNN's bf16
// matmul against Folio's integer kernels (docs/benchmarks.md, issue 21).
inline constexpr int32_t kDefaultDequantMinRows = 32;

struct CpuModelRunnerOptions {
  int32_t block_size = 16;                              // tokens per KV block
  kernels::KvDType kv_dtype = kernels::KvDType::kF16;   // KV cache element type
  int64_t kv_cache_bytes = int64_t{256} << 20;          // budget for the KV pool
  int64_t max_num_blocks = 0;                           // cap on the pool; 0 = what fits
  int32_t num_threads = 0;                              // kernels and OpenBLAS; 0 = all cores
  kernels::CpuIsa isa = kernels::BestCpuIsa();          // kernels' path (tests force one)
  GemmThreading gemm_threading = GemmThreading::kPacked;
  // kPacked with AVX2: repack f16 (and, when oneDNN does not take them, bf16) projections
  // into f16 / bf16 panels of the packed GEMM (the same bytes; the file pages are
  // released) instead of reading them in place with the typed kernels. Either way one copy
  // of the weights is resident. On by default: the panels measured faster (bench-28m
  // prefill and batched decode ~1.6x less CPU, 1.1B single-stream decode ~1.3x;
  // docs/benchmarks.md, issues 20 and 21).
  bool f16_panels = true;
  Bf16Gemm bf16_gemm = Bf16Gemm::kFolio;  // folio-worker's --bf16_gemm decides its default
  // With oneDNN for BF16 (bf16_gemm not kFolio): BF16 projections in oneDNN's blocked
  // layout, one copy for its batches and Folio's few-row GEMV (off: oneDNN on the stored
  // rows and Folio's in-place bf16 kernel below onednn_min_rows; kept to measure against).
  bool bf16_blocked = true;
  int32_t onednn_min_rows = kDefaultOnednnMinRows;
  // Quantized typed projections (not f16/bf16) at >= this many token rows: dequantized
  // to bf16 by chunks and multiplied by oneDNN (kPacked, SIMD isa, a build and CPU with
  // oneDNN; otherwise Folio's kernels). 0: never (every row's sum the same whatever the
  // batch). folio-worker's --dequant_gemm_min_rows decides its default.
  int32_t dequant_min_rows = 0;
  // The tensor-parallel group this runner is one rank of (not owned; must outlive the
  // runner). Null: the whole model on this runner.
  Communicator* communicator = nullptr;
  // The thread pool to run on, shared with another runner whose steps never overlap this
  // one's (a draft model's and its target's, drafting_runner.h: one set of threads, so
  // neither pool's idle spin takes a core from the other's loops); null: a pool of its own
  // with num_threads threads. num_threads is then the pool's.
  std::shared_ptr<kernels::ThreadPool> pool;
  // Sliding-window layers in window layer groups of their own (kv_layer_groups.h), so the
  // cache manager can give their old blocks back: each step's sequences then carry one
  // window table per group. Off (or a model without both local and full-attention
  // layers): one group, every layer in every block.
  bool window_layer_groups = false;
};

class CpuModelRunner final : public ModelRunner {
 public:
  // Takes views of `weights` (which must outlive the runner: typed projections and the
  // embeddings are read from its tensors), packs what packs, and allocates the KV pool.
  // InvalidArgument for an unsupported or inconsistent model or bad options.
  static absl::StatusOr<std::unique_ptr<CpuModelRunner>> Create(
      const ModelWeights& weights, const CpuModelRunnerOptions& options);

  absl::StatusOr<StepOutput> Execute(const StepInput& step) override;
  absl::Status SetHostSegmentAt(const HostKvSegment* host, int64_t offset) override;
  int64_t host_bytes_per_block() const override { return kv_->bytes_per_block(); }
  absl::Status SetDiskStore(KvDiskStore* disk) override;

  const ModelConfig& config() const override { return weights_.config; }
  int32_t block_size() const override { return kv_->shape().block_size; }
  int64_t num_blocks() const override { return kv_->num_blocks(); }

  const KvCache& kv_cache() const { return *kv_; }
  // How the layers share the pool's blocks (CpuModelRunnerOptions::window_layer_groups).
  const KvLayerGroups& layer_groups() const { return layer_groups_; }
  // This rank's weights (its shard under tensor parallelism): its shape, the norms and
  // the views of every projection.
  const WeightShard& weights() const { return weights_; }
  // Bytes of weights this runner reads: packed panels, f32 copies, and the stored bytes
  // of what it reads in place; and of those the transformer layers'.
  int64_t weight_bytes() const;
  int64_t layer_weight_bytes() const;
  // Of weight_bytes(), those held in oneDNN's blocked bf16 layout (CpuModelRunnerOptions::
  // bf16_blocked).
  int64_t blocked_bf16_bytes() const;
  int32_t num_threads() const { return pool_->num_threads(); }
  // The pool it runs on (CpuModelRunnerOptions::pool), for a runner to share.
  const std::shared_ptr<kernels::ThreadPool>& thread_pool() const { return pool_; }
  // The oneDNN engine BF16 projections use at >= onednn_min_rows rows (and quantized
  // ones at >= dequant_min_rows); null when every projection takes Folio's kernels.
  const kernels::OnednnGemm* onednn() const { return onednn_.get(); }

 private:
  CpuModelRunner(const ModelWeights& model, WeightShard weights, std::unique_ptr<KvCache> kv,
                 int32_t num_threads, const CpuModelRunnerOptions& options,
                 std::unique_ptr<kernels::OnednnGemm> onednn);

  bool tensor_parallel() const { return comm_ != nullptr && comm_->world_size() > 1; }

  // Final norm and LM head for the rows that need logits; on rank 0 leaves the full
  // [num_logit_rows, vocab_size] logits in logits_ (gathered from every rank's slice).
  absl::Status ComputeLogits(const std::vector<int64_t>& logit_rows, int64_t num_logit_rows);

  // One projection's weights [out, in], held one way.
  struct Linear {
    enum class Kind { kPacked, kBlockedBf16, kTyped, kF32 };
    Kind kind = Kind::kTyped;
    int64_t out = 0;
    int64_t in = 0;
    kernels::PackedMatrix packed;  // kPacked
    kernels::BlockedBf16Matrix blocked;  // kBlockedBf16
    kernels::TypedMatrix typed;    // kTyped: views into the model's tensors
    std::vector<float> f32;        // kF32 (the OpenBLAS modes): row-major
    int64_t typed_bytes = 0;       // stored bytes `typed` reads
    kernels::OnednnBf16Matrix onednn;  // kTyped, all bf16, with oneDNN: `typed` as its weights
    bool dequant_onednn = false;       // kTyped, not bf16: oneDNN on `typed` dequantized
    int64_t bytes() const;
    // Whether the runner holds its own copy (the file's pages can go).
    bool owns_weights() const { return kind == Kind::kPacked || kind == Kind::kBlockedBf16; }
    // Row o as f32 from that copy (an embedding lookup on a tied matrix).
    void OwnRowToF32(int64_t o, float* dst) const;
  };
  Linear MakeLinear(const ShardMatrix& m) const;
  // Adds the bias, normalises q and k per head and rotates them, for rows [b, e).
  void PrepareQk(const ShardLayer& w, const kernels::RopeParams& rope, float* qkv,
                 int64_t qkv_dim, int64_t b, int64_t e, const int32_t* positions);
  struct LayerLinears {
    Linear qkv, wo, gate_up, down;
    // Mixture of experts (gate_up and down are then empty).
    struct Expert {
      Linear gate_up, down;
    };
    Linear router;
    std::vector<Expert> experts;
  };
  // The MLP of a mixture-of-experts layer on the normalised rows xb_ (T of them): routes
  // every token, runs each chosen expert once over the rows routed to it (gathered), and
  // adds the weighted outputs (each token's in increasing expert order) onto x_ as a
  // row-parallel projection would (beta as residual_beta). When every chosen expert has
  // few rows (decode), the experts run side by side, one per pool thread at a time, each
  // on its own rows of the buffers (one pool dispatch a layer instead of two an expert);
  // otherwise one after another, each GEMM split over the pool. The results are the same
  // bit for bit either way (a GEMM's outputs do not depend on how they are split).
  void MixtureOfExperts(const LayerLinears& lin, int64_t num_tokens, float residual_beta);

  // y = x . w^T (+ beta * y) the way gemm_threading_ says, on the runner's pool.
  void Gemm(const float* x, int64_t ldx, int64_t rows, const Linear& w, float beta, float* y,
            int64_t ldy) {
    GemmOn(pool_.get(), x, ldx, rows, w, beta, y, ldy);
  }
  // The same on `pool` (null: the calling thread alone; then never oneDNN, which has its
  // own threads: callers pass null only for fewer rows than oneDNN takes).
  void GemmOn(kernels::ThreadPool* pool, const float* x, int64_t ldx, int64_t rows,
              const Linear& w, float beta, float* y, int64_t ldy);

  // Checks the step's offload transfers (ranges, the tier they need) before anything runs.
  absl::Status CheckTransfers(absl::Span<const HostTransfer> transfers) const;
  // Runs them in order; DataLoss naming the disk blocks that could not be loaded (their
  // pool blocks zeroed), after running the rest.
  absl::Status RunTransfers(absl::Span<const HostTransfer> transfers);
  // The step after its transfers: copies, then the forward pass.
  absl::StatusOr<StepOutput> RunStep(const StepInput& step);
  // Grows the activation buffers for a step of num_tokens tokens, num_logit_rows rows.
  void Reserve(int64_t num_tokens, int64_t num_logit_rows);

  WeightShard weights_;
  std::unique_ptr<KvCache> kv_;
  KvLayerGroups layer_groups_;
  const HostKvSegment* host_ = nullptr;  // SetHostSegmentAt
  int64_t host_offset_ = 0;              // this runner's part of each slot
  KvDiskStore* disk_ = nullptr;          // SetDiskStore
  std::vector<uint8_t> disk_staging_;    // one block read from disk
  std::shared_ptr<kernels::ThreadPool> pool_;  // options.pool, or its own
  const kernels::CpuIsa isa_;
  const kernels::CpuFeatures features_;  // the typed kernels' (none when isa_ is portable)
  const bool f16_panels_;
  const GemmThreading gemm_threading_;
  std::unique_ptr<kernels::OnednnGemm> onednn_;  // null: Folio's kernels only
  const bool bf16_onednn_;          // BF16 projections at >= onednn_min_rows_ on onednn_
  const bool bf16_blocked_;         // and in its blocked layout where it keeps that
  const kernels::BlockedBf16Path blocked_path_;  // Folio's GEMV on blocked projections
  const int32_t onednn_min_rows_;
  const int32_t dequant_min_rows_;  // 0: quantized projections never on onednn_
  Sampler sampler_;
  Communicator* const comm_;  // null without tensor parallelism
  std::vector<LayerLinears> linears_;  // per layer
  Linear lm_head_;                     // this rank's vocabulary rows
  kernels::TypedMatrix tok_embeddings_;  // this rank's vocabulary rows, read in place
  bool embed_from_lm_head_ = false;      // tied and owned: look rows up in lm_head_
  kernels::RopeParams rope_;
  kernels::RopeParams rope_local_;  // sliding-window layers' (Gemma)

  // Per-step buffers, reused across steps.
  std::vector<float> x_;        // [num_tokens, dim] residual stream
  std::vector<float> xb_;       // [num_tokens, dim] normalised input of a sublayer
  std::vector<float> qkv_;      // [num_tokens, q_dim + 2 * kv_dim]
  std::vector<float> attn_;     // [num_tokens, q_dim]
  std::vector<float> gate_up_;  // [num_tokens, 2 * hidden_dim]
  std::vector<float> hidden_;   // [num_tokens, hidden_dim]
  std::vector<float> logits_;   // [num_logit_rows, vocab_size] (rank 0)
  // Mixture of experts: router logits [num_tokens, num_experts], the rows routed to one
  // expert gathered [<= num_tokens, dim], its output [<= num_tokens, dim], and the
  // weighted sum of the experts' outputs [num_tokens, dim].
  std::vector<float> router_logits_;
  std::vector<float> expert_in_;
  std::vector<float> expert_out_;
  std::vector<float> moe_sum_;
  MoeRouting routing_;
  std::vector<int32_t> active_experts_;  // experts with tokens this layer, in index order
  // Experts run side by side while none has more token rows than this.
  static constexpr int64_t kMaxSideBySideRows = 4;
  // Tensor parallelism: this rank's logit slice, padded to the largest slice
  // [num_logit_rows, vocab_chunk], and what rank 0 gathers [tp, num_logit_rows, vocab_chunk].
  std::vector<float> local_logits_;
  std::vector<float> gathered_logits_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_CPU_MODEL_RUNNER_H_

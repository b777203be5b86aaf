#include "services/worker/engine/cpu_model_runner.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "glog/logging.h"
#include "services/worker/engine/step_validation.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/gemm.h"
#include "services/worker/kernels/paged_attention.h"
#include "services/worker/kernels/rms_norm.h"
#include "services/worker/kernels/rope.h"
#include "services/worker/kernels/swiglu.h"

namespace folio::worker {

namespace k = ::folio::worker::kernels;

absl::StatusOr<std::unique_ptr<CpuModelRunner>> CpuModelRunner::Create(
    const ModelWeights& weights, const CpuModelRunnerOptions& options) {
  if (options.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be positive, got ",
                                                   options.block_size));
  }
  TpShard shard;
  if (options.communicator != nullptr) {
    shard.rank = options.communicator->rank();
    shard.size = options.communicator->world_size();
  }
  absl::StatusOr<CpuWeights> cpu_weights = CpuWeights::Create(weights, shard);
  if (!cpu_weights.ok()) return cpu_weights.status();
  const ModelConfig& c = cpu_weights->config;
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = cpu_weights->num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.block_size = options.block_size;
  shape.dtype = options.kv_dtype;
  absl::StatusOr<std::unique_ptr<KvCache>> kv =
      KvCache::Create(shape, options.kv_cache_bytes, options.max_num_blocks);
  if (!kv.ok()) return kv.status();
  int32_t threads = options.num_threads;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return std::unique_ptr<CpuModelRunner>(new CpuModelRunner(
      *std::move(cpu_weights), *std::move(kv), threads, options));
}

CpuModelRunner::CpuModelRunner(CpuWeights weights, std::unique_ptr<KvCache> kv,
                               int32_t num_threads, const CpuModelRunnerOptions& options)
    : weights_(std::move(weights)),
      kv_(std::move(kv)),
      pool_(num_threads),
      isa_(options.isa),
      gemm_threading_(options.gemm_threading),
      comm_(options.communicator) {
  k::SetGemmThreads(gemm_threading_ == GemmThreading::kOpenBlas ? num_threads : 1);
  const bool pack = gemm_threading_ == GemmThreading::kPacked;
  // f16 panels (lossless: only for matrices whose every weight is an f16 value) halve the
  // weight bytes a step streams; only the AVX2 kernel widens them in hardware.
  const bool f16_when_exact = isa_ == k::CpuIsa::kAvx2;
  auto linear = [pack, f16_when_exact](const float* w, int64_t out, int64_t in) {
    Linear l;
    l.w = w;
    l.out = out;
    l.in = in;
    if (pack) l.packed = k::PackedMatrix(w, out, in, f16_when_exact);
    return l;
  };
  const int64_t dim = weights_.config.dim;
  const int64_t q_dim = weights_.q_dim();
  const int64_t hidden = weights_.hidden_dim;
  for (const CpuLayerWeights& w : weights_.layers) {
    LayerLinears l;
    l.qkv = linear(w.wqkv.data(), q_dim + 2 * weights_.kv_dim(), dim);
    l.wo = linear(w.wo.data(), dim, q_dim);
    l.gate_up = linear(w.w_gate_up.data(), 2 * hidden, dim);
    l.down = linear(w.w_down.data(), dim, hidden);
    linears_.push_back(std::move(l));
  }
  lm_head_ = linear(weights_.lm_head_data(), weights_.vocab.size(), dim);
  if (pack) {
    // The panels are all the packed GEMM reads: release the f32 matrices. A tied LM head
    // is the embedding table, which the embedding lookup still reads.
    auto release = [](std::vector<float>& v) { std::vector<float>().swap(v); };
    for (size_t i = 0; i < weights_.layers.size(); ++i) {
      CpuLayerWeights& w = weights_.layers[i];
      for (std::vector<float>* v : {&w.wqkv, &w.wo, &w.w_gate_up, &w.w_down}) release(*v);
      for (Linear* l : {&linears_[i].qkv, &linears_[i].wo, &linears_[i].gate_up, &linears_[i].down}) {
        l->w = nullptr;
      }
    }
    if (!weights_.lm_head.empty()) {
      release(weights_.lm_head);
      lm_head_.w = nullptr;
    }
    // glibc keeps freed heap memory for reuse; hand the released matrices back to the OS.
    malloc_trim(0);
  }
}

int64_t CpuModelRunner::layer_weight_bytes() const {
  int64_t n = weights_.layer_bytes();  // the norms, and the matrices unless released
  for (const LayerLinears& l : linears_) {
    n += l.qkv.packed.size_bytes() + l.wo.packed.size_bytes() + l.gate_up.packed.size_bytes() +
         l.down.packed.size_bytes();
  }
  return n;
}

int64_t CpuModelRunner::weight_bytes() const {
  return weights_.size_bytes() + (layer_weight_bytes() - weights_.layer_bytes()) +
         lm_head_.packed.size_bytes();
}

void CpuModelRunner::Gemm(const float* x, int64_t ldx, int64_t rows, const Linear& w, float beta,
                          float* y, int64_t ldy) {
  switch (gemm_threading_) {
    case GemmThreading::kPacked:
      k::PackedLinear(x, ldx, rows, w.packed, beta, y, ldy, isa_, &pool_);
      break;
    case GemmThreading::kKernelPool:
      k::LinearOnPool(x, ldx, rows, w.in, w.w, w.out, beta, y, ldy, &pool_);
      break;
    case GemmThreading::kOpenBlas:
      k::Linear(x, ldx, rows, w.in, w.w, w.out, beta, y, ldy);
      break;
  }
}

void CpuModelRunner::Reserve(int64_t num_tokens, int64_t num_logit_rows) {
  const ModelConfig& c = weights_.config;
  const int64_t q_dim = weights_.q_dim();
  const int64_t kv_dim = weights_.kv_dim();
  const int64_t hidden = weights_.hidden_dim;
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(x_, num_tokens * c.dim);
  grow(xb_, num_tokens * c.dim);
  grow(qkv_, num_tokens * (q_dim + 2 * kv_dim));
  grow(attn_, num_tokens * q_dim);
  grow(gate_up_, num_tokens * 2 * hidden);
  grow(hidden_, num_tokens * hidden);
  grow(logits_, num_logit_rows * c.vocab_size);
  if (tensor_parallel()) {
    const int64_t chunk = (c.vocab_size + comm_->world_size() - 1) / comm_->world_size();
    grow(local_logits_, num_logit_rows * chunk);
    if (comm_->rank() == 0) grow(gathered_logits_, comm_->world_size() * num_logit_rows * chunk);
  }
}

absl::StatusOr<StepOutput> CpuModelRunner::Execute(const StepInput& step) {
  const ModelConfig& c = weights_.config;
  StepLimits limits;
  limits.num_blocks = kv_->num_blocks();
  limits.block_size = kv_->shape().block_size;
  limits.vocab_size = c.vocab_size;
  limits.max_seq_len = c.max_seq_len;
  if (absl::Status s = ValidateStep(step, limits); !s.ok()) return s;

  // Copy-on-write first: later writes in this step may land in the copied blocks.
  if (!step.block_copies.empty()) {
    std::vector<k::BlockCopy> copies;
    for (const BlockCopy& bc : step.block_copies) copies.push_back({bc.src_block, bc.dst_block});
    for (int32_t l = 0; l < c.num_layers; ++l) k::CopyBlocks(copies, kv_->layer(l));
  }

  // Flatten the batch: row r of every activation matrix is token r of the step.
  const int32_t block_size = kv_->shape().block_size;
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> slots;
  std::vector<k::AttentionSeq> attn_seqs;
  std::vector<int64_t> logit_rows;   // step row whose logits each sequence needs, or -1
  int64_t num_logit_rows = 0;
  for (const SequenceStep& seq : step.seqs) {
    k::AttentionSeq a;
    a.query_offset = static_cast<int32_t>(tokens.size());
    a.num_queries = static_cast<int32_t>(seq.token_ids.size());
    a.context_len = seq.start_pos + a.num_queries;
    a.block_table = seq.block_table.data();
    attn_seqs.push_back(a);
    for (int32_t i = 0; i < a.num_queries; ++i) {
      const int32_t pos = seq.start_pos + i;
      tokens.push_back(seq.token_ids[i]);
      positions.push_back(pos);
      slots.push_back(k::SlotForPosition(seq.block_table.data(), block_size, pos));
    }
    const bool needs_logits = seq.num_samples > 0 || seq.num_logprobs > 0 ||
                              seq.num_candidates > 0 || seq.return_logits;
    logit_rows.push_back(needs_logits ? static_cast<int64_t>(tokens.size()) - 1 : -1);
    if (needs_logits) ++num_logit_rows;
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  Reserve(T, num_logit_rows);

  const int64_t dim = c.dim;
  const int64_t q_dim = weights_.q_dim();
  const int64_t kv_dim = weights_.kv_dim();
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  const int64_t hidden = weights_.hidden_dim;
  const bool tp = tensor_parallel();
  // Row-parallel projections add their partial sums into the residual stream x, which
  // every rank holds whole: rank 0 accumulates its part onto x (beta 1), the others
  // overwrite x with theirs (beta 0), and the all-reduce leaves x + sum of the parts on
  // every rank. Without tensor parallelism the GEMM accumulates onto x directly.
  const float residual_beta = !tp || comm_->rank() == 0 ? 1.0f : 0.0f;
  auto all_reduce_x = [&]() -> absl::Status {
    return tp ? comm_->AllReduceSum(x_.data(), T * dim, CommDType::kF32) : absl::OkStatus();
  };
  float* x = x_.data();
  float* xb = xb_.data();
  float* qkv = qkv_.data();
  float* attn = attn_.data();

  // Vocab-parallel embedding: a rank holds rows [vocab.begin, vocab.end); tokens outside
  // them embed as zeros there, and the all-reduce assembles every row.
  for (int64_t r = 0; r < T; ++r) {
    const int64_t local = int64_t{tokens[r]} - weights_.vocab.begin;
    if (local >= 0 && local < weights_.vocab.size()) {
      std::memcpy(x + r * dim, weights_.tok_embeddings.data() + local * dim, dim * sizeof(float));
    } else {
      std::fill(x + r * dim, x + (r + 1) * dim, 0.0f);
    }
  }
  if (absl::Status s = all_reduce_x(); !s.ok()) return s;

  k::PagedAttentionArgs attn_args;
  attn_args.q = qkv;
  attn_args.q_row_stride = qkv_dim;
  attn_args.out = attn;
  attn_args.out_row_stride = q_dim;
  attn_args.num_heads = weights_.num_heads;
  attn_args.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn_args.isa = isa_;
  // Elementwise kernels split over rows; small steps stay on the caller.
  const int64_t row_grain = std::max<int64_t>(1, (T + pool_.num_threads() - 1) / pool_.num_threads());

  for (int32_t l = 0; l < c.num_layers; ++l) {
    const CpuLayerWeights& w = weights_.layers[l];
    const LayerLinears& lin = linears_[l];
    const k::KvCacheView kv = kv_->layer(l);
    // Attention block.
    k::RmsNorm(x, dim, T, dim, w.attn_norm.data(), c.rms_norm_eps, xb, dim);
    Gemm(xb, dim, T, lin.qkv, 0.0f, qkv, qkv_dim);
    // q and k heads are adjacent in each qkv row, so one call rotates both.
    k::ParallelFor(T > 16 ? &pool_ : nullptr, T, row_grain, [&](int64_t b, int64_t e) {
      k::ApplyRope(qkv + b * qkv_dim, qkv_dim, e - b, positions.data() + b,
                   weights_.num_heads + weights_.num_kv_heads, c.head_dim, c.rope_theta);
    });
    k::WriteKv(qkv + q_dim, qkv + q_dim + kv_dim, qkv_dim, slots, kv);
    k::PagedAttention(attn_args, attn_seqs, kv, &pool_);
    Gemm(attn, q_dim, T, lin.wo, residual_beta, x, dim);
    if (absl::Status s = all_reduce_x(); !s.ok()) return s;
    // MLP block.
    k::RmsNorm(x, dim, T, dim, w.ffn_norm.data(), c.rms_norm_eps, xb, dim);
    Gemm(xb, dim, T, lin.gate_up, 0.0f, gate_up_.data(), 2 * hidden);
    k::ParallelFor(T > 16 ? &pool_ : nullptr, T, row_grain, [&](int64_t b, int64_t e) {
      k::SwiGlu(gate_up_.data() + b * 2 * hidden, e - b, hidden, hidden_.data() + b * hidden, isa_);
    });
    Gemm(hidden_.data(), hidden, T, lin.down, residual_beta, x, dim);
    if (absl::Status s = all_reduce_x(); !s.ok()) return s;
  }

  if (absl::Status s = ComputeLogits(logit_rows, num_logit_rows); !s.ok()) return s;

  StepOutput out;
  out.seqs.resize(step.seqs.size());
  int64_t row = 0;
  for (size_t s = 0; s < step.seqs.size(); ++s) {
    const SequenceStep& seq = step.seqs[s];
    out.seqs[s].seq_id = seq.seq_id;
    if (logit_rows[s] < 0 || (tp && comm_->rank() != 0)) continue;
    const absl::Span<const float> logits(logits_.data() + row * c.vocab_size, c.vocab_size);
    ++row;
    sampler_.Process(logits, seq, seq.start_pos + static_cast<int64_t>(seq.token_ids.size()),
                     &out.seqs[s]);
  }
  return out;
}

absl::Status CpuModelRunner::ComputeLogits(const std::vector<int64_t>& logit_rows,
                                           int64_t num_logit_rows) {
  const ModelConfig& c = weights_.config;
  const int64_t dim = c.dim;
  // Final norm only for the rows that need logits, packed into xb.
  int64_t row = 0;
  for (int64_t r : logit_rows) {
    if (r < 0) continue;
    k::RmsNorm(x_.data() + r * dim, dim, 1, dim, weights_.final_norm.data(), c.rms_norm_eps,
               xb_.data() + row * dim, dim);
    ++row;
  }
  if (!tensor_parallel()) {
    Gemm(xb_.data(), dim, num_logit_rows, lm_head_, 0.0f, logits_.data(), c.vocab_size);
    return absl::OkStatus();
  }
  if (num_logit_rows == 0) return absl::OkStatus();  // every rank sees the same step
  // Vocab-parallel LM head: this rank's vocabulary slice of each row, padded to the largest
  // slice so every rank sends the same count; rank 0 gathers and unpads.
  const int32_t tp = comm_->world_size();
  const int64_t chunk = (c.vocab_size + tp - 1) / tp;
  const int64_t local_vocab = weights_.vocab.size();
  float* local = local_logits_.data();
  Gemm(xb_.data(), dim, num_logit_rows, lm_head_, 0.0f, local, chunk);
  for (int64_t r = 0; r < num_logit_rows; ++r) {
    std::fill(local + r * chunk + local_vocab, local + (r + 1) * chunk, 0.0f);
  }
  if (absl::Status s = comm_->GatherToRoot(local, gathered_logits_.data(),
                                           num_logit_rows * chunk, CommDType::kF32);
      !s.ok()) {
    return s;
  }
  if (comm_->rank() != 0) return absl::OkStatus();
  for (int32_t rank = 0; rank < tp; ++rank) {
    const ShardRange v = SplitEvenly(c.vocab_size, tp, rank);
    const float* src = gathered_logits_.data() + int64_t{rank} * num_logit_rows * chunk;
    for (int64_t r = 0; r < num_logit_rows; ++r) {
      std::memcpy(logits_.data() + r * c.vocab_size + v.begin, src + r * chunk,
                  static_cast<size_t>(v.size()) * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace folio::worker

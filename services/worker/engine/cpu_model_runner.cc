#include "services/worker/engine/cpu_model_runner.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/kv_block_file.h"
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
  absl::StatusOr<WeightShard> views = WeightShard::Create(weights, shard);
  if (!views.ok()) return views.status();
  const ModelConfig& c = views->config;
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = views->num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.block_size = options.block_size;
  shape.dtype = options.kv_dtype;
  const KvLayerGroups groups =
      options.window_layer_groups ? WindowLayerGroups(c) : DenseLayerGroups(c.num_layers);
  if (groups.num_window_groups() > 0) shape.layer_plane = groups.plane;
  absl::StatusOr<std::unique_ptr<KvCache>> kv =
      KvCache::Create(shape, options.kv_cache_bytes, options.max_num_blocks);
  if (!kv.ok()) return kv.status();
  int32_t threads = options.num_threads;
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (options.pool != nullptr) threads = options.pool->num_threads();
  std::unique_ptr<k::OnednnGemm> onednn;
  if (options.onednn_min_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("onednn_min_rows must be >= 1, got ", options.onednn_min_rows));
  }
  if (options.dequant_min_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dequant_min_rows must be >= 0, got ", options.dequant_min_rows));
  }
  if ((options.bf16_gemm != Bf16Gemm::kFolio || options.dequant_min_rows > 0) &&
      options.gemm_threading == GemmThreading::kPacked && options.isa != k::CpuIsa::kPortable) {
    absl::StatusOr<std::unique_ptr<k::OnednnGemm>> e = k::OnednnGemm::Create(threads);
    if (e.ok()) {
      onednn = *std::move(e);
    } else if (options.bf16_gemm == Bf16Gemm::kOnednn) {
      return absl::Status(e.status().code(),
                          absl::StrCat("bf16_gemm onednn: ", e.status().message()));
    } else {
      LOG(INFO) << "BF16 and quantized projections take Folio's kernels: "
                << e.status().message();
    }
  } else if (options.bf16_gemm == Bf16Gemm::kOnednn) {
    return absl::InvalidArgumentError(
        "bf16_gemm onednn needs the packed GEMM threading and a SIMD isa (not portable)");
  }
  return std::unique_ptr<CpuModelRunner>(new CpuModelRunner(
      weights, *std::move(views), *std::move(kv), threads, options, std::move(onednn)));
}

const char* Bf16GemmName(Bf16Gemm g) {
  switch (g) {
    case Bf16Gemm::kFolio:
      return "folio";
    case Bf16Gemm::kAuto:
      return "auto";
    case Bf16Gemm::kOnednn:
      return "onednn";
  }
  return "?";
}

int64_t CpuModelRunner::Linear::bytes() const {
  switch (kind) {
    case Kind::kPacked:
      return packed.size_bytes();
    case Kind::kBlockedBf16:
      return blocked.size_bytes();
    case Kind::kF32:
      return static_cast<int64_t>(f32.size() * sizeof(float));
    case Kind::kTyped:
      return typed_bytes;
  }
  return 0;
}

void CpuModelRunner::Linear::OwnRowToF32(int64_t o, float* dst) const {
  if (kind == Kind::kBlockedBf16) {
    blocked.RowToF32(o, dst);
  } else {
    CHECK(kind == Kind::kPacked) << "no copy of its own to look a row up in";
    packed.RowToF32(o, dst);
  }
}

CpuModelRunner::Linear CpuModelRunner::MakeLinear(const ShardMatrix& m) const {
  Linear l;
  l.out = m.out();
  l.in = m.in();
  l.typed = m.typed();
  l.typed_bytes = m.stored_bytes();
  const k::TypedMatrix& typed = l.typed;
  auto row = [&typed](int64_t o, float* dst) { typed.RowToF32(o, dst); };
  if (gemm_threading_ != GemmThreading::kPacked) {
    l.kind = Linear::Kind::kF32;
    l.f32.resize(static_cast<size_t>(l.out * l.in));
    for (int64_t o = 0; o < l.out; ++o) row(o, l.f32.data() + o * l.in);
    return l;
  }
  // BF16 where oneDNN takes its batches and keeps its weights in BlockedBf16Matrix's
  // layout: one blocked copy, read by oneDNN's batches and by Folio's GEMV for fewer rows.
  if (m.all_of(DType::kBF16) && onednn_ != nullptr && bf16_onednn_ && bf16_blocked_ &&
      features_.avx512 && onednn_->BlockedLayoutMatches(l.in, l.out)) {
    l.kind = Linear::Kind::kBlockedBf16;
    l.blocked = k::BlockedBf16Matrix(l.out, l.in, row);
    return l;
  }
  // f32 and (with f16_panels, on AVX2) f16 and bf16 projections are packed into panels of
  // the same precision (the bytes the file held; its pages are released); bf16 only when
  // oneDNN does not take its batches (it reads the stored rows). Every other type is read
  // in place: bf16 under oneDNN and q8_0 (f16 without panels) by their own kernels, the
  // rest through their dequantizers (kernels/typed_gemm.h).
  const bool panels16 = f16_panels_ && isa_ == k::CpuIsa::kAvx2;
  const bool f16 = panels16 && m.all_of(DType::kF16);
  const bool bf16 =
      panels16 && m.all_of(DType::kBF16) && !(onednn_ != nullptr && bf16_onednn_);
  if (!m.all_of(DType::kF32) && !f16 && !bf16) {
    l.kind = Linear::Kind::kTyped;
    // BF16 at >= onednn_min_rows rows: oneDNN on the same stored rows (no copy); the
    // quantized types at >= dequant_min_rows rows: oneDNN on chunks dequantized to bf16.
    if (onednn_ != nullptr) {
      if (bf16_onednn_) l.onednn = k::OnednnBf16Matrix::Of(l.typed);
      l.dequant_onednn =
          dequant_min_rows_ > 0 && !m.all_of(DType::kBF16) && !m.all_of(DType::kF16);
    }
    return l;
  }
  l.kind = Linear::Kind::kPacked;
  using Precision = k::PackedMatrix::Precision;
  l.packed = k::PackedMatrix(
      l.out, l.in, f16 ? Precision::kF16 : bf16 ? Precision::kBF16 : Precision::kF32, row);
  return l;
}

CpuModelRunner::CpuModelRunner(const ModelWeights& model, WeightShard weights,
                               std::unique_ptr<KvCache> kv, int32_t num_threads,
                               const CpuModelRunnerOptions& options,
                               std::unique_ptr<k::OnednnGemm> onednn)
    : weights_(std::move(weights)),
      kv_(std::move(kv)),
      layer_groups_(options.window_layer_groups ? WindowLayerGroups(weights_.config)
                                                : DenseLayerGroups(weights_.config.num_layers)),
      pool_(options.pool != nullptr ? options.pool
                                     : std::make_shared<k::ThreadPool>(num_threads)),
      isa_(options.isa),
      features_(options.isa == k::CpuIsa::kPortable ? k::NoCpuFeatures()
                                                    : k::EnabledCpuFeatures()),
      f16_panels_(options.f16_panels),
      gemm_threading_(options.gemm_threading),
      onednn_(std::move(onednn)),
      bf16_onednn_(options.bf16_gemm != Bf16Gemm::kFolio),
      bf16_blocked_(options.bf16_blocked),
      blocked_path_(k::BestBlockedBf16Path(features_)),
      onednn_min_rows_(options.onednn_min_rows),
      dequant_min_rows_(options.dequant_min_rows),
      comm_(options.communicator) {
  k::SetGemmThreads(gemm_threading_ == GemmThreading::kOpenBlas ? num_threads : 1);
  // A packed matrix's file pages are released as soon as its panels exist, so the load
  // never holds the panels beside more than one matrix's file pages (holding them all
  // until the end peaked at about twice the file). Only the panels are read afterwards;
  // an untied embedding table is not packed and stays mapped (lookups read it in place).
  std::vector<TensorView> packed_tensors;
  auto linear = [&](const ShardMatrix& m) {
    Linear l = MakeLinear(m);
    if (l.owns_weights()) {
      std::vector<TensorView> parts;
      for (const ShardMatrix::Part& p : m.parts) parts.push_back(p.tensor);
      model.ReleasePages(parts);
      packed_tensors.insert(packed_tensors.end(), parts.begin(), parts.end());
    }
    return l;
  };
  const size_t num_layers = weights_.layers.size();
  for (const ShardLayer& w : weights_.layers) {
    LayerLinears l;
    l.qkv = linear(w.qkv);
    l.wo = linear(w.wo);
    if (weights_.config.moe()) {
      l.router = linear(w.router);
      for (const ShardLayer::Expert& e : w.experts) {
        l.experts.push_back({linear(e.gate_up), linear(e.down)});
      }
    } else {
      l.gate_up = linear(w.gate_up);
      l.down = linear(w.down);
    }
    linears_.push_back(std::move(l));
    // Packing a large model takes a while: say how far it got.
    if (num_layers >= 8 && linears_.size() % (num_layers / 4) == 0) {
      LOG(INFO) << "weights: " << linears_.size() << " of " << num_layers << " layers ready";
    }
  }
  lm_head_ = linear(weights_.lm_head);
  tok_embeddings_ = weights_.tok_embeddings.typed();
  embed_from_lm_head_ =
      weights_.config.tied_embeddings && lm_head_.owns_weights();
  if (const int64_t blocked = blocked_bf16_bytes(); blocked > 0) {
    LOG(INFO) << "BF16 projections: " << (blocked >> 20) << " MiB in oneDNN's blocked layout "
              << "(oneDNN from " << onednn_min_rows_ << " token rows, Folio's "
              << k::BlockedBf16PathName(blocked_path_) << " GEMV below)";
  }
  // Once more over all of them together: a page two packed tensors of different
  // matrices share (their boundary) is released now.
  model.ReleasePages(packed_tensors);
  rope_.theta = weights_.config.rope_theta;
  rope_.freq_scale = weights_.config.rope_freq_scale;
  rope_.freq_factors = weights_.rope_freqs.empty() ? nullptr : weights_.rope_freqs.data();
  rope_.layout = weights_.config.rope_style == RopeStyle::kNeox ? k::RopeLayout::kNeox
                                                                : k::RopeLayout::kInterleaved;
  rope_local_ = rope_;
  rope_local_.theta = weights_.config.rope_theta_local;
  rope_local_.freq_scale = weights_.config.rope_freq_scale_local;
  // glibc keeps freed heap memory (packing's row buffers) for reuse; hand it back.
  malloc_trim(0);
}

int64_t CpuModelRunner::layer_weight_bytes() const {
  int64_t n = 0;
  auto floats = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size() * 4); };
  for (size_t i = 0; i < linears_.size(); ++i) {
    const LayerLinears& l = linears_[i];
    const ShardLayer& w = weights_.layers[i];
    n += l.qkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes() + l.router.bytes();
    for (const LayerLinears::Expert& e : l.experts) n += e.gate_up.bytes() + e.down.bytes();
    n += floats(w.attn_norm) + floats(w.ffn_norm) + floats(w.qkv_bias) + floats(w.q_norm) +
         floats(w.k_norm);
  }
  return n;
}

int64_t CpuModelRunner::blocked_bf16_bytes() const {
  auto blocked = [](const Linear& l) {
    return l.kind == Linear::Kind::kBlockedBf16 ? l.bytes() : int64_t{0};
  };
  int64_t n = blocked(lm_head_);
  for (const LayerLinears& l : linears_) {
    n += blocked(l.qkv) + blocked(l.wo) + blocked(l.gate_up) + blocked(l.down);
    for (const LayerLinears::Expert& e : l.experts) n += blocked(e.gate_up) + blocked(e.down);
  }
  return n;
}

int64_t CpuModelRunner::weight_bytes() const {
  // A tied table is counted once, as the LM head, unless that is an f32 copy.
  const bool separate =
      !weights_.config.tied_embeddings || lm_head_.kind == Linear::Kind::kF32;
  const int64_t embeddings = separate ? weights_.tok_embeddings.stored_bytes() : 0;
  return layer_weight_bytes() + lm_head_.bytes() + embeddings +
         static_cast<int64_t>((weights_.final_norm.size() + weights_.rope_freqs.size()) * 4);
}

void CpuModelRunner::GemmOn(k::ThreadPool* pool, const float* x, int64_t ldx, int64_t rows,
                            const Linear& w, float beta, float* y, int64_t ldy) {
  switch (w.kind) {
    case Linear::Kind::kPacked:
      k::PackedLinear(x, ldx, rows, w.packed, beta, y, ldy, isa_, pool);
      break;
    case Linear::Kind::kBlockedBf16:
      if (rows >= onednn_min_rows_ &&
          onednn_->LinearBlocked(x, ldx, rows, w.blocked, beta, y, ldy)) {
        break;
      }
      k::BlockedBf16Linear(x, ldx, rows, w.blocked, beta, y, ldy, blocked_path_, pool);
      break;
    case Linear::Kind::kTyped:
      if (!w.onednn.empty() && rows >= onednn_min_rows_ &&
          onednn_->Linear(x, ldx, rows, w.onednn, beta, y, ldy)) {
        break;
      }
      if (w.dequant_onednn && rows >= dequant_min_rows_ &&
          onednn_->LinearDequantized(x, ldx, rows, w.typed, beta, y, ldy, pool)) {
        break;
      }
      k::TypedLinear(x, ldx, rows, w.typed, beta, y, ldy, pool, features_);
      break;
    case Linear::Kind::kF32:
      if (gemm_threading_ == GemmThreading::kKernelPool) {
        k::LinearOnPool(x, ldx, rows, w.in, w.f32.data(), w.out, beta, y, ldy, pool);
      } else {
        k::Linear(x, ldx, rows, w.in, w.f32.data(), w.out, beta, y, ldy);
      }
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
  const int64_t units = std::max<int64_t>(hidden, weights_.expert_hidden_dim);
  grow(gate_up_, num_tokens * 2 * units);
  grow(hidden_, num_tokens * units);
  if (c.moe()) {
    grow(router_logits_, num_tokens * c.num_experts);
    grow(expert_in_, num_tokens * c.dim);
    grow(expert_out_, num_tokens * c.dim);
    grow(moe_sum_, num_tokens * c.dim);
  }
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
  limits.verifies_drafts = true;
  limits.windows = layer_groups_.windows;
  if (absl::Status s = ValidateStep(step, limits); !s.ok()) return s;
  if (absl::Status s = CheckTransfers(step.host_transfers); !s.ok()) return s;

  // The offload tiers' transfers, in the cache manager's order, before anything else. A
  // disk load that failed leaves its block zeroed and the step is refused after it ran
  // (DATA_LOSS naming the blocks): the scheduler resets the pool and recomputes.
  const absl::Status transfers = RunTransfers(step.host_transfers);
  absl::StatusOr<StepOutput> out = RunStep(step);
  if (transfers.ok()) return out;
  if (out.ok()) return transfers;
  // Both: the step's own failure first, the blocks to drop still named at the end.
  return WithKvDiskBlocks(
      absl::DataLossError(absl::StrCat(out.status().message(), "; ", transfers.message())),
      KvDiskBlocksOf(transfers));
}

absl::StatusOr<StepOutput> CpuModelRunner::RunStep(const StepInput& step) {
  const ModelConfig& c = weights_.config;
  // Copy-on-write first: later writes in this step may land in the copied blocks.
  if (!step.block_copies.empty()) {
    std::vector<k::BlockCopy> copies;
    for (const BlockCopy& bc : step.block_copies) copies.push_back({bc.src_block, bc.dst_block});
    for (int32_t p = 0; p < kv_->shape().num_planes(); ++p) k::CopyBlocks(copies, kv_->plane(p));
  }
  // A step of transfers alone (the scheduler's SendTransfers): no forward pass. Every
  // tensor-parallel rank gets the same step, so none waits in a collective for this one.
  if (step.seqs.empty()) return StepOutput{};

  // Flatten the batch: row r of every activation matrix is token r of the step.
  const int32_t block_size = kv_->shape().block_size;
  std::vector<int32_t> tokens, positions;
  // Per layer group (0: full attention, 1 + g: window group g): the step's slots and the
  // sequences' attention, each over that group's tables. A window group's table is read
  // as a whole one whose entries before first_block are never reached (0 stands there).
  const int32_t num_groups = 1 + layer_groups_.num_window_groups();
  std::vector<std::vector<int64_t>> slots(num_groups);
  std::vector<std::vector<k::AttentionSeq>> attn_seqs(num_groups);
  std::deque<std::vector<int32_t>> window_tables;  // [seq * window groups + g]
  // Step rows whose logits are needed, and how many of them each sequence has: its last
  // row, or (verifying proposals) its last num_draft_tokens + 1 rows, or none.
  std::vector<int64_t> logit_rows;
  std::vector<int32_t> seq_logit_rows;
  for (const SequenceStep& seq : step.seqs) {
    k::AttentionSeq a;
    a.query_offset = static_cast<int32_t>(tokens.size());
    a.num_queries = static_cast<int32_t>(seq.token_ids.size());
    a.context_len = seq.start_pos + a.num_queries;
    a.block_table = seq.block_table.data();
    // Rows first computed one at a time (sampled tokens, verified proposals) attend as
    // decode rows do whenever they are computed (step.h's decode_from_pos).
    if (seq.num_draft_tokens > 0) {
      a.tiled_queries = 0;
    } else if (seq.decode_from_pos >= 0) {
      a.tiled_queries = std::clamp(seq.decode_from_pos - seq.start_pos, 0, a.num_queries);
    }
    attn_seqs[0].push_back(a);
    for (const WindowBlockTable& w : seq.window_tables) {
      std::vector<int32_t>& table = window_tables.emplace_back(w.first_block, 0);
      table.insert(table.end(), w.blocks.begin(), w.blocks.end());
    }
    for (int32_t g = 1; g < num_groups; ++g) {
      k::AttentionSeq wa = a;
      wa.block_table = window_tables[window_tables.size() - (num_groups - g)].data();
      attn_seqs[g].push_back(wa);
    }
    for (int32_t i = 0; i < a.num_queries; ++i) {
      const int32_t pos = seq.start_pos + i;
      tokens.push_back(seq.token_ids[i]);
      positions.push_back(pos);
      for (int32_t g = 0; g < num_groups; ++g) {
        slots[g].push_back(k::SlotForPosition(attn_seqs[g].back().block_table, block_size, pos));
      }
    }
    const bool needs_logits = seq.num_samples > 0 || seq.num_logprobs > 0 ||
                              seq.num_candidates > 0 || seq.return_logits;
    const int32_t rows = needs_logits ? 1 + seq.num_draft_tokens : 0;
    for (int32_t j = rows; j > 0; --j) {
      logit_rows.push_back(static_cast<int64_t>(tokens.size()) - j);
    }
    seq_logit_rows.push_back(rows);
  }
  const int64_t num_logit_rows = static_cast<int64_t>(logit_rows.size());
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
      if (embed_from_lm_head_) {
        lm_head_.OwnRowToF32(local, x + r * dim);
      } else {
        tok_embeddings_.RowToF32(local, x + r * dim);
      }
    } else {
      std::fill(x + r * dim, x + (r + 1) * dim, 0.0f);
    }
  }
  if (c.embedding_scale != 1.0f) {
    for (int64_t i = 0; i < T * dim; ++i) x[i] *= c.embedding_scale;
  }
  if (absl::Status s = all_reduce_x(); !s.ok()) return s;

  k::PagedAttentionArgs attn_args;
  attn_args.q = qkv;
  attn_args.q_row_stride = qkv_dim;
  attn_args.out = attn;
  attn_args.out_row_stride = q_dim;
  attn_args.num_heads = weights_.num_heads;
  attn_args.scale = c.attention_scale > 0.0f ? c.attention_scale
                                             : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  attn_args.softcap = c.attn_softcap;
  attn_args.isa = isa_;
  // Elementwise kernels split over rows; small steps stay on the caller.
  const int64_t threads = pool_->num_threads();
  const int64_t row_grain = std::max<int64_t>(1, (T + threads - 1) / threads);

  // A sublayer's output y [T, dim] (the row-parallel projection's partial sums under
  // tensor parallelism) joins the residual stream: added onto x by the GEMM itself, or,
  // with post-norms (Gemma), summed over the ranks, normalised, then added.
  auto post_norm_add = [&](const std::vector<float>& norm) -> absl::Status {
    if (tp) {
      if (absl::Status s = comm_->AllReduceSum(xb, T * dim, CommDType::kF32); !s.ok()) return s;
    }
    k::RmsNorm(xb, dim, T, dim, norm.data(), c.rms_norm_eps, xb, dim);
    for (int64_t i = 0; i < T * dim; ++i) x[i] += xb[i];
    return absl::OkStatus();
  };
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const ShardLayer& w = weights_.layers[l];
    const LayerLinears& lin = linears_[l];
    const k::KvCacheView kv = kv_->layer(l);
    const int32_t group = layer_groups_.group[l];
    const bool local = c.is_local(l);
    const k::RopeParams& rope = local ? rope_local_ : rope_;
    attn_args.window = local ? c.sliding_window : 0;
    // Attention block.
    k::RmsNorm(x, dim, T, dim, w.attn_norm.data(), c.rms_norm_eps, xb, dim);
    Gemm(xb, dim, T, lin.qkv, 0.0f, qkv, qkv_dim);
    k::ParallelFor(T > 16 ? pool_.get() : nullptr, T, row_grain, [&](int64_t b, int64_t e) {
      PrepareQk(w, rope, qkv, qkv_dim, b, e, positions.data());
    });
    k::WriteKv(qkv + q_dim, qkv + q_dim + kv_dim, qkv_dim, slots[group], kv);
    k::PagedAttention(attn_args, attn_seqs[group], kv, pool_.get());
    if (c.post_norms) {
      Gemm(attn, q_dim, T, lin.wo, 0.0f, xb, dim);
      if (absl::Status s = post_norm_add(w.post_attn_norm); !s.ok()) return s;
    } else {
      Gemm(attn, q_dim, T, lin.wo, residual_beta, x, dim);
      if (absl::Status s = all_reduce_x(); !s.ok()) return s;
    }
    // MLP block.
    k::RmsNorm(x, dim, T, dim, w.ffn_norm.data(), c.rms_norm_eps, xb, dim);
    if (c.moe()) {
      MixtureOfExperts(lin, T, residual_beta);
    } else {
      Gemm(xb, dim, T, lin.gate_up, 0.0f, gate_up_.data(), 2 * hidden);
      k::ParallelFor(T > 16 ? pool_.get() : nullptr, T, row_grain, [&](int64_t b, int64_t e) {
        if (c.gelu_mlp) {
          k::GeGlu(gate_up_.data() + b * 2 * hidden, e - b, hidden, hidden_.data() + b * hidden);
        } else {
          k::SwiGlu(gate_up_.data() + b * 2 * hidden, e - b, hidden,
                    hidden_.data() + b * hidden, isa_);
        }
      });
      if (c.post_norms) {
        Gemm(hidden_.data(), hidden, T, lin.down, 0.0f, xb, dim);
        if (absl::Status s = post_norm_add(w.post_ffn_norm); !s.ok()) return s;
        continue;
      }
      Gemm(hidden_.data(), hidden, T, lin.down, residual_beta, x, dim);
    }
    if (absl::Status s = all_reduce_x(); !s.ok()) return s;
  }

  if (absl::Status s = ComputeLogits(logit_rows, num_logit_rows); !s.ok()) return s;

  StepOutput out;
  out.seqs.resize(step.seqs.size());
  int64_t row = 0;
  for (size_t s = 0; s < step.seqs.size(); ++s) {
    const SequenceStep& seq = step.seqs[s];
    out.seqs[s].seq_id = seq.seq_id;
    if (seq_logit_rows[s] == 0 || (tp && comm_->rank() != 0)) continue;
    const absl::Span<const float> logits(logits_.data() + row * c.vocab_size,
                                         seq_logit_rows[s] * int64_t{c.vocab_size});
    row += seq_logit_rows[s];
    if (seq.num_draft_tokens > 0) {
      sampler_.Verify(logits, seq, &out.seqs[s]);
      continue;
    }
    sampler_.Process(logits, seq, seq.start_pos + static_cast<int64_t>(seq.token_ids.size()),
                     &out.seqs[s]);
  }
  return out;
}

void CpuModelRunner::MixtureOfExperts(const LayerLinears& lin, int64_t T, float residual_beta) {
  const ModelConfig& c = weights_.config;
  const int64_t dim = c.dim;
  const int64_t units = weights_.expert_hidden_dim;
  Gemm(xb_.data(), dim, T, lin.router, 0.0f, router_logits_.data(), c.num_experts);
  RouteTokens(router_logits_.data(), T, c.num_experts, c.num_experts_used,
              c.expert_weights_norm, c.expert_weights_scale, &routing_);
  active_experts_.clear();
  int64_t most_rows = 0;
  for (int32_t e = 0; e < c.num_experts; ++e) {
    const int64_t n = routing_.offsets[e + 1] - routing_.offsets[e];
    if (n == 0) continue;
    active_experts_.push_back(e);
    most_rows = std::max(most_rows, n);
  }
  // Side by side only for fewer rows than oneDNN would take (a GEMM on the calling
  // thread alone must stay on Folio's kernels) and on the packed path (OpenBLAS has
  // threads of its own).
  int64_t onednn_rows = onednn_ != nullptr ? onednn_min_rows_ : INT64_MAX;
  if (onednn_ != nullptr && dequant_min_rows_ > 0) {
    onednn_rows = std::min<int64_t>(onednn_rows, dequant_min_rows_);
  }
  const bool side_by_side = gemm_threading_ == GemmThreading::kPacked &&
                            pool_->num_threads() > 1 &&
                            active_experts_.size() > 1 &&
                            most_rows <= std::min<int64_t>(kMaxSideBySideRows, onednn_rows - 1);
  if (side_by_side) {
    // Each expert its own rows of the buffers: rows [offsets[e], offsets[e + 1]).
    const int64_t rows = static_cast<int64_t>(routing_.rows.size());
    auto grow = [](std::vector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    };
    grow(expert_in_, rows * dim);
    grow(expert_out_, rows * dim);
    grow(gate_up_, rows * 2 * units);
    grow(hidden_, rows * units);
  }
  auto run_expert = [&](int32_t e, k::ThreadPool* pool) {
    const int64_t begin = routing_.offsets[e];
    const int64_t n = routing_.offsets[e + 1] - begin;
    const int64_t at = side_by_side ? begin : 0;
    float* in = expert_in_.data() + at * dim;
    for (int64_t i = 0; i < n; ++i) {
      const float* src = xb_.data() + routing_.rows[begin + i] * dim;
      std::copy(src, src + dim, in + i * dim);
    }
    const LayerLinears::Expert& ex = lin.experts[e];
    float* gate_up = gate_up_.data() + at * 2 * units;
    float* hidden = hidden_.data() + at * units;
    GemmOn(pool, in, dim, n, ex.gate_up, 0.0f, gate_up, 2 * units);
    k::SwiGlu(gate_up, n, units, hidden, isa_);
    GemmOn(pool, hidden, units, n, ex.down, 0.0f, expert_out_.data() + at * dim, dim);
  };
  float* sum = moe_sum_.data();
  std::fill(sum, sum + T * dim, 0.0f);
  // Each token's outputs are summed in increasing expert order, whether it ran alone or
  // in a batch.
  auto add_expert = [&](int32_t e) {
    const int64_t begin = routing_.offsets[e];
    const int64_t n = routing_.offsets[e + 1] - begin;
    const float* out = expert_out_.data() + (side_by_side ? begin : 0) * dim;
    for (int64_t i = 0; i < n; ++i) {
      const float weight = routing_.weights[begin + i];
      float* dst = sum + routing_.rows[begin + i] * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] += weight * out[i * dim + d];
    }
  };
  if (side_by_side) {
    const int64_t n = static_cast<int64_t>(active_experts_.size());
    k::ParallelFor(pool_.get(), n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) run_expert(active_experts_[i], nullptr);
    });
    for (int32_t e : active_experts_) add_expert(e);
  } else {
    for (int32_t e : active_experts_) {
      run_expert(e, pool_.get());
      add_expert(e);
    }
  }
  float* x = x_.data();
  if (residual_beta == 0.0f) {
    std::copy(sum, sum + T * dim, x);
  } else {
    for (int64_t i = 0; i < T * dim; ++i) x[i] += sum[i];
  }
}

void CpuModelRunner::PrepareQk(const ShardLayer& w, const k::RopeParams& rope, float* qkv,
                               int64_t qkv_dim, int64_t b, int64_t e,
                               const int32_t* positions) {
  const int32_t head_dim = weights_.config.head_dim;
  const int64_t q_dim = weights_.q_dim();
  const float eps = weights_.config.rms_norm_eps;
  for (int64_t r = b; r < e; ++r) {
    float* row = qkv + r * qkv_dim;
    if (!w.qkv_bias.empty()) {
      for (int64_t i = 0; i < qkv_dim; ++i) row[i] += w.qkv_bias[i];
    }
    if (!w.q_norm.empty()) {  // each head is one row of head_dim values
      k::RmsNorm(row, head_dim, weights_.num_heads, head_dim, w.q_norm.data(), eps, row, head_dim);
      k::RmsNorm(row + q_dim, head_dim, weights_.num_kv_heads, head_dim, w.k_norm.data(), eps,
                 row + q_dim, head_dim);
    }
  }
  // q and k heads are adjacent in each qkv row, so one call rotates both.
  k::ApplyRope(qkv + b * qkv_dim, qkv_dim, e - b, positions + b,
               weights_.num_heads + weights_.num_kv_heads, head_dim, rope);
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
  // Gemma's final softcap, on the whole logit rows.
  auto softcap = [&] {
    if (c.final_softcap <= 0.0f) return;
    const float cap = c.final_softcap;
    float* l = logits_.data();
    for (int64_t i = 0; i < num_logit_rows * c.vocab_size; ++i) l[i] = cap * std::tanh(l[i] / cap);
  };
  if (!tensor_parallel()) {
    Gemm(xb_.data(), dim, num_logit_rows, lm_head_, 0.0f, logits_.data(), c.vocab_size);
    softcap();
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
  softcap();
  return absl::OkStatus();
}

}  // namespace folio::worker

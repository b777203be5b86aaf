#include "services/worker/engine/weight_shard.h"

#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

absl::Status CheckShape(const TensorView& t, const std::vector<int64_t>& w,
                        const std::string& name) {
  std::vector<int64_t> got = t.shape;
  if (got.size() == 2 && got[1] == 1 && w.size() == 1) got.pop_back();  // [n, 1] is [n]
  if (t.data == nullptr || got != w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " has shape [", absl::StrJoin(t.shape, ", "), "]",
        t.data == nullptr ? " and no data" : "", "; the model config needs [",
        absl::StrJoin(w, ", "), "]"));
  }
  return absl::OkStatus();
}

// A vector the runner keeps in f32 (norms, biases): it must be stored unquantized.
absl::StatusOr<std::vector<float>> SmallVector(const TensorView& t, int64_t n,
                                               const std::string& name) {
  if (absl::Status s = CheckShape(t, {n}, name); !s.ok()) return s;
  if (FormatOf(t.dtype).is_block_quantized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " is ", DTypeName(t.dtype),
        "; norms, biases and RoPE factors must be f32, f16 or bf16"));
  }
  return ToF32(t);
}

// An RMSNorm weight: SmallVector plus the model's norm_offset (Hugging Face Gemma
// stores w for its (1 + w)).
absl::StatusOr<std::vector<float>> NormVector(const TensorView& t, int64_t n,
                                              const std::string& name, float offset) {
  absl::StatusOr<std::vector<float>> v = SmallVector(t, n, name);
  if (!v.ok() || offset == 0.0f) return v;
  for (float& x : *v) x += offset;
  return v;
}

}  // namespace

kernels::StoredKind StoredKindOf(DType dtype) {
  using kernels::StoredKind;
  switch (dtype) {
    case DType::kF16:
      return StoredKind::kF16;
    case DType::kBF16:
      return StoredKind::kBF16;
    case DType::kQ8_0:
      return StoredKind::kQ8_0;
    case DType::kQ4_0:
      return StoredKind::kQ4_0;
    case DType::kQ4_1:
      return StoredKind::kQ4_1;
    case DType::kQ5_0:
      return StoredKind::kQ5_0;
    case DType::kQ5_1:
      return StoredKind::kQ5_1;
    case DType::kQ4_K:
      return StoredKind::kQ4_K;
    case DType::kQ5_K:
      return StoredKind::kQ5_K;
    case DType::kQ6_K:
      return StoredKind::kQ6_K;
    default:
      return StoredKind::kOther;
  }
}


int64_t ShardMatrix::out() const {
  int64_t n = 0;
  for (const Part& p : parts) n += p.rows.size();
  return n;
}

bool ShardMatrix::all_of(DType dtype) const {
  for (const Part& p : parts) {
    if (p.tensor.dtype != dtype) return false;
  }
  return !parts.empty();
}

int64_t ShardMatrix::stored_bytes() const {
  int64_t n = 0;
  for (const Part& p : parts) n += p.rows.size() * DTypeBytes(p.tensor.dtype, cols.size());
  return n;
}

kernels::TypedMatrix ShardMatrix::typed() const {
  kernels::TypedMatrix m(in());
  for (const Part& p : parts) {
    const WeightFormat& f = FormatOf(p.tensor.dtype);
    const int64_t row_bytes = DTypeBytes(p.tensor.dtype, p.tensor.cols());
    kernels::TypedRows r;
    r.data = static_cast<const uint8_t*>(p.tensor.data) + p.rows.begin * row_bytes +
             DTypeBytes(p.tensor.dtype, cols.begin);
    r.row_stride_bytes = row_bytes;
    r.rows = p.rows.size();
    r.block_values = f.block_values;
    r.dequantize = f.dequantize;
    r.type_name = f.name;
    r.kind = StoredKindOf(p.tensor.dtype);
    m.Append(r);
  }
  return m;
}

absl::StatusOr<WeightShard> WeightShard::Create(const ModelWeights& weights, TpShard shard) {
  const ModelConfig& c = weights.config;
  if (c.dim <= 0 || (c.hidden_dim <= 0 && !c.moe()) || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 || c.max_seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config needs positive sizes: dim=", c.dim, " hidden_dim=", c.hidden_dim,
        " layers=", c.num_layers, " heads=", c.num_heads, " kv_heads=", c.num_kv_heads,
        " head_dim=", c.head_dim, " vocab=", c.vocab_size, " max_seq_len=", c.max_seq_len));
  }
  if (c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported head layout: ", c.num_heads, " heads over ", c.num_kv_heads,
        " kv heads, head_dim ", c.head_dim, " (needs a whole GQA ratio and even head_dim)"));
  }
  if (static_cast<int32_t>(weights.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", weights.layers.size(),
                                                   " layers; config says ", c.num_layers));
  }
  if (absl::Status s = CheckTpShard(c, shard); !s.ok()) return s;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();

  WeightShard out;
  out.config = c;
  out.shard = shard;
  out.num_heads = c.num_heads / shard.size;
  out.num_kv_heads = c.num_kv_heads / shard.size;
  out.vocab = SplitEvenly(c.vocab_size, shard.size, shard.rank);
  const ShardRange q_rows{int64_t{shard.rank} * out.num_heads * c.head_dim,
                          int64_t{shard.rank + 1} * out.num_heads * c.head_dim};
  const ShardRange kv_rows{int64_t{shard.rank} * out.num_kv_heads * c.head_dim,
                           int64_t{shard.rank + 1} * out.num_kv_heads * c.head_dim};
  const ShardRange all_dim{0, c.dim};

  auto matrix = [](std::initializer_list<std::pair<const TensorView*, const char*>> tensors,
                   std::initializer_list<ShardRange> rows, ShardRange cols,
                   const std::string& prefix) {
    ShardMatrix m;
    m.cols = cols;
    auto r = rows.begin();
    for (const auto& [t, name] : tensors) m.parts.push_back({*t, prefix + name, *r++});
    return m;
  };

  if (absl::Status s = CheckShape(weights.tok_embeddings, {c.vocab_size, c.dim}, "token_embd");
      !s.ok()) {
    return s;
  }
  out.tok_embeddings = matrix({{&weights.tok_embeddings, "token_embd"}}, {out.vocab}, all_dim, "");
  if (c.tied_embeddings) {
    out.lm_head = out.tok_embeddings;
  } else {
    if (absl::Status s = CheckShape(weights.lm_head, {c.vocab_size, c.dim}, "output"); !s.ok()) {
      return s;
    }
    out.lm_head = matrix({{&weights.lm_head, "output"}}, {out.vocab}, all_dim, "");
  }
  absl::StatusOr<std::vector<float>> v =
      NormVector(weights.final_norm, c.dim, "output_norm", c.norm_offset);
  if (!v.ok()) return v.status();
  out.final_norm = *std::move(v);
  if (c.rope_freq_factors) {
    v = SmallVector(weights.rope_freqs, c.head_dim / 2, "rope_freqs");
    if (!v.ok()) return v.status();
    out.rope_freqs = *std::move(v);
  }

  // Hidden units (of the dense MLP, or of each expert) split in whole blocks of the
  // down projection's type (its columns are split).
  const TensorView* first_down =
      weights.layers.empty() ? nullptr
      : c.moe()              ? (weights.layers[0].experts.empty()
                                    ? nullptr
                                    : &weights.layers[0].experts[0].w_down)
                             : &weights.layers[0].w_down;
  const int32_t units = c.moe() ? c.expert_hidden_dim : c.hidden_dim;
  const char* down_name = c.moe() ? "ffn_down_exps" : "ffn_down";
  const int32_t down_block = first_down == nullptr ? 1 : FormatOf(first_down->dtype).block_values;
  if (units <= 0 || units % down_block != 0 || units / down_block < shard.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        down_name, " is ", first_down == nullptr ? "absent" : DTypeName(first_down->dtype),
        " with ", units, " hidden units: they do not split over ", shard.size,
        " tensor-parallel ranks in whole ", down_block, "-value blocks"));
  }
  const ShardRange hidden_blocks = SplitEvenly(units / down_block, shard.size, shard.rank);
  const ShardRange hidden{hidden_blocks.begin * down_block, hidden_blocks.end * down_block};
  if (c.moe()) {
    out.expert_hidden_dim = static_cast<int32_t>(hidden.size());
  } else {
    out.hidden_dim = static_cast<int32_t>(hidden.size());
  }

  out.layers.resize(c.num_layers);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    ShardLayer& o = out.layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    for (auto [t, shape, name] :
         {std::tuple{&w.wq, std::vector<int64_t>{q_dim, c.dim}, "attn_q"},
          std::tuple{&w.wk, std::vector<int64_t>{kv_dim, c.dim}, "attn_k"},
          std::tuple{&w.wv, std::vector<int64_t>{kv_dim, c.dim}, "attn_v"},
          std::tuple{&w.wo, std::vector<int64_t>{c.dim, q_dim}, "attn_output"}}) {
      if (absl::Status s = CheckShape(*t, shape, p + name); !s.ok()) return s;
    }
    // The MLP's projections: one dense SwiGLU, or each expert's.
    auto mlp = [&](const TensorView& gate, const TensorView& up, const TensorView& down,
                   const std::string& name, ShardMatrix* gate_up_out,
                   ShardMatrix* down_out) -> absl::Status {
      for (auto [t, shape, what] :
           {std::tuple{&gate, std::vector<int64_t>{units, c.dim}, "gate"},
            std::tuple{&up, std::vector<int64_t>{units, c.dim}, "up"},
            std::tuple{&down, std::vector<int64_t>{c.dim, units}, "down"}}) {
        if (absl::Status s = CheckShape(*t, shape, absl::StrCat(p, name, " ", what)); !s.ok()) {
          return s;
        }
      }
      if (FormatOf(down.dtype).block_values != down_block) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", p, name, " down is ", DTypeName(down.dtype), " but blk.0's is ",
            DTypeName(first_down->dtype), ": Folio needs one block size for every ", down_name));
      }
      const std::string gate_name = c.moe() ? name + ".gate" : "ffn_gate";
      const std::string up_name = c.moe() ? name + ".up" : "ffn_up";
      const std::string dn_name = c.moe() ? name + ".down" : "ffn_down";
      *gate_up_out = matrix({{&gate, gate_name.c_str()}, {&up, up_name.c_str()}},
                            {hidden, hidden}, all_dim, p);
      *down_out = matrix({{&down, dn_name.c_str()}}, {all_dim}, hidden, p);
      return absl::OkStatus();
    };
    if (c.moe()) {
      if (c.num_experts_used < 1 || c.num_experts_used > c.num_experts) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model config uses ", c.num_experts_used, " experts a token out of ",
            c.num_experts, " (needs 1 to ", c.num_experts, ")"));
      }
      if (static_cast<int32_t>(w.experts.size()) != c.num_experts) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, " has ", w.experts.size(),
                                                       " experts; config says ",
                                                       c.num_experts));
      }
      if (absl::Status s = CheckShape(w.router, {c.num_experts, c.dim}, p + "ffn_gate_inp");
          !s.ok()) {
        return s;
      }
      o.router = matrix({{&w.router, "ffn_gate_inp"}}, {ShardRange{0, c.num_experts}},
                        all_dim, p);
      o.experts.resize(w.experts.size());
      for (size_t e = 0; e < w.experts.size(); ++e) {
        const LayerWeights::Expert& x = w.experts[e];
        if (absl::Status s = mlp(x.w_gate, x.w_up, x.w_down, absl::StrCat("expert ", e),
                                 &o.experts[e].gate_up, &o.experts[e].down);
            !s.ok()) {
          return s;
        }
      }
    } else if (absl::Status s = mlp(w.w_gate, w.w_up, w.w_down, "ffn", &o.gate_up, &o.down);
               !s.ok()) {
      return s;
    }
    const int32_t wo_block = FormatOf(w.wo.dtype).block_values;
    if (q_rows.begin % wo_block != 0 || q_rows.end % wo_block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", p, "attn_output is ", DTypeName(w.wo.dtype), ": splitting its ", q_dim,
          " columns by heads over ", shard.size, " tensor-parallel ranks (", out.num_heads,
          " heads of ", c.head_dim, " each) would cut its ", wo_block,
          "-value blocks; use a TP degree whose per-rank heads span whole blocks"));
    }
    absl::StatusOr<std::vector<float>> n =
        NormVector(w.attn_norm, c.dim, p + "attn_norm", c.norm_offset);
    if (!n.ok()) return n.status();
    o.attn_norm = *std::move(n);
    n = NormVector(w.ffn_norm, c.dim, p + "ffn_norm", c.norm_offset);
    if (!n.ok()) return n.status();
    o.ffn_norm = *std::move(n);
    if (c.post_norms) {
      n = NormVector(w.post_attn_norm, c.dim, p + "post_attention_norm", c.norm_offset);
      if (!n.ok()) return n.status();
      o.post_attn_norm = *std::move(n);
      n = NormVector(w.post_ffn_norm, c.dim, p + "post_ffw_norm", c.norm_offset);
      if (!n.ok()) return n.status();
      o.post_ffn_norm = *std::move(n);
    }
    o.qkv = matrix({{&w.wq, "attn_q"}, {&w.wk, "attn_k"}, {&w.wv, "attn_v"}},
                   {q_rows, kv_rows, kv_rows}, all_dim, p);
    o.wo = matrix({{&w.wo, "attn_output"}}, {all_dim}, q_rows, p);
    if (c.qkv_bias) {
      for (auto [t, n_all, rows, name] :
           {std::tuple{&w.bq, q_dim, q_rows, "attn_q.bias"},
            std::tuple{&w.bk, kv_dim, kv_rows, "attn_k.bias"},
            std::tuple{&w.bv, kv_dim, kv_rows, "attn_v.bias"}}) {
        absl::StatusOr<std::vector<float>> b = SmallVector(*t, n_all, p + name);
        if (!b.ok()) return b.status();
        o.qkv_bias.insert(o.qkv_bias.end(), b->begin() + rows.begin, b->begin() + rows.end);
      }
    }
    if (c.qk_norm) {
      n = NormVector(w.q_norm, c.head_dim, p + "attn_q_norm", c.norm_offset);
      if (!n.ok()) return n.status();
      o.q_norm = *std::move(n);
      n = NormVector(w.k_norm, c.head_dim, p + "attn_k_norm", c.norm_offset);
      if (!n.ok()) return n.status();
      o.k_norm = *std::move(n);
    }
  }
  return out;
}

}  // namespace folio::worker

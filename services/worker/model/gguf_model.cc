#include "services/worker/model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "absl/strings/str_join.h"
#include "services/worker/model/architecture.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/gguf_split.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/mapped_weights.h"

namespace folio::worker {
namespace {

// Reads typed metadata and tensors from one GGUF file, prefixing errors with its name.
class Reader {
 public:
  explicit Reader(const GgufFile& f) : f_(f) {}

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(f_.name(), ": ", what));
  }

  // Wraps a GgufValue accessor error with the key.
  absl::Status KeyError(absl::string_view key, const absl::Status& s) const {
    return Error(absl::StrCat("key '", key, "': ", s.message()));
  }

  // A positive int32; `fallback` (if not null) when the key is absent.
  absl::StatusOr<int32_t> PositiveInt(absl::string_view key, const int32_t* fallback) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) {
      if (fallback != nullptr) return *fallback;
      return Error(absl::StrCat("missing metadata key '", key, "'"));
    }
    absl::StatusOr<int64_t> n = v->AsInt64();
    if (!n.ok()) return KeyError(key, n.status());
    if (*n <= 0 || *n > std::numeric_limits<int32_t>::max()) {
      return Error(absl::StrCat("key '", key, "' is ", *n, ", expected a positive int32"));
    }
    return static_cast<int32_t>(*n);
  }

  absl::StatusOr<float> Float(absl::string_view key, const float* fallback) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) {
      if (fallback != nullptr) return *fallback;
      return Error(absl::StrCat("missing metadata key '", key, "'"));
    }
    absl::StatusOr<double> d = v->AsDouble();
    if (!d.ok()) return KeyError(key, d.status());
    if (!(*d > 0) || *d > std::numeric_limits<float>::max()) {
      return Error(absl::StrCat("key '", key, "' is ", *d, ", expected a positive float"));
    }
    return static_cast<float>(*d);
  }

  absl::StatusOr<absl::string_view> String(absl::string_view key) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return Error(absl::StrCat("missing metadata key '", key, "'"));
    absl::StatusOr<absl::string_view> s = v->AsString();
    if (!s.ok()) return KeyError(key, s.status());
    return *s;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return fallback;
    absl::StatusOr<bool> b = v->AsBool();
    if (!b.ok()) return KeyError(key, b.status());
    return *b;
  }

  // A token id in [0, vocab_size).
  absl::StatusOr<int32_t> TokenId(absl::string_view key, int32_t fallback,
                                  int32_t vocab_size) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return fallback;
    absl::StatusOr<int64_t> n = v->AsInt64();
    if (!n.ok()) return KeyError(key, n.status());
    if (*n < 0 || *n >= vocab_size) {
      return Error(absl::StrCat("key '", key, "' is ", *n, ", outside the vocabulary [0, ",
                                vocab_size, ")"));
    }
    return static_cast<int32_t>(*n);
  }

  // The tensor `name` as a view of shape `shape` (math order: {out, in} or {n}).
  absl::StatusOr<TensorView> Tensor(const std::string& name,
                                    const std::vector<int64_t>& shape) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return Error(absl::StrCat("missing tensor '", name, "'"));
    const std::vector<int64_t> got(t->ne.rbegin(), t->ne.rend());
    if (got != shape) {
      return Error(absl::StrCat("tensor '", name, "' has shape [", absl::StrJoin(got, ", "),
                                "] (GGUF ne {", absl::StrJoin(t->ne, ", "), "}), expected [",
                                absl::StrJoin(shape, ", "), "]"));
    }
    TensorView v;
    v.dtype = GgmlTypeToDType(t->type);
    v.data = t->data;
    v.shape = shape;
    return v;
  }

 private:
  const GgufFile& f_;
};

#define FOLIO_ASSIGN_OR_RETURN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  var = *std::move(tmp)
#define FOLIO_CONCAT_INNER(a, b) a##b
#define FOLIO_CONCAT(a, b) FOLIO_CONCAT_INNER(a, b)
#define ASSIGN_OR_RETURN(var, expr) \
  FOLIO_ASSIGN_OR_RETURN_IMPL(var, FOLIO_CONCAT(status_or_, __LINE__), expr)

absl::Status ReadConfig(const GgufFile& f, const Reader& r, ModelConfig* c,
                        const Architecture** arch_out) {
  ASSIGN_OR_RETURN(absl::string_view arch_name, r.String("general.architecture"));
  const Architecture* arch = FindArchitecture(arch_name);
  if (arch == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(f.name(), ": architecture '", arch_name,
                     "' (key 'general.architecture') is not supported (supported: ",
                     SupportedArchitectures(), ")"));
  }
  *arch_out = arch;
  c->architecture = arch->name;
  c->rope_style = RopeStyleFor(*arch, QkLayout::kGguf);
  const std::string k = absl::StrCat(arch->name, ".");
  if (f.FindValue("general.name") != nullptr) {
    ASSIGN_OR_RETURN(absl::string_view name, r.String("general.name"));
    c->name = std::string(name);
  }
  ASSIGN_OR_RETURN(c->dim, r.PositiveInt(k + "embedding_length", nullptr));
  ASSIGN_OR_RETURN(c->hidden_dim, r.PositiveInt(k + "feed_forward_length", nullptr));
  ASSIGN_OR_RETURN(c->num_layers, r.PositiveInt(k + "block_count", nullptr));
  ASSIGN_OR_RETURN(c->num_heads, r.PositiveInt(k + "attention.head_count", nullptr));
  ASSIGN_OR_RETURN(c->num_kv_heads,
                   r.PositiveInt(k + "attention.head_count_kv", &c->num_heads));
  ASSIGN_OR_RETURN(c->max_seq_len, r.PositiveInt(k + "context_length", nullptr));
  const float default_theta = 10000.0f;
  ASSIGN_OR_RETURN(c->rope_theta, r.Float(k + "rope.freq_base", &default_theta));
  ASSIGN_OR_RETURN(c->rms_norm_eps,
                   r.Float(k + "attention.layer_norm_rms_epsilon", nullptr));

  if (c->num_kv_heads > c->num_heads || c->num_heads % c->num_kv_heads != 0) {
    return r.Error(absl::StrCat("head_count ", c->num_heads,
                                " is not a multiple of head_count_kv ", c->num_kv_heads));
  }
  // The per-head width: attention.key_length when given (Mistral-Nemo, Qwen3), else
  // dim / heads.
  if (f.FindValue(k + "attention.key_length") == nullptr && c->dim % c->num_heads != 0) {
    return r.Error(absl::StrCat("embedding_length ", c->dim,
                                " is not a multiple of head_count ", c->num_heads,
                                " and attention.key_length is absent"));
  }
  const int32_t default_head_dim = c->dim / c->num_heads;
  ASSIGN_OR_RETURN(c->head_dim, r.PositiveInt(k + "attention.key_length", &default_head_dim));
  ASSIGN_OR_RETURN(int32_t value_length,
                   r.PositiveInt(k + "attention.value_length", &c->head_dim));
  if (value_length != c->head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": key '", k, "attention.value_length' is ", value_length,
        " but the key length is ", c->head_dim, " (Folio needs equal K and V head widths)"));
  }
  if (c->head_dim % 2 != 0) {
    return r.Error(absl::StrCat("head dimension ", c->head_dim, " is odd (RoPE needs pairs)"));
  }
  ASSIGN_OR_RETURN(int32_t rope_dims, r.PositiveInt(k + "rope.dimension_count", &c->head_dim));
  if (rope_dims != c->head_dim) {
    return absl::UnimplementedError(
        absl::StrCat(f.name(), ": key '", k, "rope.dimension_count' is ", rope_dims,
                     ", which differs from the head dimension ", c->head_dim,
                     " (partial rotary embeddings are not supported)"));
  }
  // RoPE scaling: none, or linear (positions divided by the factor). Llama 3.1's
  // frequency scaling comes as the rope_freqs tensor instead.
  std::string scaling = "none";
  if (f.FindValue(k + "rope.scaling.type") != nullptr) {
    ASSIGN_OR_RETURN(absl::string_view t, r.String(k + "rope.scaling.type"));
    scaling = std::string(t);
  }
  const float one = 1.0f;
  float factor = 1.0f;
  if (f.FindValue(k + "rope.scaling.factor") != nullptr) {
    ASSIGN_OR_RETURN(factor, r.Float(k + "rope.scaling.factor", &one));
  } else if (f.FindValue(k + "rope.scale_linear") != nullptr) {  // older converters
    ASSIGN_OR_RETURN(factor, r.Float(k + "rope.scale_linear", &one));
    if (scaling == "none") scaling = "linear";
  }
  if (scaling == "linear") {
    c->rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none") {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": key '", k, "rope.scaling.type' is '", scaling,
        "'; supported: 'none', 'linear' (and Llama 3.1's rope_freqs tensor)"));
  }
  return absl::OkStatus();
}

// The mixture-of-experts keys: <arch>.expert_count (0: a dense model, as llama.cpp's
// converter writes for any config with an expert count), expert_used_count and, for
// qwen3moe, expert_feed_forward_length (absent: feed_forward_length / expert_used_count,
// as llama.cpp; Mixtral's experts are feed_forward_length wide). llama.cpp routes both
// units by softmax and always normalises the chosen weights, whatever the file says;
// Folio honours expert_weights_norm and expert_weights_scale when a file states them (as
// Hugging Face's norm_topk_prob does), and agrees with llama.cpp on every file that does
// not (the converters write neither for these units). Keys of routing Folio does not
// implement (shared experts, expert groups, a gating function other than softmax) are
// refused by name rather than ignored.
absl::Status ReadExperts(const GgufFile& f, const Reader& r, const Architecture& arch,
                         int32_t num_layers, ModelConfig* c) {
  const std::string k = absl::StrCat(arch.name, ".");
  const GgufValue* count = f.FindValue(k + "expert_count");
  if (count != nullptr) {
    absl::StatusOr<int64_t> n = count->AsInt64();
    if (n.ok() && *n == 0) count = nullptr;  // written for a dense model
  }
  if (count == nullptr) {
    if (arch.experts == TensorPresence::kRequired) {
      return r.Error(absl::StrCat("missing metadata key '", k, "expert_count' (", arch.name,
                                  " is a mixture of experts)"));
    }
    return absl::OkStatus();
  }
  if (arch.experts == TensorPresence::kNone) {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": key '", k, "expert_count': architecture '", arch.name,
        "' has no mixture of experts in Folio"));
  }
  // 1024 experts is llama.cpp's limit too (LLAMA_MAX_EXPERTS); layers x experts bounds
  // the views allocated from the file's word (Qwen3-235B: 94 x 128 = 12,032; a file whose
  // tensors all share one data slab must not make the loader allocate without end).
  constexpr int32_t kMaxExperts = 1024;
  constexpr int64_t kMaxLayerExperts = 65536;
  ASSIGN_OR_RETURN(c->num_experts, r.PositiveInt(k + "expert_count", nullptr));
  if (c->num_experts > kMaxExperts ||
      int64_t{c->num_experts} * num_layers > kMaxLayerExperts) {
    return r.Error(absl::StrCat("key '", k, "expert_count' is ", c->num_experts, " over ",
                                num_layers, " layers, above Folio's limits (", kMaxExperts,
                                " experts, ", kMaxLayerExperts, " in all layers)"));
  }
  ASSIGN_OR_RETURN(c->num_experts_used, r.PositiveInt(k + "expert_used_count", nullptr));
  if (c->num_experts_used > c->num_experts) {
    return r.Error(absl::StrCat("key '", k, "expert_used_count' is ", c->num_experts_used,
                                ", more than the ", c->num_experts, " experts"));
  }
  if (arch.experts == TensorPresence::kRequired) {
    const int32_t split = std::max(1, c->hidden_dim / c->num_experts_used);
    ASSIGN_OR_RETURN(c->expert_hidden_dim,
                     r.PositiveInt(k + "expert_feed_forward_length", &split));
  } else {
    c->expert_hidden_dim = c->hidden_dim;
  }
  ASSIGN_OR_RETURN(c->expert_weights_norm, r.Bool(k + "expert_weights_norm", true));
  if (const GgufValue* v = f.FindValue(k + "expert_weights_scale"); v != nullptr) {
    absl::StatusOr<double> d = v->AsDouble();
    if (!d.ok()) return r.KeyError(k + "expert_weights_scale", d.status());
    if (!(*d >= 0) || *d > 1e6) {
      return r.Error(absl::StrCat("key '", k, "expert_weights_scale' is ", *d));
    }
    if (*d != 0) c->expert_weights_scale = static_cast<float>(*d);
  }
  for (const char* unsupported : {"expert_shared_count", "expert_group_count"}) {
    const GgufValue* v = f.FindValue(k + unsupported);
    if (v == nullptr) continue;
    absl::StatusOr<int64_t> n = v->AsInt64();
    if (n.ok() && *n <= (std::string(unsupported) == "expert_group_count" ? 1 : 0)) continue;
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": key '", k, unsupported, "' is set: shared experts and expert groups are "
        "not supported"));
  }
  if (const GgufValue* v = f.FindValue(k + "expert_gating_func"); v != nullptr) {
    absl::StatusOr<int64_t> n = v->AsInt64();
    // llama_expert_gating_func_type: 0 none (the unit's default, softmax here), 1 softmax.
    if (!n.ok() || (*n != 0 && *n != 1)) {
      return absl::UnimplementedError(absl::StrCat(
          f.name(), ": key '", k, "expert_gating_func' is not softmax (1); Folio routes by "
          "softmax only"));
    }
  }
  return absl::OkStatus();
}

// A float key that may be 0 (softcaps): `fallback` when absent.
absl::StatusOr<float> NonNegativeFloat(const GgufFile& f, const Reader& r, const std::string& key,
                                       float fallback) {
  const GgufValue* v = f.FindValue(key);
  if (v == nullptr) return fallback;
  absl::StatusOr<double> d = v->AsDouble();
  if (!d.ok()) return r.KeyError(key, d.status());
  if (!(*d >= 0) || *d > 1e9) return r.Error(absl::StrCat("key '", key, "' is ", *d));
  return static_cast<float>(*d);
}

// Gemma 2 and 3 (llama.cpp's src/models/gemma2.cpp, gemma3.cpp and llama-hparams): the
// converters store every RMSNorm weight as 1 + w, so the norms are plain; what differs is
// read here. Local (sliding-window) layers follow <arch>.attention.sliding_window_pattern,
// an array of per-layer flags or a period n (layer l local when l % n < n - 1; absent:
// 2 for gemma2, even layers local; 6 for gemma3); gemma3 has no window unless
// attention.sliding_window > 0 (gemma2: 4096 when absent). The query scale is
// 1 / sqrt(head_dim), except for the 27B shapes (46 layers for gemma2, 62 for gemma3),
// whose query_pre_attn_scalar is dim / heads: llama.cpp decides by the layer count, as no
// key carries it, and so does Folio.
absl::Status ReadGemma(const GgufFile& f, const Reader& r, const Architecture& arch,
                       ModelConfig* c) {
  const std::string k = absl::StrCat(arch.name, ".");
  c->embedding_scale = std::sqrt(static_cast<float>(c->dim));
  c->gelu_mlp = true;
  c->post_norms = true;
  const int32_t layers_27b = arch.gemma == 2 ? 46 : 62;
  const int32_t query_dim = c->num_layers == layers_27b && c->dim >= c->num_heads
                                ? c->dim / c->num_heads
                                : c->head_dim;
  c->attention_scale = 1.0f / std::sqrt(static_cast<float>(query_dim));
  int32_t period = 0;
  if (arch.gemma == 2) {
    ASSIGN_OR_RETURN(c->attn_softcap, NonNegativeFloat(f, r, k + "attn_logit_softcapping", 50.0f));
    ASSIGN_OR_RETURN(c->final_softcap,
                     NonNegativeFloat(f, r, k + "final_logit_softcapping", 30.0f));
    const int32_t default_window = 4096;
    ASSIGN_OR_RETURN(c->sliding_window,
                     r.PositiveInt(k + "attention.sliding_window", &default_window));
    period = 2;
    c->rope_theta_local = c->rope_theta;
    c->rope_freq_scale_local = c->rope_freq_scale;
  } else {
    ASSIGN_OR_RETURN(c->final_softcap, NonNegativeFloat(f, r, k + "final_logit_softcapping", 0.0f));
    if (const GgufValue* v = f.FindValue(k + "attention.sliding_window"); v != nullptr) {
      absl::StatusOr<int64_t> n = v->AsInt64();
      if (!n.ok()) return r.KeyError(k + "attention.sliding_window", n.status());
      if (*n < 0 || *n > std::numeric_limits<int32_t>::max()) {
        return r.Error(absl::StrCat("key '", k, "attention.sliding_window' is ", *n));
      }
      c->sliding_window = static_cast<int32_t>(*n);
    }
    period = 6;
    c->rope_freq_scale_local = 1.0f;
  }
  const float default_local_theta = arch.gemma == 2 ? c->rope_theta : 10000.0f;
  ASSIGN_OR_RETURN(c->rope_theta_local, r.Float(k + "rope.freq_base_swa", &default_local_theta));
  if (c->sliding_window == 0) return absl::OkStatus();
  c->local_layers.assign(static_cast<size_t>(c->num_layers), false);
  const std::string pattern_key = k + "attention.sliding_window_pattern";
  if (const GgufValue* v = f.FindValue(pattern_key); v != nullptr && v->is_array()) {
    if (v->array_size() != static_cast<uint64_t>(c->num_layers)) {
      return r.Error(absl::StrCat("key '", pattern_key, "' has ", v->array_size(),
                                  " entries for ", c->num_layers, " layers"));
    }
    // gguf-py writes the flags as bools; integers are taken too (nonzero: local).
    const bool bools = v->array_type() == GgufType::kBool;
    for (int32_t l = 0; l < c->num_layers; ++l) {
      const uint64_t i = static_cast<uint64_t>(l);
      absl::StatusOr<int64_t> flag =
          bools ? absl::StatusOr<int64_t>(*v->ArrayBool(i) ? 1 : 0) : v->ArrayInt64(i);
      if (!flag.ok()) return r.KeyError(pattern_key, flag.status());
      c->local_layers[l] = *flag != 0;
    }
    return absl::OkStatus();
  } else if (v != nullptr) {
    absl::StatusOr<int64_t> n = v->AsInt64();
    if (!n.ok()) return r.KeyError(pattern_key, n.status());
    if (*n < 0 || *n > 1 << 20) return r.Error(absl::StrCat("key '", pattern_key, "' is ", *n));
    period = static_cast<int32_t>(*n);
  }
  for (int32_t l = 0; l < c->num_layers; ++l) {
    c->local_layers[l] = period == 0 || l % period < period - 1;
  }
  return absl::OkStatus();
}

// Phi-3's LongRoPE (llama.cpp's src/models/phi3.cpp and get_rope_factors): with
// rope_factors_long / rope_factors_short in the file, a context longer than
// rope.scaling.original_context_length takes the long factors, else the short. llama.cpp
// decides by the context it was started with; Folio by the context length the model
// serves (the file's), the long factors for a 128k model. rope.scaling.attn_factor
// multiplies RoPE's cos and sin (so every score by its square), whichever factors apply.
absl::Status ReadPhi3(const GgufFile& f, const Reader& r, ModelConfig* c, ModelWeights* w) {
  const std::string k = "phi3.";
  const bool has_long = f.FindTensor("rope_factors_long.weight") != nullptr;
  const bool has_short = f.FindTensor("rope_factors_short.weight") != nullptr;
  if (has_long != has_short) {
    return r.Error("has one of rope_factors_long.weight and rope_factors_short.weight "
                   "without the other");
  }
  if (has_long) {
    ASSIGN_OR_RETURN(int32_t original,
                     r.PositiveInt(k + "rope.scaling.original_context_length", &c->max_seq_len));
    const char* name =
        c->max_seq_len > original ? "rope_factors_long.weight" : "rope_factors_short.weight";
    ASSIGN_OR_RETURN(w->rope_freqs, r.Tensor(name, {c->head_dim / 2}));
    c->rope_freq_factors = true;
  }
  const float one = 1.0f;
  ASSIGN_OR_RETURN(const float attn_factor, r.Float(k + "rope.scaling.attn_factor", &one));
  if (attn_factor > 100.0f) {
    return r.Error(absl::StrCat("key '", k, "rope.scaling.attn_factor' is ", attn_factor,
                                ", above 100"));
  }
  if (attn_factor != 1.0f) {
    c->attention_scale = attn_factor * attn_factor / std::sqrt(static_cast<float>(c->head_dim));
  }
  return absl::OkStatus();
}

// Layer `p`'s router and experts: the 3-D ffn_{gate,up,down}_exps tensors cut into one
// 2-D view per expert (expert e's matrix is the e-th slab of the tensor).
absl::Status ReadExpertTensors(const GgufFile& f, const Reader& r, const ModelConfig& c,
                               const std::string& p, LayerWeights* lw) {
  const int64_t n = c.num_experts, eh = c.expert_hidden_dim, dim = c.dim;
  ASSIGN_OR_RETURN(lw->router, r.Tensor(p + "ffn_gate_inp.weight", {n, dim}));
  TensorView gate, up, down;
  ASSIGN_OR_RETURN(gate, r.Tensor(p + "ffn_gate_exps.weight", {n, eh, dim}));
  ASSIGN_OR_RETURN(up, r.Tensor(p + "ffn_up_exps.weight", {n, eh, dim}));
  ASSIGN_OR_RETURN(down, r.Tensor(p + "ffn_down_exps.weight", {n, dim, eh}));
  for (const char* dense : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
    if (f.FindTensor(p + dense) != nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          f.name(), ": tensor '", p, dense, "' beside experts (a dense MLP or shared expert "
          "in a mixture-of-experts layer) is not supported"));
    }
  }
  auto slab = [](const TensorView& t, int64_t e) {
    TensorView v;
    v.dtype = t.dtype;
    v.shape = {t.shape[1], t.shape[2]};
    const int64_t bytes = DTypeBytes(t.dtype, t.shape[1] * t.shape[2]);
    v.data = static_cast<const uint8_t*>(t.data) + e * bytes;
    return v;
  };
  lw->experts.resize(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    lw->experts[e] = {slab(gate, e), slab(up, e), slab(down, e)};
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildLlamaWeights(const GgufFile& f, ModelWeights* w) {
  const Reader r(f);
  ModelConfig& c = w->config;
  const Architecture* arch = nullptr;
  if (absl::Status s = ReadConfig(f, r, &c, &arch); !s.ok()) return s;
  // Bound the allocation below by the file's contents, not by an untrusted count.
  // phi3 fuses Q/K/V and gate/up: 6 a layer at the least.
  const int64_t kTensorsPerLayer = arch->phi3 ? 6 : 9;
  if (int64_t{c.num_layers} * kTensorsPerLayer > static_cast<int64_t>(f.tensors().size())) {
    return r.Error(absl::StrCat(arch->name, ".block_count is ", c.num_layers,
                                " but the file has only ", f.tensors().size(), " tensors (",
                                kTensorsPerLayer, " per block)"));
  }
  if (absl::Status s = ReadExperts(f, r, *arch, c.num_layers, &c); !s.ok()) return s;
  if (arch->gemma != 0) {
    if (absl::Status s = ReadGemma(f, r, *arch, &c); !s.ok()) return s;
  }
  ASSIGN_OR_RETURN(w->vocab, ReadGgufVocab(f));
  c.vocab_size = w->vocab.size();
  c.stored_type = GgufStoredType(f);
  const std::string vocab_key = absl::StrCat(arch->name, ".vocab_size");
  if (f.FindValue(vocab_key) != nullptr) {
    ASSIGN_OR_RETURN(int32_t declared, r.PositiveInt(vocab_key, nullptr));
    if (declared != c.vocab_size) {
      return r.Error(absl::StrCat(vocab_key, " ", declared, " differs from the ",
                                  c.vocab_size, " tokens in tokenizer.ggml.tokens"));
    }
  }

  const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  const int64_t q_dim = c.q_dim();
  const int64_t kv_dim = c.kv_dim();
  ASSIGN_OR_RETURN(w->tok_embeddings, r.Tensor("token_embd.weight", {vocab, dim}));
  // Optional tensors: present when the architecture requires them, or allows them and
  // the file has them; refused when the architecture has no use for them.
  auto has = [&](TensorPresence presence, const std::string& name,
                 const char* what) -> absl::StatusOr<bool> {
    const bool present = f.FindTensor(name) != nullptr;
    if (presence == TensorPresence::kRequired && !present) {
      return r.Error(absl::StrCat("missing tensor '", name, "' (", arch->name, " has ", what, ")"));
    }
    if (presence == TensorPresence::kNone && present) {
      return absl::UnimplementedError(absl::StrCat(f.name(), ": tensor '", name, "' (", what,
                                                   ") is not used by architecture '",
                                                   arch->name, "'"));
    }
    return present;
  };
  ASSIGN_OR_RETURN(c.rope_freq_factors, has(arch->rope_freqs, "rope_freqs.weight",
                                            "RoPE frequency factors"));
  if (c.rope_freq_factors) {
    ASSIGN_OR_RETURN(w->rope_freqs, r.Tensor("rope_freqs.weight", {c.head_dim / 2}));
  }
  if (arch->phi3) {
    if (absl::Status s = ReadPhi3(f, r, &c, w); !s.ok()) return s;
  }
  ASSIGN_OR_RETURN(c.qkv_bias, has(arch->qkv_bias, "blk.0.attn_q.bias", "Q/K/V biases"));
  ASSIGN_OR_RETURN(c.qk_norm, has(arch->qk_norm, "blk.0.attn_q_norm.weight", "Q/K norms"));
  ASSIGN_OR_RETURN(w->final_norm, r.Tensor("output_norm.weight", {dim}));
  if (f.FindTensor("output.weight") == nullptr) {
    c.tied_embeddings = true;
    w->lm_head = w->tok_embeddings;
  } else {
    ASSIGN_OR_RETURN(w->lm_head, r.Tensor("output.weight", {vocab, dim}));
    // Converters write a shared classifier out as a second copy (stories260K.gguf
    // does); recognise it so both formats of one model report the same config and the
    // forward pass reads one copy.
    const GgufTensorInfo& emb = *f.FindTensor("token_embd.weight");
    const GgufTensorInfo& out = *f.FindTensor("output.weight");
    if (emb.type == out.type && emb.size_bytes == out.size_bytes &&
        std::memcmp(emb.data, out.data, emb.size_bytes) == 0) {
      c.tied_embeddings = true;
      w->lm_head = w->tok_embeddings;
    }
  }
  w->layers.assign(static_cast<size_t>(c.num_layers), LayerWeights{});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w->layers[l];
    const std::string p = absl::StrCat("blk.", l, ".");
    ASSIGN_OR_RETURN(lw.attn_norm, r.Tensor(p + "attn_norm.weight", {dim}));
    if (arch->phi3 && f.FindTensor(p + "attn_qkv.weight") != nullptr) {
      TensorView qkv;
      ASSIGN_OR_RETURN(qkv, r.Tensor(p + "attn_qkv.weight", {q_dim + 2 * kv_dim, dim}));
      lw.wq = RowsOf(qkv, 0, q_dim);
      lw.wk = RowsOf(qkv, q_dim, kv_dim);
      lw.wv = RowsOf(qkv, q_dim + kv_dim, kv_dim);
    } else {
      ASSIGN_OR_RETURN(lw.wq, r.Tensor(p + "attn_q.weight", {q_dim, dim}));
      ASSIGN_OR_RETURN(lw.wk, r.Tensor(p + "attn_k.weight", {kv_dim, dim}));
      ASSIGN_OR_RETURN(lw.wv, r.Tensor(p + "attn_v.weight", {kv_dim, dim}));
    }
    ASSIGN_OR_RETURN(lw.wo, r.Tensor(p + "attn_output.weight", {dim, q_dim}));
    ASSIGN_OR_RETURN(lw.ffn_norm, r.Tensor(p + "ffn_norm.weight", {dim}));
    if (c.moe()) {
      if (absl::Status s = ReadExpertTensors(f, r, c, p, &lw); !s.ok()) return s;
    } else if (arch->phi3) {
      // Gate and up fused in ffn_up: gate rows first (ggml_swiglu's halves).
      if (f.FindTensor(p + "ffn_gate.weight") != nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            f.name(), ": tensor '", p, "ffn_gate.weight': phi3 keeps its gate in ffn_up"));
      }
      TensorView up;
      ASSIGN_OR_RETURN(up, r.Tensor(p + "ffn_up.weight", {2 * hidden, dim}));
      lw.w_gate = RowsOf(up, 0, hidden);
      lw.w_up = RowsOf(up, hidden, hidden);
      ASSIGN_OR_RETURN(lw.w_down, r.Tensor(p + "ffn_down.weight", {dim, hidden}));
    } else {
      ASSIGN_OR_RETURN(lw.w_gate, r.Tensor(p + "ffn_gate.weight", {hidden, dim}));
      ASSIGN_OR_RETURN(lw.w_down, r.Tensor(p + "ffn_down.weight", {dim, hidden}));
      ASSIGN_OR_RETURN(lw.w_up, r.Tensor(p + "ffn_up.weight", {hidden, dim}));
    }
    if (c.qkv_bias) {
      ASSIGN_OR_RETURN(lw.bq, r.Tensor(p + "attn_q.bias", {q_dim}));
      ASSIGN_OR_RETURN(lw.bk, r.Tensor(p + "attn_k.bias", {kv_dim}));
      ASSIGN_OR_RETURN(lw.bv, r.Tensor(p + "attn_v.bias", {kv_dim}));
    }
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(lw.q_norm, r.Tensor(p + "attn_q_norm.weight", {c.head_dim}));
      ASSIGN_OR_RETURN(lw.k_norm, r.Tensor(p + "attn_k_norm.weight", {c.head_dim}));
    }
    if (c.post_norms) {
      ASSIGN_OR_RETURN(lw.post_attn_norm, r.Tensor(p + "post_attention_norm.weight", {dim}));
      ASSIGN_OR_RETURN(lw.post_ffn_norm, r.Tensor(p + "post_ffw_norm.weight", {dim}));
    }
    if (f.FindTensor(p + "attn_output.bias") != nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          f.name(), ": tensor '", p, "attn_output.bias' is not supported (no output bias)"));
    }
  }
  return absl::OkStatus();
}

std::string GgufStoredType(const GgufFile& gguf) {
  // llama.cpp's llama_ftype numbers (include/llama.h), those whose types Folio reads.
  static constexpr std::pair<int64_t, const char*> kFileTypes[] = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},   {21, "Q2_K_S"}, {32, "BF16"},
  };
  if (const GgufValue* v = gguf.FindValue("general.file_type"); v != nullptr) {
    if (absl::StatusOr<int64_t> ft = v->AsInt64(); ft.ok()) {
      for (const auto& [n, name] : kFileTypes) {
        if (n == *ft) return name;
      }
    }
  }
  std::map<std::string, uint64_t> bytes;
  for (const GgufTensorInfo& t : gguf.tensors()) {
    bytes[DTypeName(GgmlTypeToDType(t.type))] += t.size_bytes;
  }
  std::string best;
  uint64_t most = 0;
  for (const auto& [name, n] : bytes) {
    if (n > most) most = n, best = name;
  }
  return absl::AsciiStrToUpper(best);
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufModel(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const absl::Span<const uint8_t> bytes = file->bytes();
  auto weights = std::make_unique<MappedModelWeights>(std::move(file));
  ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Parse(bytes, path));
  if (absl::Status s = LoadGgufShards(path, &gguf, weights.get()); !s.ok()) return s;
  if (absl::Status s = BuildLlamaWeights(gguf, weights.get()); !s.ok()) return s;
  // What was mapped, by stored type: "q4_K 193, q6_K 33, f32 65".
  std::map<std::string, int> types;
  for (const GgufTensorInfo& t : gguf.tensors()) ++types[DTypeName(GgmlTypeToDType(t.type))];
  std::string by_type;
  for (const auto& [name, n] : types) absl::StrAppend(&by_type, by_type.empty() ? "" : ", ", name, " ", n);
  const ModelConfig& c = weights->config;
  LOG(INFO) << path << ": " << c.architecture << ", " << c.num_layers << " layers, dim " << c.dim
            << ", " << gguf.tensors().size() << " tensors (" << by_type << "), "
            << (weights->file_bytes() >> 20) << " MiB mapped, weights kept as stored";
  return std::unique_ptr<ModelWeights>(std::move(weights));
}

}  // namespace folio::worker

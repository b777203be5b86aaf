#include "services/worker/model/hf_config.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace folio::worker {
namespace {

using nlohmann::json;

#define HF_ASSIGN_OR_RETURN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  var = *std::move(tmp)
#define HF_CONCAT_INNER(a, b) a##b
#define HF_CONCAT(a, b) HF_CONCAT_INNER(a, b)
#define HF_ASSIGN_OR_RETURN(var, expr) \
  HF_ASSIGN_OR_RETURN_IMPL(var, HF_CONCAT(hf_status_or_, __LINE__), expr)

std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Typed access to one JSON object's keys; errors name the file and the key (with
// `prefix`, e.g. "rope_scaling.").
class Keys {
 public:
  Keys(const json& obj, absl::string_view file, std::string prefix = "")
      : obj_(obj), file_(file), prefix_(std::move(prefix)) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": key '", prefix_, key, "': ", what));
  }
  absl::Status Unsupported(absl::string_view key, absl::string_view what) const {
    return absl::UnimplementedError(absl::StrCat(file_, ": key '", prefix_, key, "': ", what));
  }

  // The value, or nullptr when absent or null.
  const json* Find(absl::string_view key) const {
    const auto it = obj_.find(std::string(key));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // A positive int32; `fallback` when absent (nullptr: required).
  absl::StatusOr<int32_t> PositiveInt(absl::string_view key, const int32_t* fallback) const {
    const json* v = Find(key);
    if (v == nullptr) {
      if (fallback != nullptr) return *fallback;
      return Error(key, "missing");
    }
    if (!v->is_number_integer()) return Error(key, absl::StrCat(Brief(*v), " is not an integer"));
    const int64_t n = v->get<int64_t>();
    if (n <= 0 || n > std::numeric_limits<int32_t>::max()) {
      return Error(key, absl::StrCat(n, " is not a positive int32"));
    }
    return static_cast<int32_t>(n);
  }

  // A positive finite float; `fallback` when absent (nullptr: required).
  absl::StatusOr<float> PositiveFloat(absl::string_view key, const float* fallback) const {
    const json* v = Find(key);
    if (v == nullptr) {
      if (fallback != nullptr) return *fallback;
      return Error(key, "missing");
    }
    if (!v->is_number()) return Error(key, absl::StrCat(Brief(*v), " is not a number"));
    const double d = v->get<double>();
    if (!(d > 0) || d > std::numeric_limits<float>::max()) {
      return Error(key, absl::StrCat(d, " is not a positive float"));
    }
    return static_cast<float>(d);
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, absl::StrCat(Brief(*v), " is not true or false"));
    return v->get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key, absl::string_view fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return std::string(fallback);
    if (!v->is_string()) return Error(key, absl::StrCat(Brief(*v), " is not a string"));
    return v->get<std::string>();
  }

 private:
  const json& obj_;
  const absl::string_view file_;
  const std::string prefix_;
};

// rope_scaling, or rope_parameters (transformers >= 4.56's name, which also holds
// rope_theta): the RoPE type and its factors. When both are given, rope_parameters is
// read and rope_scaling must name the same type.
absl::Status ReadRopeScaling(const Keys& top, absl::string_view file, HfConfig* out) {
  const json* params = top.Find("rope_parameters");
  const json* scaling = top.Find("rope_scaling");
  const char* key = params != nullptr ? "rope_parameters" : "rope_scaling";
  if (params != nullptr) scaling = params;
  if (scaling == nullptr) return absl::OkStatus();
  // transformers >= 4.57 gives Gemma 3 one set per layer kind: {"full_attention": {...},
  // "sliding_attention": {...}}. The full layers' set is the model's RoPE; the sliding
  // layers' theta their local base (ReadHfGemma), any scaling of theirs refused.
  if (scaling->is_object() && (scaling->contains("full_attention") ||
                               scaling->contains("sliding_attention"))) {
    const Keys kinds(*scaling, file, absl::StrCat(key, "."));
    if (const json* local = kinds.Find("sliding_attention"); local != nullptr) {
      if (!local->is_object()) {
        return kinds.Error("sliding_attention", absl::StrCat(Brief(*local), " is not an object"));
      }
      const Keys lk(*local, file, absl::StrCat(key, ".sliding_attention."));
      HF_ASSIGN_OR_RETURN(std::string type, lk.String("rope_type", "default"));
      if (type != "default") {
        return lk.Unsupported("rope_type", absl::StrCat("'", type, "': the sliding layers' RoPE "
                                                              "is not scaled in Folio"));
      }
      const float none = 0.0f;
      HF_ASSIGN_OR_RETURN(out->rope_theta_local, lk.PositiveFloat("rope_theta", &none));
    }
    const json* full = kinds.Find("full_attention");
    if (full == nullptr) return kinds.Error("full_attention", "missing beside sliding_attention");
    if (!full->is_object()) {
      return kinds.Error("full_attention", absl::StrCat(Brief(*full), " is not an object"));
    }
    json top_copy = json::object();  // the full layers' set read as a plain rope_parameters
    top_copy["rope_parameters"] = *full;
    if (const json* theta = top.Find("rope_theta"); theta != nullptr) {
      top_copy["rope_theta"] = *theta;
    }
    if (const auto p = full->find("partial_rotary_factor");
        p != full->end() && !p->is_null() && (!p->is_number() || p->get<double>() != 1.0)) {
      return kinds.Unsupported("full_attention.partial_rotary_factor",
                               absl::StrCat(Brief(*p), " is not supported (only 1)"));
    }
    return ReadRopeScaling(Keys(top_copy, file), file, out);
  }
  if (!scaling->is_object()) {
    return top.Error(key, absl::StrCat(Brief(*scaling), " is not an object"));
  }
  ModelConfig& c = out->config;
  const Keys k(*scaling, file, absl::StrCat(key, "."));
  auto type_of = [](const Keys& keys) -> absl::StatusOr<std::string> {
    // rope_type, or its older name type.
    return keys.String(keys.Find("rope_type") != nullptr ? "rope_type" : "type", "default");
  };
  const char* type_key = k.Find("rope_type") != nullptr ? "rope_type" : "type";
  HF_ASSIGN_OR_RETURN(std::string type, type_of(k));
  if (params != nullptr) {
    if (const json* theta = k.Find("rope_theta"); theta != nullptr) {
      HF_ASSIGN_OR_RETURN(float t, k.PositiveFloat("rope_theta", nullptr));
      if (top.Find("rope_theta") != nullptr && t != c.rope_theta) {
        return k.Error("rope_theta", absl::StrCat(t, " differs from the top-level rope_theta ",
                                                  c.rope_theta));
      }
      c.rope_theta = t;
    }
    if (const json* old = top.Find("rope_scaling"); old != nullptr && old->is_object()) {
      HF_ASSIGN_OR_RETURN(std::string old_type, type_of(Keys(*old, file, "rope_scaling.")));
      if (old_type != type) {
        return k.Error(type_key, absl::StrCat("'", type, "' differs from rope_scaling's '",
                                              old_type, "'"));
      }
    }
  }
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    const float none = 0.0f;
    HF_ASSIGN_OR_RETURN(float factor, k.PositiveFloat("factor", &none));
    if (factor == 0.0f) return k.Error("factor", "missing (linear scaling needs it)");
    c.rope_freq_scale = 1.0f / factor;
    return absl::OkStatus();
  }
  if (type == "llama3") {
    // The converter's defaults.
    const float d_factor = 8.0f, d_low = 1.0f, d_high = 4.0f, d_original = 8192.0f;
    HF_ASSIGN_OR_RETURN(float factor, k.PositiveFloat("factor", &d_factor));
    HF_ASSIGN_OR_RETURN(float low, k.PositiveFloat("low_freq_factor", &d_low));
    HF_ASSIGN_OR_RETURN(float high, k.PositiveFloat("high_freq_factor", &d_high));
    HF_ASSIGN_OR_RETURN(float original,
                        k.PositiveFloat("original_max_position_embeddings", &d_original));
    if (!(high > low)) {
      return k.Error("high_freq_factor", absl::StrCat(high, " is not above low_freq_factor ", low));
    }
    if (original != std::floor(original) || original > 1e9f) {
      return k.Error("original_max_position_embeddings",
                     absl::StrCat(original, " is not a positive integer"));
    }
    out->rope_freqs = Llama3RopeFreqFactors(c.head_dim, c.rope_theta, factor, low, high,
                                            static_cast<int32_t>(original));
    c.rope_freq_factors = true;
    return absl::OkStatus();
  }
  if (type == "longrope" || type == "su") {
    // Phi-3.5 / Phi-4-mini: per-pair divisors, long_factor past the original context,
    // short_factor within it (transformers picks per sequence length; Folio, as the GGUF
    // path does, by the context it serves: max_position_embeddings), and cos/sin times
    // attention_factor (default sqrt(1 + ln(s) / ln(original)), s = max / original).
    const int32_t* top_original = nullptr;
    int32_t top_value = 0;
    if (top.Find("original_max_position_embeddings") != nullptr) {
      HF_ASSIGN_OR_RETURN(top_value, top.PositiveInt("original_max_position_embeddings", nullptr));
      top_original = &top_value;
    }
    HF_ASSIGN_OR_RETURN(int32_t original,
                        k.PositiveInt("original_max_position_embeddings", top_original));
    const bool long_context = c.max_seq_len > original;
    const char* which = long_context ? "long_factor" : "short_factor";
    const json* factors = k.Find(which);
    if (factors == nullptr || !factors->is_array() ||
        factors->size() != static_cast<size_t>(c.head_dim / 2)) {
      return k.Error(which, absl::StrCat("must be a list of head_dim / 2 = ", c.head_dim / 2,
                                         " numbers"));
    }
    out->rope_freqs.clear();
    for (const json& f : *factors) {
      if (!f.is_number() || !(f.get<double>() > 0)) {
        return k.Error(which, absl::StrCat(Brief(f), " is not a positive number"));
      }
      out->rope_freqs.push_back(f.get<float>());
    }
    c.rope_freq_factors = true;
    HF_ASSIGN_OR_RETURN(int32_t trained, top.PositiveInt("max_position_embeddings", nullptr));
    const double scale = static_cast<double>(trained) / original;
    const float computed =
        scale > 1 ? static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(original))) : 1.0f;
    HF_ASSIGN_OR_RETURN(float attn_factor, k.PositiveFloat("attention_factor", &computed));
    if (attn_factor != 1.0f) {
      c.attention_scale = attn_factor * attn_factor / std::sqrt(static_cast<float>(c.head_dim));
    }
    return absl::OkStatus();
  }
  return k.Unsupported(type_key, absl::StrCat("'", type, "' is not supported (supported: "
                                              "'default', 'linear', 'llama3', 'longrope')"));
}

// The sliding window, honoured by capping the context (see the header).
absl::Status ReadSlidingWindow(const Keys& k, const json& root, absl::string_view file,
                               HfConfig* out) {
  ModelConfig& c = out->config;
  const json* window = k.Find("sliding_window");
  if (window == nullptr) return absl::OkStatus();
  if (!window->is_number_integer() || window->get<int64_t>() <= 0) {
    return k.Error("sliding_window", absl::StrCat(Brief(*window), " is not a positive integer"));
  }
  bool active = true;
  if (root.contains("use_sliding_window")) {  // Qwen2/Qwen3
    HF_ASSIGN_OR_RETURN(active, k.Bool("use_sliding_window", false));
    if (active) {
      const int32_t all = c.num_layers;
      HF_ASSIGN_OR_RETURN(int32_t first, k.PositiveInt("max_window_layers", &all));
      active = first < c.num_layers;
    }
  }
  const int64_t w = window->get<int64_t>();
  if (active && w < c.max_seq_len) {
    LOG(WARNING) << file << ": sliding_window " << w << " is narrower than "
                 << "max_position_embeddings " << c.max_seq_len
                 << "; Folio has no sliding-window attention, so the context is capped at "
                 << w << " tokens, within which it equals full attention";
    c.max_seq_len = static_cast<int32_t>(w);
  }
  return absl::OkStatus();
}

// Mixture of experts: Qwen3MoeForCausalLM (num_experts, num_experts_per_tok,
// moe_intermediate_size, norm_topk_prob: transformers' default false; every layer sparse:
// decoder_sparse_step 1 and no mlp_only_layers) and MixtralForCausalLM
// (num_local_experts, num_experts_per_tok; experts intermediate_size wide; the top-k
// weights always renormalised). Shared experts (shared_expert_intermediate_size, Qwen2-MoE)
// are refused by name.
absl::Status ReadHfExperts(const Keys& k, absl::string_view hf_class, HfConfig* out) {
  ModelConfig& c = out->config;
  if (hf_class == "Qwen3MoeForCausalLM") {
    HF_ASSIGN_OR_RETURN(c.num_experts, k.PositiveInt("num_experts", nullptr));
    HF_ASSIGN_OR_RETURN(c.expert_hidden_dim, k.PositiveInt("moe_intermediate_size", nullptr));
    HF_ASSIGN_OR_RETURN(c.expert_weights_norm, k.Bool("norm_topk_prob", false));
    const int32_t one = 1;
    HF_ASSIGN_OR_RETURN(int32_t step, k.PositiveInt("decoder_sparse_step", &one));
    if (step != 1) {
      return k.Unsupported("decoder_sparse_step",
                           absl::StrCat(step, ": dense layers between sparse ones are not "
                                              "supported (only 1)"));
    }
    if (const json* dense = k.Find("mlp_only_layers");
        dense != nullptr && !(dense->is_array() && dense->empty())) {
      return k.Unsupported("mlp_only_layers",
                           absl::StrCat(Brief(*dense), ": dense layers are not supported"));
    }
  } else if (hf_class == "MixtralForCausalLM") {
    HF_ASSIGN_OR_RETURN(c.num_experts, k.PositiveInt("num_local_experts", nullptr));
    c.expert_hidden_dim = c.hidden_dim;
    c.expert_weights_norm = true;
  } else {
    return absl::OkStatus();
  }
  if (k.Find("shared_expert_intermediate_size") != nullptr) {
    return k.Unsupported("shared_expert_intermediate_size", "shared experts are not supported");
  }
  HF_ASSIGN_OR_RETURN(c.num_experts_used, k.PositiveInt("num_experts_per_tok", nullptr));
  constexpr int32_t kMaxExperts = 1024;
  if (c.num_experts > kMaxExperts || int64_t{c.num_experts} * c.num_layers > 65536) {
    return k.Error("num_experts", absl::StrCat(c.num_experts, " over ", c.num_layers,
                                               " layers is above Folio's limits (1024 experts,"
                                               " 65536 in all layers)"));
  }
  if (c.num_experts_used > c.num_experts) {
    return k.Error("num_experts_per_tok", absl::StrCat(c.num_experts_used, " is more than the ",
                                                       c.num_experts, " experts"));
  }
  return absl::OkStatus();
}

// Gemma2ForCausalLM and Gemma3ForCausalLM (text): the features of gguf_model.cc's
// ReadGemma, from transformers' names. Norm weights are stored as w for (1 + w)
// (norm_offset 1); the embeddings are scaled by sqrt(hidden_size) in f32 (transformers
// rounds the factor to the model's dtype; llama.cpp, the reference, does not); the query
// scale is query_pre_attn_scalar^-1/2; local layers are those layer_types names
// "sliding_attention", else Gemma 2's even layers and Gemma 3's all but every
// sliding_window_pattern-th (6).
absl::Status ReadHfGemma(const Keys& k, absl::string_view hf_class, HfConfig* out) {
  ModelConfig& c = out->config;
  const bool gemma2 = hf_class == "Gemma2ForCausalLM";
  c.norm_offset = 1.0f;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.gelu_mlp = true;
  c.post_norms = true;
  HF_ASSIGN_OR_RETURN(int32_t query_dim, k.PositiveInt("query_pre_attn_scalar", &c.head_dim));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(query_dim));
  auto softcap = [&](const char* key, float fallback) -> absl::StatusOr<float> {
    const json* v = k.Find(key);
    if (v == nullptr) return fallback;  // absent or null: off (Gemma 3) or the default
    if (!v->is_number() || !(v->get<double>() >= 0)) {
      return k.Error(key, absl::StrCat(Brief(*v), " is not a non-negative number"));
    }
    return v->get<float>();
  };
  HF_ASSIGN_OR_RETURN(c.attn_softcap, softcap("attn_logit_softcapping", gemma2 ? 50.0f : 0.0f));
  HF_ASSIGN_OR_RETURN(c.final_softcap, softcap("final_logit_softcapping", gemma2 ? 30.0f : 0.0f));
  if (!gemma2 && c.attn_softcap > 0) {
    return k.Unsupported("attn_logit_softcapping", "Gemma 3 has no attention softcap");
  }
  const int32_t default_window = 4096;
  HF_ASSIGN_OR_RETURN(c.sliding_window, k.PositiveInt("sliding_window", &default_window));
  if (gemma2) {
    c.rope_theta_local = c.rope_theta;
    c.rope_freq_scale_local = c.rope_freq_scale;
  } else {
    const float d_local = out->rope_theta_local > 0 ? out->rope_theta_local : 10000.0f;
    HF_ASSIGN_OR_RETURN(c.rope_theta_local, k.PositiveFloat("rope_local_base_freq", &d_local));
    c.rope_freq_scale_local = 1.0f;
  }
  c.local_layers.assign(static_cast<size_t>(c.num_layers), false);
  if (const json* types = k.Find("layer_types"); types != nullptr) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_layers)) {
      return k.Error("layer_types", absl::StrCat("is not a list of ", c.num_layers, " entries"));
    }
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const json& t = (*types)[l];
      if (!t.is_string() || (t != "sliding_attention" && t != "full_attention")) {
        return k.Error("layer_types", absl::StrCat(Brief(t), " is not 'sliding_attention' or "
                                                             "'full_attention'"));
      }
      c.local_layers[l] = t == "sliding_attention";
    }
    return absl::OkStatus();
  }
  const int32_t six = 6;
  int32_t pattern = 2;
  if (!gemma2) {
    HF_ASSIGN_OR_RETURN(pattern, k.PositiveInt("sliding_window_pattern", &six));
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    c.local_layers[l] = gemma2 ? l % 2 == 0 : (l + 1) % pattern != 0;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<float> Llama3RopeFreqFactors(int32_t head_dim, float theta, float factor,
                                         float low_freq_factor, float high_freq_factor,
                                         int32_t original_context) {
  // In float, as the converter's torch.float32 tensors compute it.
  const float low_wavelen = static_cast<float>(original_context) / low_freq_factor;
  const float high_wavelen = static_cast<float>(original_context) / high_freq_factor;
  std::vector<float> out;
  for (int32_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / head_dim);
    const float wavelen = static_cast<float>(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (original_context / wavelen - low_freq_factor) /
                           (high_freq_factor - low_freq_factor);
      out.push_back(1.0f / ((1 - smooth) / factor + smooth));
    }
  }
  return out;
}

absl::StatusOr<HfConfig> ParseHfConfig(absl::string_view json_text, absl::string_view name) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", Brief(root), " is not a JSON object"));
  }
  const Keys k(root, name);
  HfConfig out;
  ModelConfig& c = out.config;

  const json* archs = k.Find("architectures");
  if (archs == nullptr) return k.Error("architectures", "missing");
  if (!archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string()) {
    return k.Error("architectures", absl::StrCat(Brief(*archs), " is not a list of one class name"));
  }
  const std::string hf_class = (*archs)[0].get<std::string>();
  out.arch = FindHfArchitecture(hf_class);
  if (out.arch == nullptr) {
    return k.Unsupported("architectures", absl::StrCat("'", hf_class, "' is not supported (supported: ",
                                                       SupportedHfArchitectures(), ")"));
  }
  c.architecture = out.arch->name;
  c.rope_style = RopeStyleFor(*out.arch, QkLayout::kHuggingFace);
  HF_ASSIGN_OR_RETURN(c.name, k.String("_name_or_path", ""));
  if (c.name.empty()) c.name = hf_class;

  HF_ASSIGN_OR_RETURN(c.dim, k.PositiveInt("hidden_size", nullptr));
  HF_ASSIGN_OR_RETURN(c.hidden_dim, k.PositiveInt("intermediate_size", nullptr));
  HF_ASSIGN_OR_RETURN(c.num_layers, k.PositiveInt("num_hidden_layers", nullptr));
  constexpr int32_t kMaxLayers = 4096;  // far above any released model; bounds per-layer state
  if (c.num_layers > kMaxLayers) {
    return k.Error("num_hidden_layers", absl::StrCat(c.num_layers, " is above ", kMaxLayers));
  }
  HF_ASSIGN_OR_RETURN(c.num_heads, k.PositiveInt("num_attention_heads", nullptr));
  HF_ASSIGN_OR_RETURN(c.num_kv_heads, k.PositiveInt("num_key_value_heads", &c.num_heads));
  HF_ASSIGN_OR_RETURN(c.vocab_size, k.PositiveInt("vocab_size", nullptr));
  HF_ASSIGN_OR_RETURN(c.max_seq_len, k.PositiveInt("max_position_embeddings", nullptr));
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return k.Error("num_key_value_heads",
                   absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads ",
                                c.num_heads));
  }
  if (k.Find("head_dim") == nullptr && c.dim % c.num_heads != 0) {
    return k.Error("head_dim", absl::StrCat("absent, and hidden_size ", c.dim,
                                            " is not a multiple of num_attention_heads ",
                                            c.num_heads));
  }
  const int32_t default_head_dim = c.dim / c.num_heads;
  HF_ASSIGN_OR_RETURN(c.head_dim, k.PositiveInt("head_dim", &default_head_dim));
  if (c.head_dim % 2 != 0) {
    return k.Error("head_dim", absl::StrCat(c.head_dim, " is odd (RoPE turns pairs)"));
  }
  const float default_eps = 1e-6f;  // transformers' LlamaConfig/Qwen2Config default
  HF_ASSIGN_OR_RETURN(c.rms_norm_eps, k.PositiveFloat("rms_norm_eps", &default_eps));
  const float default_theta = 10000.0f;
  HF_ASSIGN_OR_RETURN(c.rope_theta, k.PositiveFloat("rope_theta", &default_theta));
  const bool gemma = out.arch->gemma != 0;
  HF_ASSIGN_OR_RETURN(c.tied_embeddings, k.Bool("tie_word_embeddings", gemma));

  // Gemma names its activation hidden_activation (and sometimes hidden_act as well).
  const char* act_key = gemma && k.Find("hidden_activation") != nullptr ? "hidden_activation"
                                                                       : "hidden_act";
  HF_ASSIGN_OR_RETURN(std::string act, k.String(act_key, gemma ? "gelu_pytorch_tanh" : "silu"));
  if (act != (gemma ? "gelu_pytorch_tanh" : "silu")) {
    return k.Unsupported(act_key, absl::StrCat("'", act, "' is not supported (only '",
                                               gemma ? "gelu_pytorch_tanh" : "silu", "')"));
  }
  HF_ASSIGN_OR_RETURN(bool attention_bias, k.Bool("attention_bias", false));
  if (attention_bias) {
    // Llama's attention_bias adds biases to Q, K, V and O; Folio has no O bias.
    return k.Unsupported("attention_bias", "true is not supported (no output-projection bias)");
  }
  HF_ASSIGN_OR_RETURN(bool mlp_bias, k.Bool("mlp_bias", false));
  if (mlp_bias) return k.Unsupported("mlp_bias", "true is not supported (no MLP biases)");
  if (const json* p = k.Find("partial_rotary_factor"); p != nullptr) {
    if (!p->is_number() || p->get<double>() != 1.0) {
      return k.Unsupported("partial_rotary_factor",
                           absl::StrCat(Brief(*p), " is not supported (only 1)"));
    }
  }

  // torch_dtype, or dtype in newer transformers.
  const char* dtype_key = k.Find("torch_dtype") != nullptr ? "torch_dtype" : "dtype";
  HF_ASSIGN_OR_RETURN(std::string dtype, k.String(dtype_key, "bfloat16"));
  if (dtype == "bfloat16") {
    out.torch_dtype = DType::kBF16;
  } else if (dtype == "float16") {
    out.torch_dtype = DType::kF16;
  } else if (dtype == "float32") {
    out.torch_dtype = DType::kF32;
  } else {
    return k.Unsupported(dtype_key, absl::StrCat("'", dtype,
                                                 "' is not supported (bfloat16, float16, float32)"));
  }
  if (absl::Status s = ReadHfExperts(k, hf_class, &out); !s.ok()) return s;
  // The window first: LongRoPE picks its factors by the context served. Gemma's windows
  // are attention's own (per layer), not a cap on the context.
  if (!gemma) {
    if (absl::Status s = ReadSlidingWindow(k, root, name, &out); !s.ok()) return s;
  }
  if (absl::Status s = ReadRopeScaling(k, name, &out); !s.ok()) return s;
  if (gemma) {
    if (absl::Status s = ReadHfGemma(k, hf_class, &out); !s.ok()) return s;
  }
  return out;
}

}  // namespace folio::worker

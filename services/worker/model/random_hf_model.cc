#include "services/worker/model/random_hf_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer/byte_unicode.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/architecture.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/hf_checkpoint.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/safetensors.h"

namespace folio::worker {
namespace {

using nlohmann::ordered_json;

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

const char* TorchDtype(DType d) {
  switch (d) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

// Adds `word` (UTF-8) to a BPE vocabulary as its code points merged left to right: each
// longer prefix the vocabulary lacks becomes the next id, with the merge that makes it.
void AddMergedWord(const std::string& word, ordered_json* vocab, ordered_json* merges,
                   int32_t* next) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < word.size();) {
    const unsigned char lead = static_cast<unsigned char>(word[i]);
    const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    chars.push_back(word.substr(i, len));
    i += len;
  }
  std::string current = chars[0];
  for (size_t i = 1; i < chars.size(); ++i) {
    const std::string merged = current + chars[i];
    if (!vocab->contains(merged)) {
      (*vocab)[merged] = (*next)++;
      merges->push_back(absl::StrCat(current, " ", chars[i]));
    }
    current = merged;
  }
}

// An added_tokens entry for a special token, as transformers writes it.
ordered_json SpecialAddedToken(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false},
          {"lstrip", false}, {"rstrip", false},     {"normalized", false},
          {"special", true}};
}

// A post_processor that puts `bos` (id `bos_id`) before a single sequence.
ordered_json BosTemplateProcessing(const std::string& bos, int32_t bos_id) {
  return {{"type", "TemplateProcessing"},
          {"single",
           {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"pair", ordered_json::array()},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
}

// A BPE "model" object: byte-level (no unk_token, no byte fallback, ignore_merges) or
// SentencePiece-style (unk_token `unk`, fuse_unk and byte_fallback, no ignore_merges).
ordered_json BpeModel(ordered_json vocab, ordered_json merges, const std::string& unk) {
  const bool sentencepiece = !unk.empty();
  ordered_json model = {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", sentencepiece ? ordered_json(unk) : ordered_json(nullptr)},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", sentencepiece},
                        {"byte_fallback", sentencepiece}};
  if (!sentencepiece) model["ignore_merges"] = true;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return model;
}

}  // namespace

std::string MakeByteLevelTokenizerJson() {
  ordered_json vocab = ordered_json::object();
  ordered_json merges = ordered_json::array();
  int32_t next = 0;
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(byte_unicode::ByteToUtf8(static_cast<uint8_t>(b)))] = next++;
  }
  const char* kWords[] = {"the", "and", "ing", "ion", "tion", "er", "in", "on", "at", "en",
                          "es", "or", "an", "re", "ed", "is", "it", "to", "of", "he", "th",
                          "that", "with", "for", "was", "as", "hello", "world", "cat", "dog",
                          "Once", "upon", "time", "there", "little", "girl", "named", "Lily"};
  for (const char* word : kWords) {
    for (const std::string& w : {std::string(word), absl::StrCat(" ", word)}) {
      std::string mapped;
      byte_unicode::Encode(w, &mapped);
      AddMergedWord(mapped, &vocab, &merges, &next);
    }
  }
  ordered_json added = ordered_json::array();
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}) {
    added.push_back(SpecialAddedToken(next++, special));
  }
  const int32_t bos = added[0]["id"].get<int32_t>();
  ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor", BosTemplateProcessing("<|begin_of_text|>", bos)},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"model", BpeModel(std::move(vocab), std::move(merges), /*unk=*/"")},
  };
  return tok.dump(2);
}

std::string MakeSentencePieceTokenizerJson() {
  constexpr char kSpace[] = "\xE2\x96\x81";  // "▁"
  ordered_json vocab = ordered_json::object();
  ordered_json merges = ordered_json::array();
  int32_t next = 0;
  for (const char* special : {"<unk>", "<s>", "</s>"}) vocab[special] = next++;
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = next++;
  vocab[kSpace] = next++;
  for (char c = ' ' + 1; c <= '~'; ++c) vocab[std::string(1, c)] = next++;
  const char* kWords[] = {"the", "and", "ing", "ion", "er", "in", "on", "at", "en", "is",
                          "it", "to", "of", "he", "th", "that", "with", "was", "hello",
                          "world", "cat", "dog", "Once", "upon", "time", "there", "Lily"};
  for (const char* word : kWords) {
    for (const std::string& w : {std::string(word), absl::StrCat(kSpace, word)}) {
      AddMergedWord(w, &vocab, &merges, &next);
    }
  }
  ordered_json added = ordered_json::array();
  for (int32_t id = 0; id < 3; ++id) {
    added.push_back(SpecialAddedToken(id, id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"));
  }
  auto replace = [](const char* from, const char* to) {
    return ordered_json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
  };
  ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace(" ", kSpace)}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", BosTemplateProcessing("<s>", 1)},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", BpeModel(std::move(vocab), std::move(merges), /*unk=*/"<unk>")},
  };
  return tok.dump(2);
}

absl::StatusOr<std::string> MetaspaceTokenizerJson(const std::string& legacy_json,
                                                   const std::string& prepend_scheme, bool split) {
  constexpr char kSpace[] = "\xE2\x96\x81";  // "▁"
  ordered_json tok = ordered_json::parse(legacy_json, nullptr, /*allow_exceptions=*/false);
  if (tok.is_discarded() || !tok.is_object()) {
    return absl::InvalidArgumentError("MetaspaceTokenizerJson: not a JSON object");
  }
  const auto norm = tok.find("normalizer");
  if (norm == tok.end() || !norm->is_object() ||
      norm->dump().find(absl::StrCat("\"", kSpace, "\"")) == std::string::npos ||
      (tok.contains("pre_tokenizer") && !tok["pre_tokenizer"].is_null())) {
    return absl::InvalidArgumentError(
        "MetaspaceTokenizerJson: not a legacy SentencePiece-style tokenizer.json (a normalizer "
        "writing \"\xE2\x96\x81\" and no pre-tokenizer)");
  }
  if (prepend_scheme != "always" && prepend_scheme != "first" && prepend_scheme != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("MetaspaceTokenizerJson: prepend_scheme '", prepend_scheme, "'"));
  }
  *norm = nullptr;
  tok["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", kSpace},
                          {"prepend_scheme", prepend_scheme},
                          {"split", split}};
  return tok.dump(2);
}

absl::Status WriteRandomHfCheckpoint(const RandomHfOptions& o, const std::string& dir) {
  const Architecture* arch = FindHfArchitecture(o.hf_class);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("class '", o.hf_class, "' is not one of ",
                                                   SupportedHfArchitectures()));
  }
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16 && o.dtype != DType::kF32) {
    return absl::InvalidArgumentError("dtype must be bf16, f16 or f32");
  }
  if (o.dim <= 0 || o.hidden_dim <= 0 || o.num_layers <= 0 || o.num_heads <= 0 ||
      o.num_kv_heads <= 0 || o.num_heads % o.num_kv_heads != 0 || o.num_shards <= 0 ||
      (o.head_dim == 0 && o.dim % o.num_heads != 0) || o.head_dim < 0) {
    return absl::InvalidArgumentError("impossible model shape");
  }
  const std::string tokenizer_json =
      o.tokenizer_json.empty() ? MakeByteLevelTokenizerJson() : o.tokenizer_json;
  absl::StatusOr<Vocab> tok = ParseHfTokenizerJson(tokenizer_json, "tokenizer.json");
  if (!tok.ok()) return tok.status();
  const int32_t vocab_size = o.vocab_size > 0 ? o.vocab_size : tok->size();
  if (vocab_size < tok->size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab_size, " < the tokenizer's ",
                                                   tok->size()));
  }
  const int64_t head_dim = o.head_dim > 0 ? o.head_dim : o.dim / o.num_heads;
  const int64_t q_dim = o.num_heads * head_dim, kv_dim = o.num_kv_heads * head_dim;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));

  // The tensors in transformers' order, values drawn in that order.
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Named> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape, float mean, float std) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = mean + std * normal(rng);
    Named t{std::move(name), std::move(shape), {}};
    AppendFromF32(o.dtype, values.data(), n, &t.bytes);
    tensors.push_back(std::move(t));
  };
  const float embedding_std = o.embedding_std > 0 ? o.embedding_std : o.weight_std;
  add("model.embed_tokens.weight", {vocab_size, o.dim}, 0.0f, embedding_std);
  for (int32_t l = 0; l < o.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const bool gemma = o.hf_class == "Gemma2ForCausalLM" || o.hf_class == "Gemma3ForCausalLM";
    const float norm_mean = gemma ? 0.0f : 1.0f;  // Gemma stores w for (1 + w)
    add(p + "input_layernorm.weight", {o.dim}, norm_mean, 0.1f);
    const bool phi3 = o.hf_class == "Phi3ForCausalLM";
    if (phi3) {
      add(p + "self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, o.dim}, 0.0f, o.weight_std);
    } else {
      add(p + "self_attn.q_proj.weight", {q_dim, o.dim}, 0.0f, o.weight_std);
      add(p + "self_attn.k_proj.weight", {kv_dim, o.dim}, 0.0f, o.weight_std);
      add(p + "self_attn.v_proj.weight", {kv_dim, o.dim}, 0.0f, o.weight_std);
    }
    if (arch->qkv_bias == TensorPresence::kRequired) {
      add(p + "self_attn.q_proj.bias", {q_dim}, 0.0f, o.weight_std);
      add(p + "self_attn.k_proj.bias", {kv_dim}, 0.0f, o.weight_std);
      add(p + "self_attn.v_proj.bias", {kv_dim}, 0.0f, o.weight_std);
    }
    if (arch->qk_norm == TensorPresence::kRequired) {
      add(p + "self_attn.q_norm.weight", {head_dim}, norm_mean, 0.1f);
      add(p + "self_attn.k_norm.weight", {head_dim}, norm_mean, 0.1f);
    }
    add(p + "self_attn.o_proj.weight", {o.dim, q_dim}, 0.0f, o.weight_std);
    add(p + "post_attention_layernorm.weight", {o.dim}, norm_mean, 0.1f);
    if (gemma) {
      add(p + "pre_feedforward_layernorm.weight", {o.dim}, norm_mean, 0.1f);
      add(p + "post_feedforward_layernorm.weight", {o.dim}, norm_mean, 0.1f);
    }
    if (arch->experts != TensorPresence::kNone && o.hf_class != "LlamaForCausalLM" &&
        o.hf_class != "MistralForCausalLM") {
      const bool mixtral = o.hf_class == "MixtralForCausalLM";
      const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
      const int64_t eh = mixtral ? o.hidden_dim : o.expert_hidden_dim;
      add(moe + "gate.weight", {o.num_experts, o.dim}, 0.0f, o.router_std);
      for (int32_t e = 0; e < o.num_experts; ++e) {
        const std::string x = absl::StrCat(moe, "experts.", e, ".");
        add(x + (mixtral ? "w1" : "gate_proj") + ".weight", {eh, o.dim}, 0.0f, o.weight_std);
        add(x + (mixtral ? "w3" : "up_proj") + ".weight", {eh, o.dim}, 0.0f, o.weight_std);
        add(x + (mixtral ? "w2" : "down_proj") + ".weight", {o.dim, eh}, 0.0f, o.weight_std);
      }
      continue;
    }
    if (phi3) {
      add(p + "mlp.gate_up_proj.weight", {2 * o.hidden_dim, o.dim}, 0.0f, o.weight_std);
      add(p + "mlp.down_proj.weight", {o.dim, o.hidden_dim}, 0.0f, o.weight_std);
      continue;
    }
    add(p + "mlp.gate_proj.weight", {o.hidden_dim, o.dim}, 0.0f, o.weight_std);
    add(p + "mlp.up_proj.weight", {o.hidden_dim, o.dim}, 0.0f, o.weight_std);
    add(p + "mlp.down_proj.weight", {o.dim, o.hidden_dim}, 0.0f, o.weight_std);
  }
  const bool gemma = o.hf_class == "Gemma2ForCausalLM" || o.hf_class == "Gemma3ForCausalLM";
  add("model.norm.weight", {o.dim}, gemma ? 0.0f : 1.0f, 0.1f);
  if (!o.tied_embeddings && !gemma) {
    add("lm_head.weight", {vocab_size, o.dim}, 0.0f, embedding_std);
  }

  // Shards: consecutive runs of tensors, about equal in count.
  const size_t shards = std::min<size_t>(o.num_shards, tensors.size());
  ordered_json weight_map = ordered_json::object();
  uint64_t total = 0;
  for (size_t s = 0; s < shards; ++s) {
    const size_t begin = tensors.size() * s / shards, end = tensors.size() * (s + 1) / shards;
    std::vector<SafetensorsEntry> entries;
    const std::string file =
        shards == 1 ? kHfSingleWeightsFile
                    : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    for (size_t i = begin; i < end; ++i) {
      entries.push_back({tensors[i].name, o.dtype, tensors[i].shape,
                         {tensors[i].bytes.data(), tensors[i].bytes.size()}});
      weight_map[tensors[i].name] = file;
      total += tensors[i].bytes.size();
    }
    absl::StatusOr<std::string> bytes = WriteSafetensors(entries, {{"format", "pt"}});
    if (!bytes.ok()) return bytes.status();
    if (absl::Status st = WriteFile(absl::StrCat(dir, "/", file), *bytes); !st.ok()) return st;
  }
  std::filesystem::remove(absl::StrCat(dir, "/", shards == 1 ? kHfWeightsIndexFile
                                                             : kHfSingleWeightsFile), ec);
  if (shards > 1) {
    const ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    if (absl::Status st = WriteFile(absl::StrCat(dir, "/", kHfWeightsIndexFile), index.dump(2));
        !st.ok()) {
      return st;
    }
  }

  ordered_json config = {
      {"architectures", {o.hf_class}},
      {"hidden_size", o.dim},
      {"intermediate_size", o.hidden_dim},
      {"num_hidden_layers", o.num_layers},
      {"num_attention_heads", o.num_heads},
      {"num_key_value_heads", o.num_kv_heads},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", o.context_length},
      // Floats as their shortest decimal ("1e-05", not 9.99999974e-06).
      {"rms_norm_eps", std::stod(absl::StrCat(o.rms_norm_eps))},
      {"rope_theta", std::stod(absl::StrCat(o.rope_theta))},
      {"tie_word_embeddings", o.tied_embeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", TorchDtype(o.dtype)},
  };
  if (o.head_dim > 0) config["head_dim"] = o.head_dim;
  if (!o.rope_scaling_json.empty()) {
    ordered_json scaling = ordered_json::parse(o.rope_scaling_json, nullptr, false);
    if (scaling.is_discarded() || !scaling.is_object()) {
      return absl::InvalidArgumentError("rope_scaling_json is not a JSON object");
    }
    if (o.rope_parameters) {  // transformers >= 4.56: rope_theta moves inside
      scaling["rope_theta"] = config["rope_theta"];
      config.erase("rope_theta");
      config["rope_parameters"] = scaling;
    } else {
      config["rope_scaling"] = scaling;
    }
  } else {
    config["rope_scaling"] = nullptr;
  }
  if (o.hf_class == "MistralForCausalLM") config["sliding_window"] = nullptr;
  if (o.hf_class == "Qwen3MoeForCausalLM") {
    config["num_experts"] = o.num_experts;
    config["num_experts_per_tok"] = o.num_experts_used;
    config["moe_intermediate_size"] = o.expert_hidden_dim;
    config["norm_topk_prob"] = o.norm_topk_prob;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = ordered_json::array();
  }
  if (gemma) {
    config["hidden_activation"] = "gelu_pytorch_tanh";
    config.erase("hidden_act");
    config["tie_word_embeddings"] = true;
    config["sliding_window"] = o.sliding_window;
    config["query_pre_attn_scalar"] = head_dim;
    if (o.hf_class == "Gemma2ForCausalLM") {
      config["attn_logit_softcapping"] = 50.0;
      config["final_logit_softcapping"] = 30.0;
    } else {
      config["sliding_window_pattern"] = o.sliding_window_pattern;
      config["rope_local_base_freq"] = 10000.0;
      config["final_logit_softcapping"] = nullptr;
      config["attn_logit_softcapping"] = nullptr;
    }
  }
  if (o.hf_class == "Phi3ForCausalLM") {
    config["sliding_window"] = nullptr;
    if (o.longrope_original_context > 0) {
      // Phi-3.5's shape: factors rising over the pairs, the long ones further.
      ordered_json long_factor = ordered_json::array(), short_factor = ordered_json::array();
      const int64_t pairs = head_dim / 2;
      for (int64_t i = 0; i < pairs; ++i) {
        const double t = pairs > 1 ? static_cast<double>(i) / (pairs - 1) : 0.0;
        long_factor.push_back(1.0 + 29.0 * t * t);
        short_factor.push_back(1.0 + 0.5 * t * t);
      }
      config["rope_scaling"] = {{"type", "longrope"}, {"long_factor", long_factor},
                                {"short_factor", short_factor}};
      config["original_max_position_embeddings"] = o.longrope_original_context;
    }
  }
  if (o.hf_class == "MixtralForCausalLM") {
    config["num_local_experts"] = o.num_experts;
    config["num_experts_per_tok"] = o.num_experts_used;
    config["sliding_window"] = nullptr;
  }
  if (o.hf_class == "Qwen2ForCausalLM" || o.hf_class == "Qwen3ForCausalLM" ||
      o.hf_class == "Qwen3MoeForCausalLM") {
    config["use_sliding_window"] = false;
    config["sliding_window"] = o.context_length;
    config["max_window_layers"] = o.num_layers;
  }
  if (absl::Status st = WriteFile(absl::StrCat(dir, "/config.json"), config.dump(2)); !st.ok()) {
    return st;
  }
  if (absl::Status st = WriteFile(absl::StrCat(dir, "/tokenizer.json"), tokenizer_json); !st.ok()) {
    return st;
  }
  ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  tc["bos_token"] = o.bos_token.empty() ? ordered_json(nullptr) : ordered_json(o.bos_token);
  tc["eos_token"] = o.eos_token.empty() ? ordered_json(nullptr) : ordered_json(o.eos_token);
  if (!o.chat_template.empty()) tc["chat_template"] = o.chat_template;
  if (absl::Status st = WriteFile(absl::StrCat(dir, "/tokenizer_config.json"), tc.dump(2));
      !st.ok()) {
    return st;
  }
  const std::string gen_path = absl::StrCat(dir, "/generation_config.json");
  if (o.eos_token_ids.empty()) {
    std::filesystem::remove(gen_path, ec);
    return absl::OkStatus();
  }
  ordered_json gen = {{"_from_model_config", true}};
  if (o.eos_token_ids.size() == 1) {
    gen["eos_token_id"] = o.eos_token_ids[0];
  } else {
    gen["eos_token_id"] = o.eos_token_ids;
  }
  return WriteFile(gen_path, gen.dump(2));
}

}  // namespace folio::worker

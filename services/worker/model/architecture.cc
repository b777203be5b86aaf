#include "services/worker/model/architecture.h"

#include "absl/strings/str_cat.h"

namespace folio::worker {
namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", RopeStyle::kInterleaved, TensorPresence::kOptional, TensorPresence::kNone,
     TensorPresence::kOptional, TensorPresence::kOptional},
    {"qwen2", RopeStyle::kNeox, TensorPresence::kRequired, TensorPresence::kNone,
     TensorPresence::kNone, TensorPresence::kNone},
    {"qwen3", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kRequired,
     TensorPresence::kNone, TensorPresence::kNone},
    {"qwen3moe", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kRequired,
     TensorPresence::kNone, TensorPresence::kRequired},
    {"gemma2", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kNone,
     TensorPresence::kNone, TensorPresence::kNone, 2},
    {"gemma3", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kRequired,
     TensorPresence::kNone, TensorPresence::kNone, 3},
    {"phi3", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kNone,
     TensorPresence::kNone, TensorPresence::kNone, 0, true},
};

struct HfClass {
  const char* hf_class;
  const char* unit;
};
constexpr HfClass kHfClasses[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "llama"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {"Qwen3MoeForCausalLM", "qwen3moe"},
    {"MixtralForCausalLM", "llama"},
    {"Phi3ForCausalLM", "phi3"},
    {"Gemma2ForCausalLM", "gemma2"},
    {"Gemma3ForCausalLM", "gemma3"},
};

}  // namespace

RopeStyle RopeStyleFor(const Architecture& arch, QkLayout layout) {
  return layout == QkLayout::kGguf ? arch.rope_style : RopeStyle::kNeox;
}

const Architecture* FindHfArchitecture(absl::string_view hf_class) {
  for (const HfClass& c : kHfClasses) {
    if (hf_class == c.hf_class) return FindArchitecture(c.unit);
  }
  return nullptr;
}

std::string SupportedHfArchitectures() {
  std::string out;
  for (const HfClass& c : kHfClasses) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "'", c.hf_class, "'");
  }
  return out;
}

const Architecture* FindArchitecture(absl::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const Architecture& a : kArchitectures) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "'", a.name, "'");
  }
  return out;
}

}  // namespace folio::worker

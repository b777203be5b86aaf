#include "services/worker/model/architecture.h"

#include "absl/strings/str_cat.h"

namespace folio::worker {
namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", RopeStyle::kInterleaved, TensorPresence::kOptional, TensorPresence::kNone,
     TensorPresence::kOptional},
    {"qwen2", RopeStyle::kNeox, TensorPresence::kRequired, TensorPresence::kNone,
     TensorPresence::kNone},
    {"qwen3", RopeStyle::kNeox, TensorPresence::kNone, TensorPresence::kRequired,
     TensorPresence::kNone},
};

}  // namespace

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

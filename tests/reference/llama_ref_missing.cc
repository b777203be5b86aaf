// Built when CMake found no reference: every entry point says how to install
// it, so tests skip with that reason (or fail under `./folio test`, which
// installs the reference first).
#include <cstdlib>

#include "tests/reference/llama_ref.h"

namespace folio::reference {
namespace {
absl::Status Missing() {
  return absl::FailedPreconditionError(
      "llama.cpp reference not installed when "
      "this build was configured: run ./folio "
      "reference, then re-run cmake");
}
}  // namespace

std::string ReferenceDir() {
  if (const char* d = std::getenv("FOLIO_REFERENCE_DIR"); d != nullptr && *d != '\0') return d;
  return FOLIO_REFERENCE_DEFAULT_DIR;
}
std::string LlamaCppSourceDir() { return ReferenceDir() + "/llama.cpp"; }
absl::Status ReferenceAvailable() { return Missing(); }
bool ReferenceRequired() {
  const char* r = std::getenv("FOLIO_REQUIRE_REFERENCE");
  return r != nullptr && std::string_view(r) == "1";
}
absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string&,
                                                             const LlamaModelOptions&) {
  return Missing();
}
LlamaModel::~LlamaModel() = default;
int32_t LlamaModel::n_vocab() const { return 0; }
int32_t LlamaModel::bos() const { return -1; }
int32_t LlamaModel::eos() const { return -1; }
bool LlamaModel::IsEndOfGeneration(int32_t) const { return false; }
absl::StatusOr<std::vector<int32_t>> LlamaModel::Tokenize(std::string_view,
                                                          const TokenizeOptions&) const {
  return Missing();
}
std::string LlamaModel::TokenToPiece(int32_t, const PieceOptions&) const { return ""; }
absl::StatusOr<std::vector<std::vector<float>>> LlamaModel::Logits(const std::vector<int32_t>&) {
  return Missing();
}
absl::StatusOr<std::vector<int32_t>> LlamaModel::Greedy(const std::vector<int32_t>&, int) {
  return Missing();
}
absl::StatusOr<std::vector<int32_t>> LlamaModel::GreedyIncremental(const std::vector<int32_t>&,
                                                                   int, double*, double*) {
  return Missing();
}
absl::Status Quantize(const std::string&, const std::string&, std::string_view, int) {
  return Missing();
}

}  // namespace folio::reference

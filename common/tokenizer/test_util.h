// Test-only helpers for the tokenizer tests: locating the shared models and a wrapper
// around libsentencepiece, the reference the tests compare against. Not part of
// folio_tokenizer.
//
// sentencepiece_processor.h (0.1.97) declares `namespace absl { using std::string_view; }`,
// which clashes with Abseil's own headers, so it is included only by test_util.cc
// and hidden behind SentencePieceReference.
#ifndef FOLIO_COMMON_TOKENIZER_TEST_UTIL_H_
#define FOLIO_COMMON_TOKENIZER_TEST_UTIL_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/vocab.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace folio::testing {

// TestModelsDir()/<relative>, or nullopt when there is no such folder or file.
std::optional<std::string> ModelPath(std::string_view relative);

// The message tests skip with when FOLIO_MODELS_DIR is unset.
inline constexpr char kSetModelsDir[] =
    "no llama2-tokenizer/tokenizer.model among the test models: set FOLIO_MODELS_DIR to a "
    "folder that has it (../shared/models does)";

// A loaded SentencePiece model. Thread-compatible.
class SentencePieceReference {
 public:
  // Loads FOLIO_MODELS_DIR/llama2-tokenizer/tokenizer.model; nullptr when the
  // variable is unset. Fails the test (ADD_FAILURE) and returns nullptr if loading
  // fails.
  static std::unique_ptr<SentencePieceReference> LoadLlama2();
  ~SentencePieceReference();

  // The Vocab of the model, taken piece by piece through libsentencepiece's API
  // (GetPieceSize, IdToPiece, GetScore, IsControl/IsUnknown/IsByte/IsUnused).
  Vocab ToVocab() const;

  // libsentencepiece's Encode (no BOS) and Decode; fail the test on error.
  std::vector<int32_t> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const;
  int32_t size() const;
  bool IsControl(int32_t id) const;
  int32_t PieceToId(const std::string& piece) const;

 private:
  explicit SentencePieceReference(
      std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Independent strict UTF-8 check (deliberately not common/tokenizer/utf8.h).
bool IsValidUtf8(std::string_view s);

}  // namespace folio::testing

#endif  // FOLIO_COMMON_TOKENIZER_TEST_UTIL_H_

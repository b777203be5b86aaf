// Test helpers for the structured-output tests: a byte vocabulary, a whole-text matcher
// and the brute-force mask.
#ifndef FOLIO_COMMON_STRUCTURED_TEST_UTIL_H_
#define FOLIO_COMMON_STRUCTURED_TEST_UTIL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "gtest/gtest.h"

namespace folio::structured {

// 256 one-byte tokens (id = byte) plus an end-of-generation token 256.
inline std::shared_ptr<const TokenVocabulary> ByteVocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back("");
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::vector<int32_t>{256});
}

// Whether `grammar_text` accepts exactly `text` (the whole text, ending complete). Fails
// the test (ADD_FAILURE) when the grammar does not compile.
inline bool GrammarMatches(std::string_view grammar_text, std::string_view text) {
  static const auto* vocab = new std::shared_ptr<const TokenVocabulary>(ByteVocabulary());
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      CompiledGrammar::Create(grammar_text, *vocab);
  if (!g.ok()) {
    ADD_FAILURE() << g.status() << "\n" << grammar_text;
    return false;
  }
  GrammarMatcher m(*g);
  return m.AcceptBytes(text) && m.IsComplete();
}

// The mask by brute force: every token tried on a copy of the matcher.
inline std::vector<uint32_t> BruteForceMask(const GrammarMatcher& m) {
  const TokenVocabulary& v = m.grammar().vocab();
  std::vector<uint32_t> mask(BitmaskWords(v.size()), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    GrammarMatcher copy = m;
    if (copy.AcceptToken(id)) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_TEST_UTIL_H_

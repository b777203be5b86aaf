// Test-only: a small hand-made SentencePiece-style vocabulary (unk, BOS, EOS, all 256
// byte tokens, a few dozen pieces), so the frontend's unit tests need no model files.
// Header-only; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_TEST_TOKENIZER_H_
#define FOLIO_SERVICES_FRONTEND_TEST_TOKENIZER_H_

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"
#include "glog/logging.h"

namespace folio::frontend::testing {

// Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then kTestPieces in order.
inline const std::vector<std::string>& TestPieces() {
  static const auto* pieces = new std::vector<std::string>{
      "\u2581", "a", "b", "c", "d", "e", "h", "i", "l", "n", "o", "r", "s", "t", "w", "\u2581the",
      "\u2581cat", "\u2581sat", "\u2581on", "\u2581mat", "\u2581hello", "\u2581world", "he", "th",
      "at", "\u2581w", "or", "ld", "\u65e5", "\u672c", "\u8a9e",
      // Intermediate pieces, so that BPE merges can reach the words above.
      "\u2581t", "\u2581th", "\u2581c", "\u2581ca", "\u2581s", "\u2581sa", "\u2581o", "\u2581m",
      "\u2581ma", "\u2581h", "\u2581he", "\u2581hel", "\u2581hell", "\u2581wo", "\u2581wor",
      "\u2581worl"};
  return *pieces;
}

inline Vocab TestVocab() {
  Vocab vocab;
  auto add = [&](std::string piece, float score, TokenType type) {
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), 0, TokenType::kByte);
  float score = -1;
  for (const std::string& piece : TestPieces()) {
    // Longer pieces merge first.
    add(piece, static_cast<float>(piece.size()) + (score -= 0.01f), TokenType::kNormal);
  }
  return vocab;
}

inline Tokenizer TestTokenizer(bool add_bos = true) {
  Vocab vocab = TestVocab();
  vocab.add_bos = add_bos;
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(std::move(vocab));
  CHECK(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

}  // namespace folio::frontend::testing

#endif  // FOLIO_SERVICES_FRONTEND_TEST_TOKENIZER_H_

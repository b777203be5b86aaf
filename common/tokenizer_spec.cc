#include "common/tokenizer_spec.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace folio {
namespace pb = folio::internal::v1;

absl::StatusOr<Vocab> VocabFromSpec(const pb::TokenizerSpec& spec) {
  const bool bpe = spec.kind() == pb::TOKENIZER_KIND_BYTE_LEVEL_BPE;
  if (!bpe && spec.kind() != pb::TOKENIZER_KIND_SENTENCEPIECE) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer spec has unknown kind ", static_cast<int>(spec.kind())));
  }
  // Byte-level BPE specs carry no scores (it merges by rank).
  const bool scores_ok = spec.scores_size() == spec.pieces_size() ||
                         (bpe && spec.scores_size() == 0);
  if (!scores_ok || spec.types_size() != spec.pieces_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer spec has ", spec.pieces_size(), " pieces, ", spec.scores_size(),
                     " scores and ", spec.types_size(), " types; they must be equal"));
  }
  if (spec.merges_size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer spec has ", spec.merges_size(), " merge ids; they come in pairs"));
  }
  Vocab vocab;
  vocab.kind = bpe ? TokenizerKind::kByteLevelBpe : TokenizerKind::kSentencePiece;
  vocab.pieces.assign(spec.pieces().begin(), spec.pieces().end());
  if (spec.scores_size() == 0) {
    vocab.scores.assign(vocab.pieces.size(), 0.0f);
  } else {
    vocab.scores.assign(spec.scores().begin(), spec.scores().end());
  }
  vocab.types.reserve(spec.types_size());
  for (int i = 0; i < spec.types_size(); ++i) {
    const int32_t type = spec.types(i);
    if (type < static_cast<int32_t>(TokenType::kNormal) ||
        type > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer spec: token ", i, " has type ", type, "; must be 1..6"));
    }
    vocab.types.push_back(static_cast<TokenType>(type));
  }
  vocab.bos_id = spec.bos_id();
  vocab.eos_id = spec.eos_id();
  vocab.unk_id = spec.unk_id();
  vocab.add_bos = spec.add_bos();
  vocab.add_dummy_prefix = spec.add_dummy_prefix();
  vocab.add_eos = spec.add_eos();
  vocab.eog_ids.assign(spec.eog_ids().begin(), spec.eog_ids().end());
  vocab.rstrip_ids.assign(spec.rstrip_ids().begin(), spec.rstrip_ids().end());
  vocab.lstrip_ids.assign(spec.lstrip_ids().begin(), spec.lstrip_ids().end());
  vocab.normalizer = spec.normalizer();
  vocab.merges.reserve(spec.merges_size() / 2);
  for (int i = 0; i + 1 < spec.merges_size(); i += 2) {
    vocab.merges.emplace_back(spec.merges(i), spec.merges(i + 1));
  }
  // SentencePiece: where the dummy prefix goes ("" from an older worker: "default").
  if (bpe || !spec.pre_tokenizer().empty()) vocab.pre_tokenizer = spec.pre_tokenizer();
  vocab.ignore_merges = spec.ignore_merges();
  vocab.chat_template = spec.chat_template();
  return vocab;
}

}  // namespace folio

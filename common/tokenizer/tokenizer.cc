#include "common/tokenizer/tokenizer.h"

#include "common/tokenizer/normalizer.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/byte_unicode.h"
#include "common/tokenizer/utf8.h"

namespace folio {
namespace {

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";  // U+2581 "▁"
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";  // " ⁇ "

// This Abseil build has its own absl::string_view, distinct from std::string_view.
absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Parses "<0xXX>" (upper- or lower-case hex) into its byte; -1 if not that form.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9') {
      value += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// One symbol of the text being merged, in a doubly linked list over a vector.
// A symbol merged into its left neighbour keeps an empty `text`.
struct Symbol {
  std::string_view text;
  int prev;  // -1 at the start
  int next;  // -1 at the end
};

// A candidate merge of symbols[left] and symbols[right] into a piece of `length`
// bytes. Candidates are never removed from the queue when a neighbour changes;
// a popped candidate is stale, and skipped, when the symbols no longer have the
// lengths it was made from.
struct Candidate {
  float score;
  int left;
  int right;
  size_t length;
};

// Orders the max-heap: highest score first, then leftmost, as SentencePiece does.
struct CandidateLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

absl::StatusOr<SentencePiecePrefix> SentencePiecePrefix::Parse(std::string_view name,
                                                              bool add_dummy_prefix) {
  SentencePiecePrefix out;
  if (name.empty() || name == "default") return out;
  constexpr std::string_view kSplit = "-split";
  std::string_view scheme = name;
  if (scheme.ends_with(kSplit)) {
    out.split = true;
    scheme.remove_suffix(kSplit.size());
  }
  if (scheme == "metaspace-always") {
    out.where = Where::kMetaspaceAlways;
  } else if (scheme == "metaspace-first") {
    out.where = Where::kMetaspaceFirst;
  } else if (scheme == "metaspace-never") {
    out.where = Where::kNever;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab SentencePiece pre-tokenizer \"", ToAbsl(name), "\" is unknown (default, "
        "metaspace-always, metaspace-first or metaspace-never, each optionally with -split)"));
  }
  if (add_dummy_prefix != (out.where != Where::kNever)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab SentencePiece pre-tokenizer \"", ToAbsl(name), "\" does not agree with add_dummy_prefix ",
        add_dummy_prefix ? "true" : "false"));
  }
  return out;
}

absl::StatusOr<Tokenizer> Tokenizer::Create(Vocab vocab) {
  Tokenizer tokenizer(std::move(vocab));
  absl::Status status = tokenizer.BuildTables();
  if (!status.ok()) return status;
  return tokenizer;
}

absl::Status Tokenizer::BuildTables() {
  const Vocab& v = vocab_;
  const size_t n = v.pieces.size();
  if (n == 0) return absl::InvalidArgumentError("vocab is empty");
  if (v.scores.size() != n || v.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab sizes disagree: ", n, " pieces, ", v.scores.size(),
                     " scores, ", v.types.size(), " types"));
  }
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos_id", v.bos_id},
                                 {"eos_id", v.eos_id}}) {
    if (id < 0 || id >= v.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab ", name, " ", id, " is outside [0, ", v.size(), ")"));
    }
  }
  for (int32_t id : v.eog_ids) {
    if (id < 0 || id >= v.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab end-of-generation id ", id, " is outside [0, ", v.size(), ")"));
    }
  }
  eog_ids_ = v.eog_ids;
  eog_ids_.push_back(v.eos_id);
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<int>(v.types[i]);
    if (t < static_cast<int>(TokenType::kNormal) || t > static_cast<int>(TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab token ", i, " has unknown type ", t));
    }
  }
  for (int32_t id : v.rstrip_ids) {
    if (id < 0 || id >= v.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab rstrip id ", id, " is outside [0, ", v.size(), ")"));
    }
  }
  if (!std::is_sorted(v.rstrip_ids.begin(), v.rstrip_ids.end())) {
    return absl::InvalidArgumentError("vocab rstrip ids are not sorted");
  }
  for (int32_t id : v.lstrip_ids) {
    if (id < 0 || id >= v.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab lstrip id ", id, " is outside [0, ", v.size(), ")"));
    }
  }
  if (!std::is_sorted(v.lstrip_ids.begin(), v.lstrip_ids.end())) {
    return absl::InvalidArgumentError("vocab lstrip ids are not sorted");
  }
  if (absl::Status s = CheckNormalizerName(v.normalizer); !s.ok()) return s;
  special_ = SpecialTokenSplitter(v);
  switch (v.kind) {
    case TokenizerKind::kSentencePiece:
      return BuildSentencePieceTables();
    case TokenizerKind::kByteLevelBpe:
      return BuildByteLevelTables();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("vocab kind ", static_cast<int>(v.kind), " is unknown"));
}

absl::Status Tokenizer::BuildByteLevelTables() {
  const Vocab& v = vocab_;
  const size_t n = v.pieces.size();
  if (v.unk_id < -1 || v.unk_id >= v.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab unk_id ", v.unk_id, " is neither -1 nor in [0, ", v.size(), ")"));
  }
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(v.pre_tokenizer);
  if (!pre.ok()) return pre.status();
  pre_tokenizer_ = *std::move(pre);
  absl::StatusOr<BpeModel> bpe = BpeModel::Create(
      v.pieces, v.merges, v.ignore_merges ? IgnoreMerges::kYes : IgnoreMerges::kNo);
  if (!bpe.ok()) return bpe.status();
  bpe_ = std::make_shared<const BpeModel>(*std::move(bpe));

  byte_to_id_.fill(-1);
  texts_.assign(n, "");
  surfaces_.assign(n, TokenSurface{});
  for (size_t i = 0; i < n; ++i) {
    const std::string& piece = v.pieces[i];
    TokenSurface& surface = surfaces_[i];
    switch (v.types[i]) {
      case TokenType::kControl:
        surface.kind = TokenSurface::Kind::kControl;
        break;
      case TokenType::kUserDefined:
        // Added tokens are stored as the literal text they stand for.
        surface.kind = TokenSurface::Kind::kText;
        texts_[i] = piece;
        break;
      default:
        // A piece outside the byte mapping (some converters store added tokens so)
        // decodes to its own text.
        surface.kind = TokenSurface::Kind::kBytes;
        if (!byte_unicode::Decode(piece, &texts_[i])) texts_[i] = piece;
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::BuildSentencePieceTables() {
  const Vocab& v = vocab_;
  const size_t n = v.pieces.size();
  if (v.unk_id < 0 || v.unk_id >= v.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab unk_id ", v.unk_id, " is outside [0, ", v.size(), ")"));
  }
  if (v.types[v.unk_id] != TokenType::kUnknown) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab unk_id ", v.unk_id, " has type ", static_cast<int>(v.types[v.unk_id]),
        ", want kUnknown"));
  }

  absl::StatusOr<SentencePiecePrefix> prefix =
      SentencePiecePrefix::Parse(v.pre_tokenizer, v.add_dummy_prefix);
  if (!prefix.ok()) return prefix.status();
  spm_prefix_ = *prefix;

  byte_to_id_.fill(-1);
  int num_byte_tokens = 0;
  texts_.assign(n, "");
  surfaces_.assign(n, TokenSurface{});
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& piece = v.pieces[i];
    TokenSurface& surface = surfaces_[i];
    switch (v.types[i]) {
      case TokenType::kNormal:
      case TokenType::kUserDefined: {
        if (piece.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("vocab piece ", id, " is empty"));
        }
        auto [it, inserted] = piece_to_id_.emplace(piece, id);
        if (!inserted) {
          return absl::InvalidArgumentError(absl::StrCat(
              "vocab piece \"", piece, "\" appears as both id ", it->second, " and ", id));
        }
        surface.kind = TokenSurface::Kind::kText;
        surface.leading_space_strippable = piece.starts_with(kSpaceSymbol);
        texts_[i] = absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}});
        break;
      }
      case TokenType::kByte: {
        const int byte = ParseBytePiece(piece);
        if (byte < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "vocab byte token ", id, " is \"", piece, "\", want the form <0xXX>"));
        }
        if (byte_to_id_[byte] >= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "vocab byte ", piece, " appears as both id ", byte_to_id_[byte], " and ", id));
        }
        byte_to_id_[byte] = id;
        ++num_byte_tokens;
        surface.kind = TokenSurface::Kind::kByte;
        surface.byte = static_cast<uint8_t>(byte);
        break;
      }
      case TokenType::kUnknown:
        surface.kind = TokenSurface::Kind::kText;
        texts_[i] = std::string(kUnknownSurface);
        break;
      case TokenType::kUnused:
        // Never produced by Encode, but decoded as text, as SentencePiece does.
        surface.kind = TokenSurface::Kind::kText;
        surface.leading_space_strippable = piece.starts_with(kSpaceSymbol);
        texts_[i] = absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}});
        break;
      case TokenType::kControl:
        surface.kind = TokenSurface::Kind::kControl;
        break;
    }
  }
  if (num_byte_tokens != 0 && num_byte_tokens != 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab has ", num_byte_tokens,
        " byte tokens; byte fallback needs all 256 (<0x00>..<0xFF>) or none"));
  }
  return absl::OkStatus();
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, AddBos add_bos,
                                                       ParseSpecial parse_special) const {
  if (const size_t bad = utf8::FindInvalid(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text is not valid UTF-8 at byte offset ", bad, " (byte 0x",
        absl::Hex(static_cast<uint8_t>(text[bad]), absl::kZeroPad2), ")"));
  }
  std::vector<int32_t> ids;
  const bool bos = add_bos == AddBos::kYes ||
                   (add_bos == AddBos::kVocabDefault && vocab_.add_bos);
  if (bos) ids.push_back(vocab_.bos_id);
  std::vector<TextFragment> fragments;
  if (!text.empty()) special_.Split(text, parse_special, &fragments);
  bool after_special = true;  // the start of the text counts as after a special token
  bool text_start = true;     // the fragment starts the text
  std::string normalized;     // a fragment's NFC form, when it differs
  for (const TextFragment& f : fragments) {
    if (f.id >= 0) {
      ids.push_back(f.id);
      after_special = true;
      text_start = false;
      continue;
    }
    if (vocab_.kind == TokenizerKind::kByteLevelBpe) {
      std::string_view text = f.text;
      if (vocab_.normalizer == kNfcNormalizer && NormalizeNfc(text, &normalized)) text = normalized;
      if (absl::Status s = EncodeByteLevel(text, &ids); !s.ok()) return s;
    } else {
      EncodeSentencePiece(f.text, SentencePieceDummyPrefix(f.text, text_start, after_special),
                          &ids);
    }
    after_special = false;
    text_start = false;
  }
  if (add_bos == AddBos::kVocabDefault && vocab_.add_eos) ids.push_back(vocab_.eos_id);
  return ids;
}

absl::Status Tokenizer::EncodeByteLevel(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<std::string_view> words;
  if (absl::Status s = pre_tokenizer_->Split(text, &words); !s.ok()) return s;
  std::string mapped;
  for (std::string_view word : words) {
    mapped.clear();
    byte_unicode::Encode(word, &mapped);
    bpe_->EncodeWord(mapped, ids);
  }
  return absl::OkStatus();
}

bool Tokenizer::SentencePieceDummyPrefix(std::string_view text, bool text_start,
                                         bool after_special) const {
  using Where = SentencePiecePrefix::Where;
  // Metaspace replaces spaces first, then prepends only where the text does not already
  // start with its replacement: a literal "▁" counts as well.
  const bool starts_with_space = text.starts_with(' ') || text.starts_with(kSpaceSymbol);
  switch (spm_prefix_.where) {
    case Where::kLlamaCpp:
      return vocab_.add_dummy_prefix && after_special;
    case Where::kMetaspaceAlways:
      return !starts_with_space;
    case Where::kMetaspaceFirst:
      return text_start && !starts_with_space;
    case Where::kNever:
      return false;
  }
  return false;
}

void Tokenizer::EncodeSentencePiece(std::string_view text, bool dummy_prefix,
                                    std::vector<int32_t>* ids_out) const {
  std::vector<int32_t>& ids = *ids_out;
  if (text.empty()) return;
  // Normalise: the dummy prefix, then every space to "▁".
  std::string normalized;
  normalized.reserve(3 * (text.size() + 1));  // worst case: all spaces
  if (dummy_prefix) normalized.append(kSpaceSymbol);
  for (char c : text) {
    if (c == ' ') {
      normalized.append(kSpaceSymbol);
    } else {
      normalized.push_back(c);
    }
  }

  // One symbol per character; the text is valid UTF-8, checked above.
  std::vector<Symbol> symbols;
  symbols.reserve(normalized.size());
  for (size_t pos = 0; pos < normalized.size();) {
    const size_t len = utf8::ClassifyPrefix(std::string_view(normalized).substr(pos)).length;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({std::string_view(normalized).substr(pos, len), index - 1, index + 1});
    pos += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateLess> queue;
  auto maybe_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view l = symbols[left].text;
    // Metaspace split: every "▁" starts a word, and words are merged on their own.
    if (spm_prefix_.split && symbols[right].text.starts_with(kSpaceSymbol)) return;
    // Neighbouring symbols are adjacent in `normalized`, so the merge is a view.
    const std::string_view merged(l.data(), l.size() + symbols[right].text.size());
    const auto it = piece_to_id_.find(ToAbsl(merged));
    if (it == piece_to_id_.end()) return;
    queue.push({vocab_.scores[it->second], left, right, merged.size()});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) maybe_add(i, i + 1);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.text.empty() || right.text.empty() || left.next != top.right ||
        left.text.size() + right.text.size() != top.length) {
      continue;  // stale: one side has merged with something else since
    }
    left.text = std::string_view(left.text.data(), top.length);
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.text = {};
    maybe_add(left.prev, top.left);
    maybe_add(top.left, left.next);
  }

  ids.reserve(ids.size() + symbols.size());
  for (int i = 0; i >= 0; i = symbols[i].next) AppendSymbolIds(symbols[i].text, &ids);
}

void Tokenizer::AppendSymbolIds(std::string_view symbol, std::vector<int32_t>* ids) const {
  if (const auto it = piece_to_id_.find(ToAbsl(symbol)); it != piece_to_id_.end()) {
    ids->push_back(it->second);
    return;
  }
  // Only single characters can be missing: merges only ever form known pieces.
  if (!has_byte_fallback()) {
    ids->push_back(vocab_.unk_id);
    return;
  }
  for (char c : symbol) ids->push_back(byte_to_id_[static_cast<uint8_t>(c)]);
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  std::string byte_run;  // raw bytes of consecutive byte tokens, not yet decoded
  bool after_bos = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return absl::OutOfRangeError(absl::StrCat("token id ", id, " at position ", i,
                                                " is outside the vocabulary [0, ",
                                                vocab_size(), ")"));
    }
    const TokenSurface& surface = surfaces_[id];
    if (surface.kind == TokenSurface::Kind::kByte) {
      byte_run.push_back(static_cast<char>(surface.byte));
      after_bos = false;
      continue;
    }
    if (surface.kind == TokenSurface::Kind::kBytes) {
      byte_run.append(texts_[id]);
      after_bos = false;
      continue;
    }
    utf8::AppendWithReplacement(byte_run, &out);
    byte_run.clear();
    if (surface.kind == TokenSurface::Kind::kControl) {
      if (id == vocab_.bos_id) after_bos = true;
      continue;
    }
    std::string_view text = texts_[id];
    if (after_bos && surface.leading_space_strippable) text.remove_prefix(1);
    after_bos = false;
    out.append(text);
  }
  utf8::AppendWithReplacement(byte_run, &out);
  return out;
}

absl::Status Tokenizer::CheckId(int32_t id) const {
  if (id >= 0 && id < vocab_size()) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("token id ", id,
                                            " is outside the vocabulary [0, ",
                                            vocab_size(), ")"));
}

absl::StatusOr<std::string_view> Tokenizer::TokenToPiece(int32_t id) const {
  if (absl::Status s = CheckId(id); !s.ok()) return s;
  return std::string_view(vocab_.pieces[id]);
}

absl::StatusOr<TokenSurface> Tokenizer::Surface(int32_t id) const {
  if (absl::Status s = CheckId(id); !s.ok()) return s;
  TokenSurface surface = surfaces_[id];
  surface.text = texts_[id];
  return surface;
}

}  // namespace folio

#include "services/worker/model/hf_tokenizer.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/hf_checkpoint.h"

namespace folio::worker {
namespace {

using nlohmann::json;

// The regex Split expressions of real tokenizer.json files, by the Folio pre-tokenizer
// (pre_tokenizer.h) that implements the same split. tokenizers spells the contractions
// case-insensitively with (?i:...); llama.cpp (and so Folio) spells each case out.
struct KnownSplit {
  const char* regex;
  const char* pre_tokenizer;
};
constexpr KnownSplit kKnownSplits[] = {
    // Llama 3, 3.1, 3.2, 3.3.
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama3"},
    // Qwen2, Qwen2.5, Qwen3.
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
};

std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 100) s = s.substr(0, 97) + "...";
  return s;
}

absl::StatusOr<json> ParseObject(absl::string_view text, absl::string_view name) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON"));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", Brief(root), " is not a JSON object"));
  }
  return root;
}

class Errors {
 public:
  explicit Errors(absl::string_view file) : file_(file) {}
  absl::Status Bad(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": key '", key, "': ", what));
  }
  absl::Status Unsupported(absl::string_view key, absl::string_view what) const {
    return absl::UnimplementedError(absl::StrCat(file_, ": key '", key, "': ", what));
  }

 private:
  absl::string_view file_;
};

// obj[key] when obj is an object and that is a string, else "" (never throws).
std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsNullOr(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}

// `obj[key]` when it is a boolean, else `fallback`; false when of another type.
bool BoolOr(const json& obj, const char* key, bool fallback, bool* ok) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    *ok = false;
    return fallback;
  }
  return it->get<bool>();
}

// The pre-tokenizer name for tokenizer.json's "pre_tokenizer".
absl::StatusOr<std::string> PreTokenizerName(const json& pre, const Errors& e) {
  constexpr char kKey[] = "pre_tokenizer";
  if (!pre.is_object()) return e.Unsupported(kKey, absl::StrCat(Brief(pre), " (Folio needs ByteLevel)"));
  const std::string type = Str(pre, "type");
  auto byte_level_ok = [&](const json& b, bool want_regex) -> absl::Status {
    bool ok = true;
    const bool prefix = BoolOr(b, "add_prefix_space", false, &ok);
    const bool regex = BoolOr(b, "use_regex", true, &ok);
    if (!ok) return e.Bad(kKey, absl::StrCat(Brief(b), ": options are not true or false"));
    if (prefix) return e.Unsupported(kKey, "ByteLevel add_prefix_space true is not supported");
    if (regex != want_regex) {
      return e.Unsupported(kKey, absl::StrCat("ByteLevel use_regex ", regex ? "true" : "false",
                                              want_regex ? " without a Split before it"
                                                         : " after a Split",
                                              " is not supported"));
    }
    return absl::OkStatus();
  };
  if (type == "ByteLevel") {
    if (absl::Status s = byte_level_ok(pre, true); !s.ok()) return s;
    return std::string("gpt-2");
  }
  if (type != "Sequence") {
    return e.Unsupported(kKey, absl::StrCat("type '", type,
                                            "' is not supported (ByteLevel, or a Sequence of "
                                            "Split and ByteLevel)"));
  }
  const auto list = pre.find("pretokenizers");
  if (list == pre.end() || !list->is_array() || list->size() != 2 || !(*list)[0].is_object() ||
      !(*list)[1].is_object()) {
    return e.Unsupported(kKey, absl::StrCat(Brief(pre),
                                            ": Folio reads a Sequence of one Split and ByteLevel"));
  }
  const json& split = (*list)[0];
  if (Str(split, "type") != "Split" || Str((*list)[1], "type") != "ByteLevel") {
    return e.Unsupported(kKey, absl::StrCat(Brief(pre),
                                            ": Folio reads a Sequence of one Split and ByteLevel"));
  }
  if (absl::Status s = byte_level_ok((*list)[1], false); !s.ok()) return s;
  bool invert_ok = true;
  const bool invert = BoolOr(split, "invert", false, &invert_ok);
  if (Str(split, "behavior") != "Isolated" || invert || !invert_ok) {
    return e.Unsupported(kKey, "a Split needs behavior 'Isolated' and invert false");
  }
  const auto pattern = split.find("pattern");
  if (pattern == split.end() || !pattern->is_object() || !pattern->contains("Regex") ||
      !(*pattern)["Regex"].is_string()) {
    return e.Unsupported(kKey, "a Split needs a {\"Regex\": ...} pattern");
  }
  const std::string regex = (*pattern)["Regex"].get<std::string>();
  for (const KnownSplit& k : kKnownSplits) {
    if (regex == k.regex) return std::string(k.pre_tokenizer);
  }
  return e.Unsupported(kKey, absl::StrCat("the Split expression ", Brief(regex),
                                          " is not one Folio knows (Llama 3's, Qwen2/3's)"));
}

// A token given as a string or as an AddedToken object {"content": ...}; "" for null.
absl::StatusOr<std::string> TokenText(const json& v, absl::string_view key, const Errors& e) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return e.Bad(key, absl::StrCat(Brief(v), " is not a token"));
}

absl::StatusOr<int32_t> IdOf(const Vocab& vocab, const std::string& text, absl::string_view key,
                             const Errors& e) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.pieces[id] == text && vocab.types[id] != TokenType::kNormal) return id;
  }
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.pieces[id] == text) return id;
  }
  return e.Bad(key, absl::StrCat("'", text, "' is not a token of the vocabulary"));
}


constexpr char kSpace[] = "\xE2\x96\x81";  // "▁" (U+2581), SentencePiece's space

// Whether tokenizer.json is SentencePiece-style (Llama 2, Mistral, TinyLlama): BPE over
// "▁"-for-space text, with byte fallback. The sign is the normalizer writing spaces as
// "▁", or a Metaspace pre-tokenizer or decoder.
bool IsSentencePieceStyle(const json& root) {
  const std::string dump = root.contains("normalizer") ? root["normalizer"].dump() : "";
  if (dump.find("\"Prepend\"") != std::string::npos || dump.find(kSpace) != std::string::npos) {
    return true;
  }
  for (const char* key : {"pre_tokenizer", "decoder"}) {
    if (root.contains(key) && root[key].dump().find("\"Metaspace\"") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// obj[key] when it is an integer, else -1.
int64_t IntOr(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// A Replace step {"pattern": {"String": from}, "content": to}.
bool IsReplace(const json& step, absl::string_view from, absl::string_view to) {
  return step.is_object() && Str(step, "type") == "Replace" && step.contains("pattern") &&
         Str(step["pattern"], "String") == from && Str(step, "content") == to;
}

// A Metaspace object (the pre-tokenizer under `key`, or the decoder), as tokenizers (>= 0.19)
// reads one: replacement "▁"; prepend_scheme "always" (the default), "first" or "never";
// the older add_prefix_space (false means "never", and then prepend_scheme must be "never"
// too); split (default true); str_rep (older files; ignored by tokenizers too).
absl::Status ReadMetaspace(const json& m, const char* key, const Errors& e, std::string* scheme,
                           bool* split) {
  for (const auto& [k, value] : m.items()) {
    if (k != "type" && k != "replacement" && k != "prepend_scheme" && k != "add_prefix_space" &&
        k != "split" && k != "str_rep") {
      return e.Unsupported(key, absl::StrCat("Metaspace key '", k, "' is not supported"));
    }
  }
  if (Str(m, "replacement") != kSpace) {
    return e.Unsupported(key, absl::StrCat(Brief(m), ": a Metaspace replacement other than "
                                           "\"\xE2\x96\x81\" is not supported"));
  }
  *scheme = "always";
  if (m.contains("prepend_scheme")) {
    *scheme = Str(m, "prepend_scheme");
    if (*scheme != "always" && *scheme != "first" && *scheme != "never") {
      return e.Bad(key, absl::StrCat(Brief(m), ": prepend_scheme must be \"always\", \"first\" "
                                     "or \"never\""));
    }
  }
  bool ok = true;
  const bool add_prefix_space = BoolOr(m, "add_prefix_space", true, &ok);
  *split = BoolOr(m, "split", true, &ok);
  if (!ok) return e.Bad(key, absl::StrCat(Brief(m), ": add_prefix_space or split is not true or false"));
  if (!add_prefix_space) {
    if (m.contains("prepend_scheme") && *scheme != "never") {
      return e.Bad(key, absl::StrCat(Brief(m), ": add_prefix_space false does not match "
                                     "prepend_scheme \"", *scheme, "\""));
    }
    *scheme = "never";
  }
  return absl::OkStatus();
}

// The SentencePiece-style normalizer, pre-tokenizer and decoder, as the SentencePiece
// engine implements them. Two forms:
//   - legacy (transformers' converter with legacy true: Llama 2, Mistral v0.1): the
//     normalizer a Sequence of Prepend("▁") (optional: it sets add_dummy_prefix) and
//     Replace(" " -> "▁"), no pre-tokenizer;
//   - Metaspace (legacy false: Mistral v0.3, newer conversions): no normalizer, a
//     Metaspace pre-tokenizer (ReadMetaspace).
// The decoder either way a Sequence of Replace("▁" -> " "), ByteFallback, Fuse and
// Strip(" ", 1, 0) (Strip may be absent). Other steps are refused by name.
absl::Status ReadSentencePieceSteps(const json& root, const Errors& e, Vocab* vocab) {
  const json none;
  const json& norm = root.contains("normalizer") ? root["normalizer"] : none;
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : none;
  if (pre.is_object() && Str(pre, "type") == "Metaspace") {
    if (!norm.is_null()) {
      return e.Unsupported("normalizer", absl::StrCat(Brief(norm), " is not supported with a "
                                                      "Metaspace pre-tokenizer (null only)"));
    }
    std::string scheme;
    bool split = true;
    if (absl::Status s = ReadMetaspace(pre, "pre_tokenizer", e, &scheme, &split); !s.ok()) return s;
    // The engine's name for the rule (tokenizer.h, SentencePiecePrefix).
    vocab->add_dummy_prefix = scheme != "never";
    vocab->pre_tokenizer = absl::StrCat("metaspace-", scheme, split ? "-split" : "");
  } else {
    std::vector<const json*> steps;
    if (norm.is_object() && Str(norm, "type") == "Sequence" && norm.contains("normalizers") &&
        norm["normalizers"].is_array()) {
      for (const json& n : norm["normalizers"]) steps.push_back(&n);
    } else if (!norm.is_null()) {
      steps.push_back(&norm);
    }
    bool prepend = false, replace = false;
    for (const json* n : steps) {
      if (n->is_object() && Str(*n, "type") == "Prepend" && Str(*n, "prepend") == kSpace &&
          !prepend) {
        prepend = true;
      } else if (IsReplace(*n, " ", kSpace) && !replace) {
        replace = true;
      } else {
        return e.Unsupported("normalizer", absl::StrCat(Brief(*n), " is not supported (a "
                                                        "SentencePiece-style tokenizer needs "
                                                        "Prepend \"\xE2\x96\x81\" and Replace "
                                                        "\" \" -> \"\xE2\x96\x81\", or a "
                                                        "Metaspace pre-tokenizer)"));
      }
    }
    if (!replace) {
      return e.Unsupported("normalizer", absl::StrCat(Brief(norm), ": a SentencePiece-style "
                                                     "tokenizer needs Replace \" \" -> "
                                                     "\"\xE2\x96\x81\" or a Metaspace "
                                                     "pre-tokenizer"));
    }
    vocab->add_dummy_prefix = prepend;
    vocab->pre_tokenizer = "default";
    if (!pre.is_null()) {
      return e.Unsupported("pre_tokenizer", absl::StrCat(Brief(pre),
                                                        " is not supported with a SentencePiece-"
                                                        "style normalizer (null only)"));
    }
  }
  if (!IsNullOr(root, "decoder")) {
    const json& d = root["decoder"];
    const bool seq = d.is_object() && Str(d, "type") == "Sequence" && d.contains("decoders") &&
                     d["decoders"].is_array();
    const json& list = seq ? d["decoders"] : none;
    bool good = seq && (list.size() == 3 || list.size() == 4) && IsReplace(list[0], kSpace, " ") &&
                Str(list[1], "type") == "ByteFallback" && Str(list[2], "type") == "Fuse";
    if (good && list.size() == 4) {
      const json& strip = list[3];
      good = Str(strip, "type") == "Strip" && Str(strip, "content") == " " &&
             IntOr(strip, "start") == 1 && IntOr(strip, "stop") == 0;
    }
    // A Metaspace decoder ("▁" -> " ", the first token's "▁" dropped): decoded as the
    // Sequence is, by SentencePiece's rules. tokenizers' Metaspace decoder has no byte
    // fallback (it prints a byte token as its "<0xXX>" text) and drops every "▁" of the
    // first token; Folio decodes the bytes and drops one leading space after BOS.
    if (!good && d.is_object() && Str(d, "type") == "Metaspace") {
      std::string scheme;
      bool split = true;
      if (absl::Status s = ReadMetaspace(d, "decoder", e, &scheme, &split); !s.ok()) return s;
      good = true;
    }
    if (!good) {
      return e.Unsupported("decoder", absl::StrCat(Brief(d), " is not supported (a Sequence of "
                                                   "Replace, ByteFallback, Fuse and Strip, or "
                                                   "Metaspace)"));
    }
  }
  return absl::OkStatus();
}

// "<0xXX>" (upper-case hex, as SentencePiece writes byte pieces) -> true.
bool IsBytePiece(const std::string& p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && hex(p[3]) && hex(p[4]) &&
         p[5] == '>';
}

void AddEog(Vocab* vocab, int32_t id) {
  auto& ids = vocab->eog_ids;
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
}

}  // namespace

absl::StatusOr<Vocab> ParseHfTokenizerJson(absl::string_view json_text, absl::string_view name) {
  absl::StatusOr<json> parsed = ParseObject(json_text, name);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  const Errors e(name);
  Vocab vocab;
  vocab.add_bos = false;
  vocab.add_dummy_prefix = false;
  vocab.unk_id = -1;

  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return e.Bad("model", "missing or not an object");
  const json& model = *model_it;
  const std::string type = model.contains("type") ? Str(model, "type") : "BPE";
  if (type != "BPE") {
    return e.Unsupported("model.type", absl::StrCat("'", type, "' is not supported (only BPE)"));
  }
  bool ok = true;
  // SentencePiece style (Llama 2, Mistral): the SentencePiece engine, merging by a score
  // made from the merge ranks; otherwise byte-level BPE.
  const bool spm = IsSentencePieceStyle(root);
  vocab.kind = spm ? TokenizerKind::kSentencePiece : TokenizerKind::kByteLevelBpe;
  const bool byte_fallback = BoolOr(model, "byte_fallback", false, &ok);
  const bool fuse_unk = BoolOr(model, "fuse_unk", false, &ok);
  vocab.ignore_merges = BoolOr(model, "ignore_merges", false, &ok);
  if (!ok) return e.Bad("model", "byte_fallback, fuse_unk or ignore_merges is not true or false");
  if (!spm && byte_fallback) {
    return e.Unsupported("model.byte_fallback", "true is not supported without a SentencePiece-"
                                                "style normalizer (Replace \" \" -> \"\xE2\x96\x81\")");
  }
  if (spm && vocab.ignore_merges) {
    return e.Unsupported("model.ignore_merges", "true is not supported with SentencePiece-style text");
  }
  if (spm && fuse_unk && !byte_fallback) {
    return e.Unsupported("model.fuse_unk", "true without byte_fallback is not supported");
  }
  if (!IsNullOr(model, "dropout") &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return e.Unsupported("model.dropout", absl::StrCat(Brief(model["dropout"]),
                                                      " is not supported (BPE dropout)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsNullOr(model, key) && !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return e.Unsupported(absl::StrCat("model.", key), absl::StrCat(Brief(model[key]),
                                                                     " is not supported"));
    }
  }

  // Pieces by id: the model's vocab, then added_tokens (which may reuse or extend ids).
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object() || vocab_it->empty()) {
    return e.Bad("model.vocab", "missing or not a non-empty object of piece: id");
  }
  const auto added_it = root.find("added_tokens");
  const json empty = json::array();
  const json& added = added_it == root.end() || added_it->is_null() ? empty : *added_it;
  if (!added.is_array()) return e.Bad("added_tokens", "not a list");
  const uint64_t max_tokens = vocab_it->size() + added.size();
  if (max_tokens > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return e.Bad("model.vocab", "too many tokens");
  }
  std::vector<bool> seen(max_tokens, false);
  vocab.pieces.resize(max_tokens);
  auto place = [&](const json& id_v, const std::string& piece, absl::string_view key) -> absl::StatusOr<int32_t> {
    if (!id_v.is_number_integer() || id_v.get<int64_t>() < 0 ||
        static_cast<uint64_t>(id_v.get<int64_t>()) >= max_tokens) {
      return e.Bad(key, absl::StrCat("id ", Brief(id_v), " of '", piece,
                                     "' is not in [0, ", max_tokens, ")"));
    }
    return static_cast<int32_t>(id_v.get<int64_t>());
  };
  absl::flat_hash_map<std::string, int32_t> ids;
  ids.reserve(vocab_it->size());
  for (const auto& [piece, id_v] : vocab_it->items()) {
    absl::StatusOr<int32_t> id = place(id_v, piece, "model.vocab");
    if (!id.ok()) return id.status();
    if (seen[*id]) return e.Bad("model.vocab", absl::StrCat("id ", *id, " is given twice"));
    seen[*id] = true;
    vocab.pieces[*id] = piece;
    ids.emplace(piece, *id);
  }
  std::vector<TokenType> types(max_tokens, TokenType::kNormal);
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id")) {
      return e.Bad(key, "needs an id and a string content");
    }
    const std::string content = t["content"].get<std::string>();
    if (content.empty()) return e.Bad(key, "content is empty");
    absl::StatusOr<int32_t> id = place(t["id"], content, key);
    if (!id.ok()) return id.status();
    bool flags_ok = true;
    const bool special = BoolOr(t, "special", false, &flags_ok);
    const bool lstrip = BoolOr(t, "lstrip", false, &flags_ok);
    const bool rstrip = BoolOr(t, "rstrip", false, &flags_ok);
    const bool single_word = BoolOr(t, "single_word", false, &flags_ok);
    (void)BoolOr(t, "normalized", false, &flags_ok);
    if (!flags_ok) return e.Bad(key, "special/lstrip/rstrip/single_word/normalized must be true or false");
    if (single_word) return e.Unsupported(key + ".single_word", "true is not supported");
    seen[*id] = true;
    vocab.pieces[*id] = content;
    types[*id] = special ? TokenType::kControl : TokenType::kUserDefined;
    if (lstrip) vocab.lstrip_ids.push_back(*id);
    if (rstrip) vocab.rstrip_ids.push_back(*id);
  }
  // The ids must be dense: [0, n) with n the highest id + 1.
  size_t n = max_tokens;
  while (n > 0 && !seen[n - 1]) --n;
  for (size_t id = 0; id < n; ++id) {
    if (!seen[id]) return e.Bad("model.vocab", absl::StrCat("no token has id ", id));
  }
  vocab.pieces.resize(n);
  types.resize(n);
  vocab.types = std::move(types);
  vocab.scores.assign(n, 0.0f);  // SentencePiece style: set from the merges below
  for (auto* list : {&vocab.lstrip_ids, &vocab.rstrip_ids}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }

  // Merges: "left right" strings or [left, right] pairs.
  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) return e.Bad("model.merges", "missing or not a list");
  // SentencePiece style: a piece's score is minus the rank of the first merge forming it,
  // so the engine's highest-score-first order is tokenizers' lowest-rank-first order.
  // Multi-character pieces no merge forms are never produced (kUnused, below).
  constexpr float kNoMerge = 1.0f;  // above every score: "not formed by a merge"
  if (spm) vocab.scores.assign(vocab.pieces.size(), kNoMerge);
  if (!spm) vocab.merges.reserve(merges_it->size());
  for (size_t i = 0; i < merges_it->size(); ++i) {
    const json& m = (*merges_it)[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) {
        return e.Bad("model.merges", absl::StrCat("merge ", i, " ", Brief(m),
                                                  " is not two pieces separated by a space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return e.Bad("model.merges", absl::StrCat("merge ", i, " ", Brief(m), " is not a pair"));
    }
    const auto l = ids.find(left), r = ids.find(right);
    if (l == ids.end() || r == ids.end()) {
      return e.Bad("model.merges", absl::StrCat("merge ", i, " ", Brief(m), " names '",
                                                l == ids.end() ? left : right,
                                                "', which is not in model.vocab"));
    }
    if (!ids.contains(left + right)) {
      return e.Bad("model.merges", absl::StrCat("merge ", i, " ", Brief(m), " forms '", left,
                                                right, "', which is not in model.vocab"));
    }
    if (!spm) {
      vocab.merges.emplace_back(l->second, r->second);
      continue;
    }
    float& score = vocab.scores[ids.find(left + right)->second];
    if (score == kNoMerge) score = -static_cast<float>(i);
  }
  if (spm && merges_it->size() > (size_t{1} << 24)) {
    return e.Bad("model.merges", "more than 2^24 merges (their ranks would not be exact)");
  }
  if (!IsNullOr(model, "unk_token")) {
    if (!model["unk_token"].is_string()) return e.Bad("model.unk_token", "not a string");
    const auto it = ids.find(model["unk_token"].get<std::string>());
    if (it == ids.end()) return e.Bad("model.unk_token", "not in model.vocab");
    vocab.unk_id = it->second;
    vocab.types[it->second] = TokenType::kUnknown;
  }
  if (spm) {
    if (vocab.unk_id < 0) return e.Bad("model.unk_token", "missing (SentencePiece style needs one)");
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (vocab.types[id] != TokenType::kNormal) continue;
      const std::string& p = vocab.pieces[id];
      const auto lead = static_cast<unsigned char>(p[0]);
      const size_t char_len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      if (byte_fallback && IsBytePiece(p)) {
        vocab.types[id] = TokenType::kByte;
      } else if (vocab.scores[id] == kNoMerge) {
        // One character: where merging starts (score 0). Longer: no merge forms it.
        vocab.scores[id] = 0.0f;
        if (p.size() > char_len) vocab.types[id] = TokenType::kUnused;
      }
    }
    int byte_pieces = 0;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (vocab.scores[id] == kNoMerge) vocab.scores[id] = 0.0f;
      byte_pieces += vocab.types[id] == TokenType::kByte;
    }
    if (byte_fallback && byte_pieces != 256) {
      return e.Bad("model.byte_fallback", absl::StrCat("true, but model.vocab has ", byte_pieces,
                                                       " of the 256 pieces <0x00>..<0xFF>"));
    }
  }

  if (spm) {
    if (absl::Status s = ReadSentencePieceSteps(root, e, &vocab); !s.ok()) return s;
  }
  // normalizer: null or NFC.
  if (!spm && !IsNullOr(root, "normalizer")) {
    const json& norm = root["normalizer"];
    const std::string t = norm.is_object() ? Str(norm, "type") : "";
    if (t != "NFC") {
      return e.Unsupported("normalizer", absl::StrCat(Brief(norm), " is not supported (null or NFC)"));
    }
    vocab.normalizer = "NFC";
  }
  if (!spm && IsNullOr(root, "pre_tokenizer")) {
    return e.Unsupported("pre_tokenizer", "null is not supported (Folio needs ByteLevel)");
  }
  if (!spm) {
    absl::StatusOr<std::string> pre = PreTokenizerName(root["pre_tokenizer"], e);
    if (!pre.ok()) return pre.status();
    vocab.pre_tokenizer = *pre;
  }
  if (!spm && !IsNullOr(root, "decoder")) {
    const json& d = root["decoder"];
    if (!d.is_object() || Str(d, "type") != "ByteLevel") {
      return e.Unsupported("decoder", absl::StrCat(Brief(d), " is not supported (ByteLevel)"));
    }
  }
  // post_processor: a TemplateProcessing (alone or in a Sequence) that opens the single
  // template with a special token adds it as BOS.
  vocab.bos_id = vocab.eos_id = -1;  // none named yet; LoadHfVocab settles them
  if (!IsNullOr(root, "post_processor")) {
    const json& pp = root["post_processor"];
    std::vector<const json*> steps;
    if (pp.is_object() && Str(pp, "type") == "Sequence" && pp.contains("processors") &&
        pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) steps.push_back(&p);
    } else {
      steps.push_back(&pp);
    }
    for (const json* p : steps) {
      if (!p->is_object()) return e.Bad("post_processor", absl::StrCat(Brief(*p), " is not an object"));
      const std::string t = Str(*p, "type");
      if (t == "ByteLevel") continue;  // offsets only
      if (t != "TemplateProcessing") {
        return e.Unsupported("post_processor", absl::StrCat("type '", t, "' is not supported"));
      }
      const auto single = p->find("single");
      if (single == p->end() || !single->is_array()) {
        return e.Bad("post_processor.single", "missing or not a list");
      }
      for (size_t i = 0; i < single->size(); ++i) {
        const json& piece = (*single)[i];
        const bool is_seq = piece.is_object() && piece.contains("Sequence");
        const bool is_special = piece.is_object() && piece.contains("SpecialToken") &&
                                piece["SpecialToken"].is_object() &&
                                piece["SpecialToken"].contains("id") &&
                                piece["SpecialToken"]["id"].is_string();
        if (is_special && i == 0) {
          absl::StatusOr<int32_t> id = IdOf(vocab, piece["SpecialToken"]["id"].get<std::string>(),
                                            "post_processor.single", e);
          if (!id.ok()) return id.status();
          vocab.bos_id = *id;
          vocab.add_bos = true;
        } else if (!is_seq) {
          return e.Unsupported("post_processor.single",
                               absl::StrCat(Brief(*single), ": only a leading special token "
                                                            "before the sequence is supported"));
        }
      }
    }
  }
  return vocab;
}

absl::Status ApplyHfTokenizerConfig(absl::string_view json_text, absl::string_view name,
                                    Vocab* vocab) {
  absl::StatusOr<json> parsed = ParseObject(json_text, name);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  const Errors e(name);
  bool ok = true;
  for (const auto& [key, id_out] :
       {std::pair<const char*, int32_t*>{"bos_token", &vocab->bos_id}, {"eos_token", &vocab->eos_id}}) {
    if (!root.contains(key)) continue;
    absl::StatusOr<std::string> text = TokenText(root[key], key, e);
    if (!text.ok()) return text.status();
    if (text->empty()) continue;
    absl::StatusOr<int32_t> id = IdOf(*vocab, *text, key, e);
    if (!id.ok()) return id.status();
    *id_out = *id;
  }
  vocab->add_bos = BoolOr(root, "add_bos_token", vocab->add_bos, &ok);
  vocab->add_eos = BoolOr(root, "add_eos_token", vocab->add_eos, &ok);
  if (!ok) return e.Bad("add_bos_token", "add_bos_token or add_eos_token is not true or false");
  if (root.contains("chat_template") && !root["chat_template"].is_null()) {
    const json& t = root["chat_template"];
    if (t.is_string()) {
      vocab->chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": ..., "template": ...}]
      for (const json& named : t) {
        if (!named.is_object() || !named.contains("name") || !named["name"].is_string() ||
            !named.contains("template") || !named["template"].is_string()) {
          return e.Bad("chat_template", absl::StrCat(Brief(named), " is not {name, template}"));
        }
        const std::string n = named["name"].get<std::string>();
        if (n == "default") {
          vocab->chat_template = named["template"].get<std::string>();
        } else {
          vocab->named_chat_templates.emplace_back(n, named["template"].get<std::string>());
        }
      }
    } else {
      return e.Bad("chat_template", "not a string or a list of named templates");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyHfGenerationConfig(absl::string_view json_text, absl::string_view name,
                                     Vocab* vocab) {
  absl::StatusOr<json> parsed = ParseObject(json_text, name);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  const Errors e(name);
  if (!root.contains("eos_token_id") || root["eos_token_id"].is_null()) return absl::OkStatus();
  const json& v = root["eos_token_id"];
  std::vector<const json*> ids;
  if (v.is_array()) {
    for (const json& x : v) ids.push_back(&x);
  } else {
    ids.push_back(&v);
  }
  for (const json* id : ids) {
    if (!id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= vocab->size()) {
      return e.Bad("eos_token_id", absl::StrCat(Brief(*id), " is not a token id in [0, ",
                                                vocab->size(), ")"));
    }
    AddEog(vocab, static_cast<int32_t>(id->get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status PadVocab(int32_t size, absl::string_view what, Vocab* vocab) {
  if (vocab->size() > size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the tokenizer has ", vocab->size(),
                                                   " tokens, more than the model's ", size));
  }
  for (int32_t id = vocab->size(); id < size; ++id) {
    vocab->pieces.push_back(absl::StrCat("[PAD", id, "]"));
    vocab->types.push_back(TokenType::kUnused);
    vocab->scores.push_back(0.0f);
  }
  return absl::OkStatus();
}

absl::StatusOr<Vocab> LoadHfVocab(const std::string& dir) {
  constexpr int64_t kMaxBytes = int64_t{256} << 20;
  const std::string tokenizer_path = absl::StrCat(dir, "/tokenizer.json");
  absl::StatusOr<std::string> text = ReadTextFile(tokenizer_path, kMaxBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<Vocab> vocab = ParseHfTokenizerJson(*text, tokenizer_path);
  if (!vocab.ok()) return vocab.status();
  for (const char* file : {"tokenizer_config.json", "generation_config.json"}) {
    const std::string path = absl::StrCat(dir, "/", file);
    absl::StatusOr<std::string> t = ReadTextFile(path, kMaxBytes);
    if (absl::IsNotFound(t.status())) continue;
    if (!t.ok()) return t.status();
    const absl::Status s = file[0] == 't' ? ApplyHfTokenizerConfig(*t, path, &*vocab)
                                          : ApplyHfGenerationConfig(*t, path, &*vocab);
    if (!s.ok()) return s;
  }
  // No eos_token: generation_config's first id (transformers' own fallback); no BOS: the
  // EOS id stands in (Vocab needs a valid id) and is never added.
  if (vocab->eos_id < 0 && !vocab->eog_ids.empty()) vocab->eos_id = vocab->eog_ids.front();
  if (vocab->eos_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": no end-of-sequence token: tokenizer_config.json has no eos_token and "
             "generation_config.json no eos_token_id"));
  }
  if (vocab->bos_id < 0) {
    vocab->bos_id = vocab->eos_id;
    vocab->add_bos = false;
  }
  AddEog(&*vocab, vocab->eos_id);
  // The validation the cluster will do, done here so the error names the folder.
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*vocab);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_path, ": ", tokenizer.status().message()));
  }
  return vocab;
}

}  // namespace folio::worker

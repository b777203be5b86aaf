#include "services/worker/model/gguf_vocab.h"

#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/special_tokens.h"
#include "glog/logging.h"
#include "services/worker/model/mapped_file.h"

namespace folio::worker {
namespace {

#define FOLIO_VOCAB_ASSIGN_OR_RETURN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                                      \
  if (!tmp.ok()) return tmp.status();                     \
  var = *std::move(tmp)
#define FOLIO_VOCAB_CONCAT_INNER(a, b) a##b
#define FOLIO_VOCAB_CONCAT(a, b) FOLIO_VOCAB_CONCAT_INNER(a, b)
#define VOCAB_ASSIGN_OR_RETURN(var, expr) \
  FOLIO_VOCAB_ASSIGN_OR_RETURN_IMPL(var, FOLIO_VOCAB_CONCAT(status_or_, __LINE__), expr)

// Typed access to the tokenizer keys, every error prefixed with the file and the key.
class KeyReader {
 public:
  explicit KeyReader(const GgufFile& f) : f_(f) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(f_.name(), ": key '", key, "': ", what));
  }

  absl::StatusOr<absl::string_view> String(absl::string_view key) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(f_.name(), ": missing metadata key '", key, "'"));
    }
    absl::StatusOr<absl::string_view> s = v->AsString();
    if (!s.ok()) return Error(key, s.status().message());
    return *s;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return fallback;
    absl::StatusOr<bool> b = v->AsBool();
    if (!b.ok()) return Error(key, b.status().message());
    return *b;
  }

  // A token id in [0, vocab_size); `fallback` when the key is absent.
  absl::StatusOr<int32_t> TokenId(absl::string_view key, int32_t fallback,
                                  int32_t vocab_size) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return fallback;
    absl::StatusOr<int64_t> n = v->AsInt64();
    if (!n.ok()) return Error(key, n.status().message());
    if (*n < 0 || *n >= vocab_size) {
      return Error(key, absl::StrCat(*n, " is not a token of the vocabulary [0, ", vocab_size,
                                     ")"));
    }
    return static_cast<int32_t>(*n);
  }

  // A parallel array (one number per token) or nullptr when absent.
  absl::StatusOr<const GgufValue*> Parallel(absl::string_view key, uint64_t n) const {
    const GgufValue* v = f_.FindValue(key);
    if (v == nullptr) return nullptr;
    if (!v->is_array() || v->array_size() != n) {
      return Error(key, absl::StrCat(v->DebugString(), ", expected ", n,
                                     " numbers (one per token)"));
    }
    return v;
  }

 private:
  const GgufFile& f_;
};

// tokenizer.ggml.merges ("left right" strings by rank) -> id pairs.
absl::Status ReadMerges(const GgufFile& f, const KeyReader& r, Vocab* vocab) {
  constexpr absl::string_view kKey = "tokenizer.ggml.merges";
  const GgufValue* merges = f.FindValue(kKey);
  if (merges == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.name(), ": missing metadata key '", kKey, "' (a gpt2 tokenizer needs its merges)"));
  }
  if (!merges->is_array() || merges->array_type() != GgufType::kString) {
    return r.Error(kKey, absl::StrCat(merges->DebugString(), ", expected an array of string"));
  }
  absl::flat_hash_map<absl::string_view, int32_t> ids;
  ids.reserve(vocab->pieces.size());
  for (size_t i = 0; i < vocab->pieces.size(); ++i) {
    ids.insert_or_assign(vocab->pieces[i], static_cast<int32_t>(i));
  }
  const uint64_t n = merges->array_size();
  vocab->merges.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    VOCAB_ASSIGN_OR_RETURN(absl::string_view merge, merges->ArrayString(i));
    // The separator is the first space after the first byte: a left piece may be " ".
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : absl::string_view::npos;
    if (space == absl::string_view::npos) {
      return r.Error(kKey, absl::StrCat("merge ", i, " '", merge,
                                        "' is not two pieces separated by a space"));
    }
    const absl::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
    int32_t pair[2];
    for (int side = 0; side < 2; ++side) {
      const absl::string_view piece = side == 0 ? left : right;
      const auto it = ids.find(piece);
      if (it == ids.end()) {
        return r.Error(kKey, absl::StrCat("merge ", i, " '", merge, "' names '", piece,
                                          "', which is not in tokenizer.ggml.tokens"));
      }
      pair[side] = it->second;
    }
    if (!ids.contains(absl::StrCat(left, right))) {
      return r.Error(kKey, absl::StrCat("merge ", i, " '", merge, "' forms '", left, right,
                                        "', which is not in tokenizer.ggml.tokens"));
    }
    vocab->merges.emplace_back(pair[0], pair[1]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Vocab> ReadGgufVocab(const GgufFile& f) {
  const KeyReader r(f);
  Vocab vocab;
  VOCAB_ASSIGN_OR_RETURN(absl::string_view model, r.String("tokenizer.ggml.model"));
  if (model == "llama") {
    vocab.kind = TokenizerKind::kSentencePiece;
  } else if (model == "gpt2") {
    vocab.kind = TokenizerKind::kByteLevelBpe;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        f.name(), ": tokenizer.ggml.model '", model,
        "' is not supported (supported: 'llama', SentencePiece BPE; 'gpt2', byte-level BPE)"));
  }
  const bool bpe = vocab.kind == TokenizerKind::kByteLevelBpe;

  const GgufValue* tokens = f.FindValue("tokenizer.ggml.tokens");
  if (tokens == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.name(), ": missing metadata key 'tokenizer.ggml.tokens'"));
  }
  if (!tokens->is_array() || tokens->array_type() != GgufType::kString ||
      tokens->array_size() == 0) {
    return r.Error("tokenizer.ggml.tokens", absl::StrCat(tokens->DebugString(),
                                                         ", expected a non-empty array of string"));
  }
  const uint64_t n = tokens->array_size();
  if (n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return r.Error("tokenizer.ggml.tokens", absl::StrCat("vocabulary of ", n,
                                                         " tokens is too large"));
  }
  vocab.pieces.resize(n);
  vocab.scores.assign(n, 0.0f);
  vocab.types.assign(n, TokenType::kNormal);
  for (uint64_t i = 0; i < n; ++i) vocab.pieces[i] = std::string(*tokens->ArrayString(i));

  VOCAB_ASSIGN_OR_RETURN(const GgufValue* scores, r.Parallel("tokenizer.ggml.scores", n));
  VOCAB_ASSIGN_OR_RETURN(const GgufValue* types, r.Parallel("tokenizer.ggml.token_type", n));
  for (uint64_t i = 0; scores != nullptr && i < n; ++i) {
    absl::StatusOr<double> s = scores->ArrayDouble(i);
    if (!s.ok()) return r.Error("tokenizer.ggml.scores", s.status().message());
    vocab.scores[i] = static_cast<float>(*s);
  }
  for (uint64_t i = 0; types != nullptr && i < n; ++i) {
    absl::StatusOr<int64_t> t = types->ArrayInt64(i);
    if (!t.ok()) return r.Error("tokenizer.ggml.token_type", t.status().message());
    if (*t < static_cast<int64_t>(TokenType::kNormal) ||
        *t > static_cast<int64_t>(TokenType::kByte)) {
      return r.Error("tokenizer.ggml.token_type",
                     absl::StrCat("entry ", i, " is ", *t, ", expected 1..6"));
    }
    vocab.types[i] = static_cast<TokenType>(*t);
  }

  const auto size = static_cast<int32_t>(n);
  PreTokenizerTraits traits;
  if (bpe) {
    if (f.FindValue("tokenizer.ggml.pre") == nullptr) {
      LOG(WARNING) << f.name() << ": no tokenizer.ggml.pre; using the '"
                   << PreTokenizer::kDefaultName
                   << "' pre-tokenizer, as llama.cpp does (tokenization may be degraded)";
      vocab.pre_tokenizer = std::string(PreTokenizer::kDefaultName);
    } else {
      VOCAB_ASSIGN_OR_RETURN(absl::string_view pre, r.String("tokenizer.ggml.pre"));
      vocab.pre_tokenizer = std::string(pre);
    }
    absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(vocab.pre_tokenizer);
    if (!pre.ok()) return r.Error("tokenizer.ggml.pre", pre.status().message());
    traits = pre->traits();
    vocab.ignore_merges = traits.ignore_merges;
    if (absl::Status s = ReadMerges(f, r, &vocab); !s.ok()) return s;
  }
  // llama.cpp's defaults: SentencePiece 1/2/0; gpt2 11/11 and no unknown token.
  const int32_t default_bos = bpe ? std::min(11, size - 1) : 1;
  const int32_t default_eos = bpe ? std::min(11, size - 1) : 2;
  VOCAB_ASSIGN_OR_RETURN(vocab.bos_id, r.TokenId("tokenizer.ggml.bos_token_id", default_bos, size));
  VOCAB_ASSIGN_OR_RETURN(vocab.eos_id, r.TokenId("tokenizer.ggml.eos_token_id", default_eos, size));
  VOCAB_ASSIGN_OR_RETURN(vocab.unk_id,
                         r.TokenId("tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, size));
  VOCAB_ASSIGN_OR_RETURN(vocab.add_bos,
                         r.Bool("tokenizer.ggml.add_bos_token", bpe ? traits.default_add_bos : true));
  VOCAB_ASSIGN_OR_RETURN(vocab.add_eos, r.Bool("tokenizer.ggml.add_eos_token", false));
  VOCAB_ASSIGN_OR_RETURN(vocab.add_dummy_prefix,
                         r.Bool("tokenizer.ggml.add_space_prefix", !bpe));
  // Some converters type SentencePiece's <unk> as a control token (Phi-3); it is the
  // unknown token whatever its type says, as llama.cpp reads it.
  if (!bpe && vocab.types[vocab.unk_id] == TokenType::kControl) {
    vocab.types[vocab.unk_id] = TokenType::kUnknown;
  }
  std::vector<int32_t> extra_eog;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                          "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                          "tokenizer.ggml.fim_sep_token_id"}) {
    VOCAB_ASSIGN_OR_RETURN(int32_t id, r.TokenId(key, -1, size));
    extra_eog.push_back(id);
  }
  vocab.eog_ids = FindEndOfGenerationIds(&vocab, extra_eog);
  // llama.cpp, by model name: Phi-3's special tokens swallow the whitespace after them,
  // except <unk>, <s> and <|endoftext|>.
  if (const GgufValue* name = f.FindValue("general.name"); name != nullptr) {
    absl::StatusOr<absl::string_view> s = name->AsString();
    const std::string lower = s.ok() ? absl::AsciiStrToLower(*s) : "";
    if (absl::StrContains(lower, "phi-3") || absl::StrContains(lower, "phi3")) {
      for (int32_t id = 0; id < size; ++id) {
        const TokenType t = vocab.types[id];
        const std::string& p = vocab.pieces[id];
        if ((t == TokenType::kControl || t == TokenType::kUserDefined ||
             t == TokenType::kUnknown) &&
            p != "<unk>" && p != "<s>" && p != "<|endoftext|>") {
          vocab.rstrip_ids.push_back(id);
        }
      }
    }
  }
  if (f.FindValue("tokenizer.chat_template") != nullptr) {
    VOCAB_ASSIGN_OR_RETURN(absl::string_view chat_template, r.String("tokenizer.chat_template"));
    vocab.chat_template = std::string(chat_template);
  }
  // Further templates by name (tokenizer.chat_template.tool_use, ...).
  constexpr absl::string_view kNamedTemplate = "tokenizer.chat_template.";
  for (const auto& kv : f.metadata()) {
    if (!absl::StartsWith(kv.first, kNamedTemplate) || kv.first.size() == kNamedTemplate.size()) {
      continue;
    }
    VOCAB_ASSIGN_OR_RETURN(absl::string_view source, r.String(std::string(kv.first)));
    vocab.named_chat_templates.emplace_back(std::string(kv.first.substr(kNamedTemplate.size())),
                                            std::string(source));
  }
  return vocab;
}

absl::StatusOr<Vocab> LoadGgufVocab(const std::string& path) {
  VOCAB_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  VOCAB_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Parse(file->bytes(), path));
  return ReadGgufVocab(gguf);
}

}  // namespace folio::worker

#include "common/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace folio {
namespace {

// The expressions, verbatim as llama.cpp lists them (src/llama-vocab.cpp,
// llm_tokenizer_bpe): they are the definition the vocabularies were converted against.
// Where llama.cpp runs an expression through its own matcher or through std::regex on
// text with every non-ASCII character collapsed to its category, PCRE2 with Unicode
// properties gives the same classes (see pre_tokenizer_test.cc for the corners).
constexpr const char* kLlama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr const char* kDeepseekLlm[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
constexpr const char* kDeepseekV3[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
constexpr const char* kDeepseekCoder[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
};
constexpr const char* kFalcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};
constexpr const char* kStarcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
constexpr const char* kGpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
constexpr const char* kQwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr const char* kQwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr const char* kPoro[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
};
constexpr const char* kViking[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    "\\p{N}",
};
constexpr const char* kTekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
constexpr const char* kDefault[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

struct Definition {
  std::span<const char* const> expressions;
  PreTokenizerTraits traits;
};

struct NamedDefinition {
  const char* name;
  Definition definition;
};

constexpr PreTokenizerTraits kPlain{};
// Llama 3 and Tekken: whole-word vocabulary entries first, BOS by default.
constexpr PreTokenizerTraits kTiktoken{.ignore_merges = true, .default_add_bos = true};

// tokenizer.ggml.pre values -> definitions, as llama.cpp maps them (llama_vocab::load).
const NamedDefinition kNames[] = {
    {"default", {kDefault, kPlain}},
    {"llama3", {kLlama3, kTiktoken}},
    {"llama-v3", {kLlama3, kTiktoken}},
    {"llama-bpe", {kLlama3, kTiktoken}},
    {"falcon3", {kLlama3, kTiktoken}},
    {"falcon-h1", {kLlama3, kTiktoken}},
    {"pixtral", {kLlama3, kTiktoken}},
    {"dbrx", {kLlama3, kPlain}},
    {"smaug-bpe", {kLlama3, kPlain}},
    {"chatglm-bpe", {kLlama3, kPlain}},
    {"glm4", {kLlama3, kPlain}},
    {"deepseek-llm", {kDeepseekLlm, kPlain}},
    {"deepseek-coder", {kDeepseekCoder, kPlain}},
    {"deepseek-v3", {kDeepseekV3, kPlain}},
    {"falcon", {kFalcon, kPlain}},
    {"mpt", {kGpt2, kPlain}},
    {"gpt-2", {kGpt2, kPlain}},
    {"phi-2", {kGpt2, kPlain}},
    {"olmo", {kGpt2, kPlain}},
    {"jais", {kGpt2, kPlain}},
    {"gigachat", {kGpt2, kPlain}},
    {"jina-es", {kGpt2, kPlain}},
    {"jina-de", {kGpt2, kPlain}},
    {"jina-v2-es", {kGpt2, kPlain}},
    {"jina-v2-de", {kGpt2, kPlain}},
    {"starcoder", {kStarcoder, kPlain}},
    {"refact", {kStarcoder, kPlain}},
    {"command-r", {kStarcoder, kPlain}},
    {"smollm", {kStarcoder, kPlain}},
    {"codeshell", {kStarcoder, kPlain}},
    {"exaone", {kStarcoder, kPlain}},
    {"minerva-7b", {kStarcoder, kPlain}},
    {"qwen2", {kQwen2, kPlain}},
    {"deepseek-r1-qwen", {kQwen2, kPlain}},
    {"stablelm2", {kQwen2, kPlain}},
    {"qwen35", {kQwen35, kPlain}},
    {"tekken", {kTekken, kTiktoken}},
    {"poro-chat", {kPoro, kPlain}},
    {"bloom", {kPoro, kPlain}},
    {"gpt3-finnish", {kPoro, kPlain}},
    {"viking", {kViking, kPlain}},
};

// This Abseil build has its own absl::string_view, distinct from std::string_view.
absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

const NamedDefinition* Find(std::string_view name) {
  for (const NamedDefinition& d : kNames) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) {
    return absl::StrCat("PCRE2 error ", code);
  }
  return std::string(reinterpret_cast<const char*>(buffer));
}

}  // namespace

struct PreTokenizer::Compiled {
  std::vector<pcre2_code*> codes;  // owned; one per expression, in order

  Compiled() = default;
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;
  ~Compiled() {
    for (pcre2_code* c : codes) pcre2_code_free(c);
  }
};

std::vector<std::string> PreTokenizer::SupportedNames() {
  std::vector<std::string> names;
  for (const NamedDefinition& d : kNames) names.emplace_back(d.name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  const NamedDefinition* named = Find(name);
  if (named == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pre-tokenizer '", ToAbsl(name), "'; supported: ",
                     absl::StrJoin(SupportedNames(), ", ")));
  }
  auto compiled = std::make_shared<Compiled>();
  for (const char* expression : named->definition.expressions) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // UCP: \s, \d, \w and POSIX classes follow Unicode properties, as the Rust/Python
    // regex engines behind Hugging Face tokenizers do. DOLLAR_ENDONLY: `$` is the end of
    // the piece only, as in ECMAScript (std::regex), not "before a final newline".
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(expression), PCRE2_ZERO_TERMINATED,
        PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &error,
        &error_offset, nullptr);
    if (code == nullptr) {
      return absl::InternalError(absl::StrCat("pre-tokenizer '", ToAbsl(name),
                                              "': PCRE2 refused expression at offset ",
                                              error_offset, ": ", Pcre2Message(error)));
    }
    compiled->codes.push_back(code);
    // Without JIT support (some platforms) matching falls back to the interpreter.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  PreTokenizer p;
  p.name_ = std::string(name);
  p.traits_ = named->definition.traits;
  p.compiled_ = std::move(compiled);
  return p;
}

absl::Status PreTokenizer::Split(std::string_view text,
                                 std::vector<std::string_view>* words) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string_view> pieces = {text};
  std::vector<std::string_view> next;
  pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
  if (match == nullptr) return absl::ResourceExhaustedError("PCRE2 match data");
  absl::Status status;
  for (pcre2_code* code : compiled_->codes) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;   // where the next search starts
      size_t kept = 0;  // end of what has been emitted
      while (pos < piece.size()) {
        int rc = pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, match,
                             nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                           match, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          status = absl::InternalError(absl::StrCat("pre-tokenizer '", name_,
                                                    "': PCRE2 match failed: ",
                                                    Pcre2Message(rc)));
          break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const size_t start = ov[0], end = ov[1];
        if (end == start) {
          // An empty match splits nothing; step over one character and search on.
          pos = start + 1;
          while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (start > kept) next.push_back(piece.substr(kept, start - kept));
        next.push_back(piece.substr(start, end - start));
        kept = pos = end;
      }
      if (!status.ok()) break;
      if (kept < piece.size()) next.push_back(piece.substr(kept));
    }
    if (!status.ok()) break;
    pieces.swap(next);
  }
  pcre2_match_data_free(match);
  if (!status.ok()) return status;
  words->insert(words->end(), pieces.begin(), pieces.end());
  return absl::OkStatus();
}

}  // namespace folio

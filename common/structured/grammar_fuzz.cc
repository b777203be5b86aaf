// libFuzzer target: the GBNF parser (and, by the first byte, the regex compiler) on
// arbitrary text must return a Status, never crash, hang or allocate without bound; a
// grammar that parses is compiled against a byte vocabulary, fed the rest of the input
// and asked for a mask. Built only with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/structured/grammar.h"
#include "common/structured/grammar_matcher.h"
#include "common/structured/regex.h"

namespace {

std::shared_ptr<const folio::structured::TokenVocabulary> Vocab() {
  static const auto* v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"ab", "abc", "{\"", "\":", "  ", "true", "\xC3\xA9"}) bytes.push_back(t);
    bytes.push_back("");
    return new std::shared_ptr<const folio::structured::TokenVocabulary>(
        std::make_shared<const folio::structured::TokenVocabulary>(
            std::move(bytes), std::vector<int32_t>{static_cast<int32_t>(bytes.size())}));
  }();
  return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The grammar text, then (after a NUL) bytes to feed the matcher.
  std::string_view text = input.substr(0, input.find('\0'));
  std::string_view feed = text.size() < input.size() ? input.substr(text.size() + 1) : "";
  std::string grammar(text);
  if (data[0] & 1) {
    absl::StatusOr<std::string> g = folio::structured::RegexToGrammar(text);
    if (!g.ok()) return 0;
    // The compiler's output must parse, but for one known refusal: a repetition of
    // something that can match the empty string (`(|a)*`), which the top-down matcher
    // cannot loop on (Grammar::Parse's left-recursion error).
    absl::StatusOr<folio::structured::Grammar> parsed = folio::structured::Grammar::Parse(*g);
    if (!parsed.ok()) {
      if (parsed.status().message().find("left-recursive") == std::string_view::npos) {
        __builtin_trap();
      }
      return 0;
    }
    grammar = *g;
  }
  absl::StatusOr<std::shared_ptr<const folio::structured::CompiledGrammar>> compiled =
      folio::structured::CompiledGrammar::Create(grammar, Vocab());
  if (!compiled.ok()) return 0;
  (void)(*compiled)->grammar().DebugString();
  // Past an ambiguity bound the matcher refuses with "grammar too ambiguous"; any other
  // error is a bug.
  auto check = [](const absl::Status& s) {
    if (!s.ok() && (s.code() != absl::StatusCode::kInvalidArgument ||
                    s.message().find("grammar too ambiguous") == std::string_view::npos)) {
      __builtin_trap();
    }
    return s.ok();
  };
  folio::structured::GrammarMatcher m(*compiled);
  if (!check(m.last_error())) return 0;
  std::vector<uint32_t> mask(folio::structured::BitmaskWords(Vocab()->size()));
  if (!check(m.FillNextTokenBitmask(absl::MakeSpan(mask)))) return 0;
  for (size_t i = 0; i < feed.size() && i < 64; ++i) {
    if (!m.AcceptBytes(feed.substr(i, 1))) {
      if (!check(m.last_error())) return 0;
      break;
    }
  }
  if (!check(m.FillNextTokenBitmask(absl::MakeSpan(mask)))) return 0;
  (void)m.IsTerminated();
  return 0;
}

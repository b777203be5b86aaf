// libFuzzer target: ReasoningParser on arbitrary model output. Input: one byte choosing
// where the output starts (bit 0: inside the reasoning) and a cut point (the rest), then the
// text. Checks, beyond not crashing: the text fed whole, byte by byte and cut at the chosen
// point gives the same reasoning and content; that split is the one the rules in
// reasoning_parser.h give (written here again, on the whole text); and what the parser
// dropped is only whitespace and the two tags, so that
//   text == [whitespace "<think>"] reasoning ["</think>" whitespace] content.
// With no reasoning found the content is the text exactly. Built only with -DFOLIO_FUZZ=ON
// (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "services/frontend/chat/reasoning_parser.h"

namespace {

using folio::frontend::ReasoningDelta;
using folio::frontend::ReasoningParser;
using folio::frontend::ReasoningStart;

constexpr std::string_view kStart = folio::frontend::kThinkStartTag;
constexpr std::string_view kEnd = folio::frontend::kThinkEndTag;
constexpr char kSpace[] = " \t\n\r";

struct Split {
  std::string reasoning;
  std::string content;
  bool saw = false;
  bool operator==(const Split& o) const {
    return reasoning == o.reasoning && content == o.content && saw == o.saw;
  }
};

void Check(bool ok) {
  if (!ok) std::abort();
}

Split Run(ReasoningStart start, const std::vector<std::string_view>& pieces) {
  ReasoningParser parser(start);
  Split s;
  auto take = [&](const ReasoningDelta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
  };
  for (std::string_view p : pieces) take(parser.Feed(p));
  take(parser.Finish());
  s.saw = parser.saw_reasoning();
  return s;
}

// The rules, on the whole text at once.
Split Reference(ReasoningStart start, std::string_view text) {
  Split s;
  std::string_view body = text;
  if (start == ReasoningStart::kOutside) {
    const size_t lead = text.find_first_not_of(kSpace);
    if (lead == std::string_view::npos || !text.substr(lead).starts_with(kStart)) {
      s.content = std::string(text);
      return s;
    }
    body = text.substr(lead + kStart.size());
  }
  s.saw = true;
  const size_t end = body.find(kEnd);
  if (end == std::string_view::npos) {
    s.reasoning = std::string(body);
    return s;
  }
  s.reasoning = std::string(body.substr(0, end));
  std::string_view rest = body.substr(end + kEnd.size());
  const size_t first = rest.find_first_not_of(kSpace);
  s.content = first == std::string_view::npos ? "" : std::string(rest.substr(first));
  return s;
}

bool AllSpace(std::string_view s) { return s.find_first_not_of(kSpace) == std::string_view::npos; }

// text == [whitespace "<think>"] reasoning ["</think>" whitespace] content.
void CheckReconstructs(ReasoningStart start, std::string_view text, const Split& s) {
  if (!s.saw) {
    Check(s.reasoning.empty() && s.content == text);
    return;
  }
  std::string_view rest = text;
  if (start == ReasoningStart::kOutside) {
    const size_t tag = rest.find(kStart);
    Check(tag != std::string_view::npos && AllSpace(rest.substr(0, tag)));
    rest.remove_prefix(tag + kStart.size());
  }
  Check(rest.starts_with(s.reasoning));
  rest.remove_prefix(s.reasoning.size());
  if (rest.empty()) {
    Check(s.content.empty());
    return;
  }
  Check(rest.starts_with(kEnd));
  rest.remove_prefix(kEnd.size());
  Check(rest.ends_with(s.content));
  Check(AllSpace(rest.substr(0, rest.size() - s.content.size())));
  Check(s.content.empty() || s.content.find_first_of(kSpace) != 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  const ReasoningStart start = (data[0] & 1) ? ReasoningStart::kInside : ReasoningStart::kOutside;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const Split whole = Run(start, {text});
  Check(whole == Reference(start, text));
  CheckReconstructs(start, text, whole);
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  Check(Run(start, bytes) == whole);
  const size_t cut = text.empty() ? 0 : (data[0] >> 1) * text.size() / 127;
  Check(Run(start, {text.substr(0, cut), text.substr(cut)}) == whole);
  return 0;
}

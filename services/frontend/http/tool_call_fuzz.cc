// libFuzzer target: ToolCallParser on arbitrary model output. Input: one byte choosing the
// format (low 2 bits) and parallel_tool_calls (bit 2), then the text. Checks, beyond not
// crashing: the text fed whole, fed byte by byte, and cut at a point the input picks give
// the same content and calls; a call's first delta has its id and name and the rest only
// arguments, in index order; and with no call the content is the text exactly. Built only
// with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "services/frontend/http/tool_call_parser.h"

namespace {

using folio::frontend::ToolCallDelta;
using folio::frontend::ToolCallFormat;
using folio::frontend::ToolCallParser;
using folio::frontend::ToolCallParserOptions;
using folio::frontend::ToolParseDelta;

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Result& o) const { return content == o.content && calls == o.calls; }
};

void Check(bool ok) {
  if (!ok) std::abort();
}

Result Run(const ToolCallParserOptions& o, const std::vector<std::string_view>& pieces) {
  ToolCallParser parser(o);
  Result r;
  auto take = [&](const ToolParseDelta& d) {
    r.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (!c.name.empty()) {
        Check(c.index == static_cast<int32_t>(r.calls.size()) && !c.id.empty());
        r.calls.emplace_back(c.name, c.arguments);
      } else {
        Check(c.id.empty() && !r.calls.empty() &&
              c.index == static_cast<int32_t>(r.calls.size()) - 1);
        r.calls.back().second += c.arguments;
      }
    }
  };
  for (std::string_view p : pieces) take(parser.Feed(p));
  take(parser.Finish());
  Check(parser.num_calls() == static_cast<int32_t>(r.calls.size()));
  Check(r.calls.size() <= static_cast<size_t>(o.max_calls));
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  static constexpr ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                                ToolCallFormat::kMistral, ToolCallFormat::kHermes};
  ToolCallParserOptions o;
  o.format = kFormats[data[0] & 3];
  if (data[0] & 4) o.max_calls = 1;
  o.make_id = [] { return std::string("id"); };
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const Result whole = Run(o, {text});
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  Check(Run(o, bytes) == whole);
  const size_t cut = text.empty() ? 0 : (data[0] >> 3) * text.size() / 31;
  Check(Run(o, {text.substr(0, cut), text.substr(cut)}) == whole);
  if (whole.calls.empty()) Check(whole.content == text);
  return 0;
}

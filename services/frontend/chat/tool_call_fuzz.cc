// libFuzzer target: ToolCallParser on arbitrary model output. Input: one byte choosing the
// format (low 2 bits) and parallel_tool_calls (bit 2), then the text. Checks, beyond not
// crashing: the text fed whole, fed byte by byte, and cut at a point the input picks give
// the same content and calls; a call's first delta has its id and name and the rest only
// arguments, in index order; and with no call the content is the text exactly. The same
// text also goes through tool_choice "auto"'s trigger watch (AutoToolCallGrammar's
// triggers for the format, common/structured/grammar_trigger.h) as one token, byte by byte
// and cut: it fires at the earliest trigger in the text or not at all, the same way each
// time, and feeds the grammar the text from there; a Hermes or Mistral call the parser
// finds has fired it. Built only
// with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/structured/grammar_trigger.h"
#include "nlohmann/json.hpp"
#include "services/frontend/chat/tool_call_grammar.h"
#include "services/frontend/chat/tool_call_parser.h"

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

const std::vector<folio::structured::GrammarTrigger>& Triggers(ToolCallFormat format) {
  static const auto* all = [] {
    auto* m = new std::vector<std::vector<folio::structured::GrammarTrigger>>(3);
    const nlohmann::json tools = nlohmann::json::parse(
        R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
    for (ToolCallFormat f :
         {ToolCallFormat::kLlama3Json, ToolCallFormat::kHermes, ToolCallFormat::kMistral}) {
      auto lazy = folio::frontend::AutoToolCallGrammar(f, tools, true, {});
      Check(lazy.ok());
      (*m)[static_cast<int>(f)] = lazy->triggers;
    }
    return m;
  }();
  return (*all)[static_cast<int>(format)];
}

// Where the watch fires over `pieces` (as tokens): {position in the text, fed bytes}, or
// {npos, ""}.
std::pair<size_t, std::string> Watch(const std::vector<folio::structured::GrammarTrigger>& t,
                                     const std::vector<std::string_view>& pieces) {
  folio::structured::TriggerWatch watch(t);
  size_t end = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    end += pieces[i].size();
    if (std::optional<std::string> fed = watch.Accept(static_cast<int32_t>(i), pieces[i])) {
      Check(fed->size() <= end);
      return {end - fed->size(), *fed};
    }
  }
  return {std::string::npos, ""};
}

// The earliest trigger in `text`, by definition.
size_t FirstTrigger(const std::vector<folio::structured::GrammarTrigger>& t,
                    std::string_view text) {
  size_t best = std::string::npos;
  for (const auto& g : t) {
    if (g.token_id.has_value()) continue;
    if (g.at_start) {
      const size_t lead = text.find_first_not_of(" \t\n\r");
      if (lead != std::string::npos && text.substr(lead, g.text.size()) == g.text) {
        best = std::min(best, lead);
      }
    } else {
      best = std::min(best, text.find(g.text));
    }
  }
  return best;
}

void CheckWatch(ToolCallFormat format, std::string_view text, size_t cut, size_t num_calls) {
  const auto& t = Triggers(format);
  const size_t first = FirstTrigger(t, text);
  const auto whole = Watch(t, {text});
  Check(whole.first == first);
  if (first != std::string::npos) Check(whole.second == text.substr(first));
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  for (const auto& split : {Watch(t, bytes), Watch(t, {text.substr(0, cut), text.substr(cut)})}) {
    Check(split.first == first);
    if (first != std::string::npos) Check(text.substr(first, split.second.size()) == split.second);
  }
  if (num_calls > 0 && format != ToolCallFormat::kLlama3Json) Check(first != std::string::npos);
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
  CheckWatch(o.format, text, cut, whole.calls.size());
  return 0;
}

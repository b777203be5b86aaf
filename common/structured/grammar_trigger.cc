#include "common/structured/grammar_trigger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace folio::structured {

absl::Status ValidateGrammarTriggers(absl::Span<const GrammarTrigger> triggers,
                                     int32_t vocab_size) {
  if (triggers.size() > static_cast<size_t>(kMaxGrammarTriggers)) {
    return absl::InvalidArgumentError(absl::StrCat("grammar_triggers: ", triggers.size(),
                                                   " triggers, at most ", kMaxGrammarTriggers));
  }
  for (size_t i = 0; i < triggers.size(); ++i) {
    const GrammarTrigger& t = triggers[i];
    const std::string field = absl::StrCat("grammar_triggers[", i, "]");
    if (t.text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".text is empty"));
    if (t.text.size() > static_cast<size_t>(kMaxGrammarTriggerBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".text has ", t.text.size(),
                                                     " bytes, at most ", kMaxGrammarTriggerBytes));
    }
    if (t.token_id.has_value() && (*t.token_id < 0 || *t.token_id >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".token_id ", *t.token_id,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size, ")"));
    }
    if (t.token_id.has_value() && t.at_start) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at_start is for text triggers, not token ids"));
    }
  }
  return absl::OkStatus();
}

TriggerWatch::TriggerWatch(absl::Span<const GrammarTrigger> triggers) : triggers_(triggers) {
  bool any_at_start = false;
  for (const GrammarTrigger& t : triggers_) {
    if (!t.token_id.has_value()) max_text_ = std::max(max_text_, t.text.size());
    any_at_start = any_at_start || (t.at_start && !t.token_id.has_value());
  }
  start_open_ = any_at_start;
}

std::optional<std::string> TriggerWatch::Accept(int32_t token_id, std::string_view bytes) {
  if (fired_) return std::nullopt;
  for (const GrammarTrigger& t : triggers_) {
    if (t.token_id.has_value() && *t.token_id == token_id) {
      fired_ = true;
      window_.clear();
      return t.text;
    }
  }
  const size_t old = window_.size();
  window_.append(bytes);
  // The earliest trigger that ends in the new bytes.
  size_t best = std::string::npos;
  const size_t lead = start_open_ ? window_.find_first_not_of(" \t\n\r") : std::string::npos;
  bool start_may_open = false;
  for (const GrammarTrigger& t : triggers_) {
    if (t.token_id.has_value()) continue;
    const size_t len = t.text.size();
    if (t.at_start) {
      if (!start_open_ || lead == std::string::npos) continue;
      const size_t have = window_.size() - lead;
      if (window_.compare(lead, std::min(have, len), t.text, 0, std::min(have, len)) != 0) continue;
      if (have >= len) {
        best = std::min(best, lead);
      } else {
        start_may_open = true;
      }
      continue;
    }
    const size_t from = old + 1 >= len ? old + 1 - len : 0;
    const size_t p = window_.find(t.text, from);
    if (p != std::string::npos) best = std::min(best, p);
  }
  if (best != std::string::npos) {
    fired_ = true;
    std::string fed = window_.substr(best);
    window_.clear();
    return fed;
  }
  // Leading whitespace keeps the start open; a partial at_start trigger too.
  if (start_open_ && lead != std::string::npos && !start_may_open) start_open_ = false;
  if (!start_open_ || lead == std::string::npos) {
    const size_t keep = max_text_ > 0 ? max_text_ - 1 : 0;
    if (window_.size() > keep) window_.erase(0, window_.size() - keep);
  }
  return std::nullopt;
}

}  // namespace folio::structured

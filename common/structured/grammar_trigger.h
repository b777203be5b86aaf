// Lazy grammars: a grammar that constrains nothing until a trigger appears in a sequence's
// output, then the rest of it (tool_choice "auto": free text until the model opens a tool
// call with its template family's marker, then the call grammar of the given tools).
//
//   GrammarTrigger   one trigger: a text found in the output's bytes (also across token
//                    boundaries; `at_start`: only when it opens the output, after leading
//                    whitespace), or a token id (a control token such as <|python_tag|>,
//                    whose bytes are empty) that stands for `text`.
//   TriggerWatch     one sequence's watch over its output, a value type (copy = fork).
//
// When a trigger fires the grammar starts at the trigger's first byte: its matcher is fed
// the trigger's text and whatever the output holds after it (the rest of the token that
// completed it), so a lazy grammar's root opens with the trigger texts. Like the
// matcher's, the watch's state is a function of the accepted tokens alone, so replaying
// a sequence's output (recompute, recovery) finds the trigger at the same token.
//
// Thread-compatible.
#ifndef FOLIO_COMMON_STRUCTURED_GRAMMAR_TRIGGER_H_
#define FOLIO_COMMON_STRUCTURED_GRAMMAR_TRIGGER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/structured/grammar_matcher.h"

namespace folio::structured {

struct GrammarTrigger {
  std::string text;                // not empty
  std::optional<int32_t> token_id;  // set: this token fires the trigger (fed as `text`)
  bool at_start = false;           // text only: counts only at the output's start
  bool operator==(const GrammarTrigger&) const = default;
};

// InvalidArgument naming the trigger (`grammar_triggers[i]`) for an empty text, a token id
// outside [0, vocab_size), or more than kMaxGrammarTriggers triggers / a text longer than
// kMaxGrammarTriggerBytes.
inline constexpr int kMaxGrammarTriggers = 16;
inline constexpr int kMaxGrammarTriggerBytes = 64;
absl::Status ValidateGrammarTriggers(absl::Span<const GrammarTrigger> triggers,
                                     int32_t vocab_size);

class TriggerWatch {
 public:
  // `triggers` must outlive the watch (the request's, which does).
  explicit TriggerWatch(absl::Span<const GrammarTrigger> triggers);

  // Accepts the next output token (with `bytes`, its decoded bytes). nullopt while no
  // trigger has fired; on the token that fires one (the earliest in the output, if several
  // would), the bytes to feed the grammar: the trigger's text and the output after it.
  // After it fired the watch is done and returns nullopt.
  std::optional<std::string> Accept(int32_t token_id, std::string_view bytes);

  bool fired() const { return fired_; }

 private:
  absl::Span<const GrammarTrigger> triggers_;
  size_t max_text_ = 0;
  // The output's last bytes: all of them while an at_start trigger may still open it,
  // else at most max_text_ - 1 (what a trigger completed by the next token may start in).
  std::string window_;
  bool start_open_ = true;  // no non-whitespace byte yet, or the output may be an at_start trigger
  bool fired_ = false;
};

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_GRAMMAR_TRIGGER_H_

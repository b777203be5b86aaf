#include "services/frontend/http/reasoning_parser.h"

#include "absl/status/status.h"
#include <string>

#include "absl/strings/str_cat.h"

namespace folio::frontend {
namespace {

constexpr std::string_view kStart = kThinkStartTag;
constexpr std::string_view kEnd = kThinkEndTag;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

ReasoningStart ReasoningStartOfPrompt(std::string_view prompt) {
  while (!prompt.empty() && IsSpace(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(kStart) ? ReasoningStart::kInside : ReasoningStart::kOutside;
}

absl::StatusOr<ReasoningParserMode> ReasoningParserModeByName(std::string_view name) {
  if (name == "auto") return ReasoningParserMode::kAuto;
  if (name == "none") return ReasoningParserMode::kNone;
  if (name == "think") return ReasoningParserMode::kThink;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reasoning parser '", std::string(name), "'; use auto, none or think"));
}

ReasoningParser::ReasoningParser(ReasoningStart start)
    : state_(start == ReasoningStart::kInside ? State::kReasoning : State::kLead) {}

// Both tags hold '<' only at their first byte, so a partial tag that a byte does not
// continue cannot overlap a later match: it is text, and the byte starts afresh.
ReasoningDelta ReasoningParser::Feed(std::string_view text) {
  ReasoningDelta out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    switch (state_) {
      case State::kLead:
        if (tag_pos_ == 0 && IsSpace(c)) {
          held_ += c;
        } else if (c == kStart[tag_pos_]) {
          held_ += c;
          if (++tag_pos_ == kStart.size()) {
            held_.clear();
            tag_pos_ = 0;
            state_ = State::kReasoning;
          }
        } else {
          out.content += held_;
          held_.clear();
          tag_pos_ = 0;
          lead_was_content_ = true;
          state_ = State::kContent;
          continue;  // c is content
        }
        ++i;
        break;
      case State::kReasoning:
        if (c == kEnd[tag_pos_]) {
          held_ += c;
          ++i;
          if (++tag_pos_ == kEnd.size()) {
            held_.clear();
            tag_pos_ = 0;
            state_ = State::kAfterEnd;
          }
        } else if (tag_pos_ > 0) {
          out.reasoning += held_;
          held_.clear();
          tag_pos_ = 0;  // c is looked at again, as a possible '<'
        } else {
          // Reasoning up to the next '<' in one piece.
          size_t next = text.find('<', i);
          if (next == std::string_view::npos) next = text.size();
          out.reasoning.append(text.substr(i, next - i));
          i = next;
        }
        break;
      case State::kAfterEnd:
        if (IsSpace(c)) {
          ++i;
        } else {
          state_ = State::kContent;
        }
        break;
      case State::kContent:
        out.content.append(text.substr(i));
        i = text.size();
        break;
    }
  }
  return out;
}

ReasoningDelta ReasoningParser::Finish() {
  ReasoningDelta out;
  if (state_ == State::kLead) {
    // Whitespace and a partial <think>: the output never opened a reasoning block.
    out.content = std::move(held_);
    lead_was_content_ = true;
    state_ = State::kContent;
  } else if (state_ == State::kReasoning) {
    out.reasoning = std::move(held_);
  }
  held_.clear();
  tag_pos_ = 0;
  return out;
}

}  // namespace folio::frontend

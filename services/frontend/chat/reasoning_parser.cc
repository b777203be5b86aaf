#include "services/frontend/chat/reasoning_parser.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/structured/grammar.h"
#include "common/structured/structured_output.h"

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
  if (name == "think" || name == "deepseek_r1" || name == "qwen3") {
    return ReasoningParserMode::kThink;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown reasoning parser '", std::string(name),
                                                 "'; use auto, none, think, deepseek_r1 or qwen3"));
}

absl::StatusOr<std::string> AfterReasoningGrammar(std::string_view answer_grammar,
                                                  ReasoningStart start) {
  absl::StatusOr<std::string> answer =
      structured::RenameRule(answer_grammar, "root", "reasoning-answer");
  if (!answer.ok()) return answer.status();
  // reasoning-think-i: the text so far ends with the end tag's first i bytes (and holds no
  // whole tag). The tag has '<' only at its first byte, so a '<' always restarts at 1.
  const std::string_view tag = kEnd;
  auto state = [](size_t i) { return absl::StrCat("reasoning-think-", i); };
  auto escaped = [](char c) { return c == '/' ? std::string("\\/") : std::string(1, c); };
  std::string rules;
  for (size_t i = 0; i < tag.size(); ++i) {
    absl::StrAppend(&rules, state(i), " ::= ");
    if (i == 0) {
      absl::StrAppend(&rules, "[^<] ", state(0), " | \"<\" ", state(1), "\n");
      continue;
    }
    absl::StrAppend(&rules, "[^<", escaped(tag[i]), "] ", state(0), " | \"<\" ", state(1),
                    " | ", structured::GbnfLiteral(tag.substr(i, 1)),
                    i + 1 < tag.size() ? absl::StrCat(" ", state(i + 1)) : std::string(), "\n");
  }
  const std::string rest =
      absl::StrCat(state(0), " [ \\t\\r\\n]{0,4} reasoning-answer");
  std::string root =
      start == ReasoningStart::kInside
          ? absl::StrCat("root ::= ", rest, "\n")
          : absl::StrCat("root ::= reasoning-answer | [ \\t\\r\\n]{0,4} ",
                         structured::GbnfLiteral(kStart), " ", rest, "\n");
  std::string out = absl::StrCat(root, rules, *answer);
  if (!answer->ends_with("\n")) out += "\n";
  return out;
}

absl::Status ConstrainAfterReasoning(ReasoningStart start, GenerateInput* input) {
  using Kind = structured::StructuredOutput::Kind;
  if (input->structured.kind == Kind::kNone || !input->grammar_triggers.empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> answer = structured::ToGrammar(input->structured);
  if (!answer.ok()) return absl::OkStatus();
  absl::StatusOr<std::string> g = AfterReasoningGrammar(*answer, start);
  if (!g.ok()) return g.status();
  input->structured.kind = Kind::kGrammar;
  input->structured.text = *std::move(g);
  return absl::OkStatus();
}

ReasoningParser::ReasoningParser(ReasoningStart start)
    : state_(start == ReasoningStart::kInside ? State::kReasoning : State::kLead) {}

// Both tags hold '<' only at their first byte, so a partial tag that a byte does not
// continue cannot overlap a later match: it is text, and the byte starts afresh.
ReasoningDelta ReasoningParser::Feed(std::string_view text, int32_t num_tokens) {
  const State before = state_;
  ReasoningDelta out = FeedText(text);
  if (before == State::kReasoning) {
    reasoning_tokens_ += num_tokens;
  } else if (before == State::kLead) {
    if (state_ == State::kLead) {
      lead_tokens_ += num_tokens;  // whitespace or a partial <think>: decided later
    } else if (saw_reasoning()) {
      reasoning_tokens_ += lead_tokens_ + num_tokens;
    }
  }
  return out;
}

ReasoningDelta ReasoningParser::FeedText(std::string_view text) {
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

// ReasoningParser: splits a reasoning model's generated text, fed as it streams, into its
// reasoning (between <think> and </think>) and the answer after it, for OpenAI chat's
// reasoning_content beside content (as vLLM's qwen3 / deepseek_r1 parsers and llama.cpp's
// server return them).
//
// What the model writes (Qwen3, QwQ, DeepSeek-R1):
//   <think>\nreasoning...\n</think>\n\nanswer...
// and, where the chat template already put <think> at the end of the prompt (DeepSeek-R1,
// Qwen3-Thinking), the output starts inside the reasoning:
//   reasoning...\n</think>\n\nanswer...
//
// The rules (one reasoning block at most, at the start):
//   - ReasoningStart::kOutside: whitespace then <think> opens the reasoning (the whitespace
//     and the tag are dropped); anything else first makes the whole output content, byte
//     for byte (so output without tags is unchanged).
//   - ReasoningStart::kInside: the output is reasoning from its first byte.
//   - In the reasoning, </think> ends it; the tag and the whitespace right after it (the
//     "\n\n" Qwen3 and DeepSeek-R1 write) are dropped, as llama.cpp does; the rest is
//     content, byte for byte, later tags included. The reasoning itself is kept byte for
//     byte (its own leading and trailing newlines too, as vLLM keeps them).
//   - An output that ends inside the reasoning (no </think>: cut by max_tokens or a stop
//     string) is all reasoning, streamed or not. (vLLM's non-streamed qwen3 parser calls it
//     content instead; we keep streamed and whole output the same.)
// So the input is always: [whitespace "<think>"] reasoning ["</think>" whitespace] content,
// the bracketed parts being what the parser drops.
//
// Text is held back only while it may still be a tag (a prefix of <think> or </think>) or
// whitespace before <think> or after </think>; Finish() releases it.
//
// Thread-compatible: one parser per choice.
#ifndef FOLIO_SERVICES_FRONTEND_CHAT_REASONING_PARSER_H_
#define FOLIO_SERVICES_FRONTEND_CHAT_REASONING_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/frontend/request_validator.h"

namespace folio::frontend {

inline constexpr char kThinkStartTag[] = "<think>";
inline constexpr char kThinkEndTag[] = "</think>";

// Where the output starts: before any reasoning, or already inside it (<think> ended the
// prompt).
enum class ReasoningStart { kOutside, kInside };

// kInside when the rendered chat prompt ends with <think> (and optional whitespace): the
// template opened the reasoning for the model. kOutside otherwise (also for a prompt that
// ends with "<think>\n\n</think>\n\n", Qwen3's enable_thinking=false).
ReasoningStart ReasoningStartOfPrompt(std::string_view prompt);

// --reasoning_parser: kAuto parses <think> reasoning for chat templates that mention
// <think> (ChatTemplate::mentions_think), kThink always, kNone never.
enum class ReasoningParserMode { kAuto, kNone, kThink };
// "auto", "none", "think"; "deepseek_r1" and "qwen3" (vLLM's names) are "think": both
// families write the same tags, and whether the output starts inside the reasoning is read
// from the prompt (ReasoningStartOfPrompt), not from the name. InvalidArgument naming them
// otherwise.
absl::StatusOr<ReasoningParserMode> ReasoningParserModeByName(std::string_view name);

// The grammar (common/structured/grammar.h text) that holds a constrained answer
// (response_format, a required or named tool call: `answer_grammar`) to the content after
// the reasoning, so that the model thinks freely first:
//   kInside:  reasoning up to the first </think>, up to 4 whitespace bytes, the answer;
//   kOutside: the answer at once, or up to 4 whitespace bytes, <think>, the reasoning,
//             </think>, up to 4 whitespace bytes, the answer.
// The reasoning is any text without </think> (a small automaton over the tag's bytes, so
// its masks are a handful of states the grammar cache keeps). The answer grammar's root
// becomes the rule `reasoning-answer`. InvalidArgument if it already uses that name or the
// wrapper's rule names (`reasoning-think-N`).
absl::StatusOr<std::string> AfterReasoningGrammar(std::string_view answer_grammar,
                                                  ReasoningStart start);

// A request's eager constraint (structured output, a required tool call) moved after the
// reasoning: `input->structured` becomes AfterReasoningGrammar of its grammar. Left as it
// is: no constraint, a lazy one (grammar_triggers: tool_choice "auto"), or one that does
// not compile (the validator names it). InvalidArgument for AfterReasoningGrammar's errors.
absl::Status ConstrainAfterReasoning(ReasoningStart start, GenerateInput* input);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningStart start);

  // The next stretch of generated text, `num_tokens` tokens of output.
  ReasoningDelta Feed(std::string_view text, int32_t num_tokens = 0);
  // The output ended: what was held back goes out (whitespace before any <think> or a
  // partial tag as what it was in; whitespace after </think> stays dropped).
  ReasoningDelta Finish();

  // Whether the output opened a reasoning block (or started inside one).
  bool saw_reasoning() const { return state_ != State::kLead && !lead_was_content_; }

  // The tokens of the reasoning (usage's completion_tokens_details.reasoning_tokens): those
  // fed inside it, the tags' included. A stretch that ends the reasoning and goes on into
  // the answer (several tokens in one scheduler event: speculative decoding) counts whole.
  int32_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  enum class State {
    kLead,       // kOutside: only whitespace and a prefix of <think> so far (in held_)
    kReasoning,  // in the reasoning; held_ is a prefix of </think>
    kAfterEnd,   // after </think>: whitespace is dropped
    kContent,    // the rest is content
  };

  ReasoningDelta FeedText(std::string_view text);

  State state_;
  int32_t reasoning_tokens_ = 0;
  int32_t lead_tokens_ = 0;  // kLead: tokens fed before the output showed what it opens with
  std::string held_;               // kLead: whitespace + a prefix of <think>; kReasoning:
                                   // a prefix of </think>
  size_t tag_pos_ = 0;             // how much of the tag held_ ends with
  bool lead_was_content_ = false;  // kOutside and the output did not open with <think>
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CHAT_REASONING_PARSER_H_

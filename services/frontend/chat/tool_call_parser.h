// ToolCallParser: turns a model's generated text, fed as it streams, into OpenAI chat
// output: content deltas and tool_calls deltas (a call's index, id, type and name first,
// then fragments of its arguments' JSON text), as OpenAI streams them. Text that is not a
// call stays content, byte for byte.
//
// The formats (what the model writes, as its chat template teaches it):
//   kLlama3Json  Llama 3.x: the output opens with a JSON object
//                {"name": "f", "parameters": {...}} (also "arguments"; an optional leading
//                {"type": "function", ...}), possibly after <|python_tag|>; several calls
//                are separated by ";". <|python_tag|> may also follow some content.
//   kHermes      Hermes 2 Pro, Qwen2.5, Qwen3: <tool_call>\n{"name": "f", "arguments": {...}}
//                \n</tool_call>, any number of them, anywhere in the output; the keys may come
//                in either order.
//   kMistral     Mistral (Nemo, 7B v0.3): [TOOL_CALLS][{"name": "f", "arguments": {...},
//                "id": "..."}, ...]; and the newer [TOOL_CALLS]f[ARGS]{...} (Mistral Small
//                3.2, Devstral, Ministral), repeated for several calls.
//
// A call's arguments are streamed as the model writes them (its own JSON text, so the
// fragments join to exactly what it wrote); arguments written as a JSON string are decoded
// to the text they hold; a call without arguments gets "{}". A candidate that turns out
// not to be a call (no "name", not JSON) before its name was out becomes content again,
// markers included; text is held back only while it may still open a call (a prefix of a
// marker, a leading "{" for Llama 3). Whitespace between and after calls is dropped; with
// no call at all the content is exactly the input.
//
// The markers <|python_tag|> and [TOOL_CALLS] are control tokens in their vocabularies:
// the decoder must render them (ToolCallMarkers, CompletionText's preserved tokens).
//
// Thread-compatible: one parser per choice.
#ifndef FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_PARSER_H_
#define FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_PARSER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace folio::frontend {

enum class ToolCallFormat { kLlama3Json, kHermes, kMistral };

// By --tool_call_parser name: "llama3_json", "hermes" (also for Qwen2.5 / Qwen3), "mistral"
// (vLLM's names). InvalidArgument listing the names otherwise.
absl::StatusOr<ToolCallFormat> ToolCallFormatByName(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The names, comma-separated (for flag help and errors).
const char* ToolCallFormatNames();

// The format a chat template teaches, from its source: <tool_call> (Hermes, Qwen),
// [TOOL_CALLS] (Mistral), Llama 3's header tokens with tool JSON ("parameters" or
// <|python_tag|>). nullopt when the template shows no tool-call format.
std::optional<ToolCallFormat> ToolCallFormatOfTemplate(std::string_view source);

// The marker texts of `format` the parser must see in the decoded text.
std::vector<std::string> ToolCallMarkers(ToolCallFormat format);

// A random call id in OpenAI's shape, "call_" + 24 letters and digits; for Mistral nine
// letters and digits (its templates refuse other ids).
std::string NewToolCallId(ToolCallFormat format);

struct ToolCallDelta {
  int32_t index = 0;      // the call's place in the message's tool_calls
  std::string id;         // the call's first delta only (with name)
  std::string name;       // the call's first delta only
  std::string arguments;  // the next fragment of the arguments' JSON text (may be empty)
};

struct ToolParseDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;  // in order; a call's fragments joined per Feed
  bool empty() const { return content.empty() && calls.empty(); }
};

struct ToolCallParserOptions {
  ToolCallFormat format = ToolCallFormat::kHermes;
  // Calls past this many are parsed and dropped (parallel_tool_calls: false gives 1).
  int32_t max_calls = 1 << 30;
  // Makes each call's id; NewToolCallId when empty.
  std::function<std::string()> make_id;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallParserOptions options);

  // The next stretch of generated text.
  ToolParseDelta Feed(std::string_view text);
  // The output ended: what was held back (an unfinished marker, a candidate that never
  // became a call) is content; an unfinished call keeps what it has (no arguments: "{}").
  ToolParseDelta Finish();

  // Calls whose name has been emitted (capped at max_calls).
  int32_t num_calls() const { return num_calls_; }

 private:
  enum class Mode {
    kStart,        // Llama 3: only whitespace so far (a "{" would open a call)
    kContent,      // plain text; watching for an opening marker
    kCall,         // inside a call's JSON object
    kAfterCall,    // after a call: a closing tag, a separator, the next call or content
    kMistralOpen,  // after [TOOL_CALLS]: "[" opens a list, else a name before [ARGS]
    kMistralName,  // [TOOL_CALLS]name[ARGS]...: the name (and an optional [CALL_ID]id)
    kMistralArgs,  // ...[ARGS]{...}: the arguments value
  };
  // Where a JSON value ends, in a stream of characters (it does not validate).
  struct ValueScan {
    int depth = 0;
    bool started = false;
    bool in_string = false;
    bool escape = false;
    bool primitive = false;
    bool is_string = false;  // the value is a string
    // Feeds `c`; true when the value ended. A primitive (number, true...) ends at the
    // character after it, which is then not part of it: `*consumed` false.
    bool Step(char c, bool* consumed);
  };
  // A call's object: {"key": value, ...} with the name and the arguments picked out.
  struct ObjectScan {
    enum class State { kOpen, kKey, kInKey, kColon, kValue, kInValue, kComma };
    enum class Role { kSkip, kName, kArgs };
    State state = State::kOpen;
    std::string key;  // the raw key being read
    bool key_escape = false;
    int num_keys = 0;
    Role role = Role::kSkip;
    ValueScan value;
    std::string text;  // the current name's or string arguments' raw text
    bool have_name = false;
    bool have_args = false;
  };
  enum class Step { kOk, kFail, kDone };

  // Runs the queued text through the state machine.
  void Run(ToolParseDelta* out);
  void Next(char c, ToolParseDelta* out);
  void NextContent(char c, ToolParseDelta* out);
  void NextAfterCall(char c, ToolParseDelta* out);
  void NextMistral(char c, ToolParseDelta* out);
  Step NextObject(char c, ToolParseDelta* out);
  // Queues `text` to be read next (text given back by Abandon, a character a value did
  // not take). Iterative, so nested attempts cannot deepen the stack.
  void Refeed(std::string_view text);
  bool InAttempt() const;
  // The call being read failed before its name was out: its opening is content, the rest
  // is read again as content.
  void Abandon(ToolParseDelta* out);
  void BeginCall(std::string opening, Mode mode);
  void EmitContent(std::string_view text, ToolParseDelta* out);
  void EmitHeader(std::string name, ToolParseDelta* out);
  void EmitArgs(std::string_view text, ToolParseDelta* out);
  void EndCall(ToolParseDelta* out);
  // `text` is the raw JSON string (quotes included); false when it is not one.
  static bool DecodeString(const std::string& text, std::string* out);

  const ToolCallParserOptions options_;
  const std::vector<std::string> markers_;  // those that open a call in kContent
  Mode mode_;
  std::string queue_;       // text to read; queue_pos_ is the next character
  size_t queue_pos_ = 0;
  std::string pending_;     // kContent / kStart: held back (a marker's prefix, spaces)
  std::string held_space_;  // content whitespace not yet followed by other content
  bool after_call_ = false; // a call ended and no content came since (its spaces drop)
  // The current call attempt until its name is out: the opening (a marker, or the
  // whitespace and "{" of a Llama 3 call), given back as is, and the rest, read again.
  std::string opening_;
  std::string raw_;
  ObjectScan obj_;
  bool header_out_ = false;  // the current call has its name (and is past Abandon)
  bool dropped_ = false;     // the current call is past max_calls
  bool in_list_ = false;     // Mistral: inside [ ... ]
  std::string args_held_;    // arguments read before the name
  bool args_out_ = false;    // the current call has emitted some arguments
  int32_t num_calls_ = 0;    // calls emitted (with a name)
  int32_t num_seen_ = 0;     // calls with a name, emitted or dropped
  std::string after_;        // kAfterCall: held text (a closing tag's prefix, spaces)
  // [TOOL_CALLS]name[CALL_ID]id[ARGS]value
  std::string mistral_name_;
  std::string mistral_tag_;  // a "[...]" tag being read
  std::string mistral_id_;
  bool mistral_in_id_ = false;
  ValueScan mistral_value_;
  std::string mistral_text_;  // string arguments of [ARGS]
  bool mistral_value_open_ = false;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_PARSER_H_

#include "services/frontend/chat/tool_call_parser.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace folio::frontend {
namespace {

constexpr char kToolCallOpen[] = "<tool_call>";
constexpr char kToolCallClose[] = "</tool_call>";
constexpr char kPythonTag[] = "<|python_tag|>";
constexpr char kMistralCalls[] = "[TOOL_CALLS]";
constexpr char kMistralArgs[] = "[ARGS]";
constexpr char kMistralCallId[] = "[CALL_ID]";
// A Mistral [TOOL_CALLS]name[ARGS] name (or call id) longer than this is not one.
constexpr size_t kMaxMistralName = 256;

// (std::string_view forms: this Abseil's string_view is its own type.)
bool Contains(std::string_view s, std::string_view part) { return s.find(part) != s.npos; }
bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-' || c == '.';
}

std::vector<std::string> OpenMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json: return {kPythonTag};
    case ToolCallFormat::kHermes: return {kToolCallOpen};
    case ToolCallFormat::kMistral: return {kMistralCalls};
  }
  return {};
}

// The length of the longest suffix of `text` that is a proper prefix of one of `markers`.
size_t MarkerPrefixLength(std::string_view text, const std::vector<std::string>& markers) {
  size_t best = 0;
  for (const std::string& m : markers) {
    for (size_t k = std::min(text.size(), m.size() - 1); k > best; --k) {
      if (text.substr(text.size() - k) == std::string_view(m).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

}  // namespace

absl::StatusOr<ToolCallFormat> ToolCallFormatByName(std::string_view name) {
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return absl::InvalidArgumentError(absl::StrCat("unknown tool call parser '", absl::string_view(name.data(), name.size()),
                                                 "'; the parsers are ", ToolCallFormatNames()));
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

const char* ToolCallFormatNames() { return "llama3_json, hermes, mistral"; }

std::optional<ToolCallFormat> ToolCallFormatOfTemplate(std::string_view source) {
  if (Contains(source, kMistralCalls)) return ToolCallFormat::kMistral;
  if (Contains(source, kToolCallOpen)) return ToolCallFormat::kHermes;
  if (Contains(source, "<|start_header_id|>") &&
      (Contains(source, kPythonTag) || Contains(source, "\"parameters\""))) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

std::vector<std::string> ToolCallMarkers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json: return {kPythonTag};
    case ToolCallFormat::kHermes: return {kToolCallOpen, kToolCallClose};
    case ToolCallFormat::kMistral: return {kMistralCalls, kMistralArgs, kMistralCallId};
  }
  return {};
}

std::string NewToolCallId(ToolCallFormat format) {
  static constexpr char kAlnum[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local absl::BitGen gen;
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) {
    id.push_back(kAlnum[absl::Uniform<size_t>(gen, 0, sizeof(kAlnum) - 1)]);
  }
  return id;
}

bool ToolCallParser::ValueScan::Step(char c, bool* consumed) {
  *consumed = true;
  if (!started) {
    started = true;
    if (c == '{' || c == '[') {
      depth = 1;
    } else if (c == '"') {
      in_string = true;
      is_string = true;
    } else {
      primitive = true;
    }
    return false;
  }
  if (primitive) {
    if (c == ',' || c == '}' || c == ']' || IsSpace(c)) {
      *consumed = false;
      return true;
    }
    return false;
  }
  if (in_string) {
    if (escape) {
      escape = false;
    } else if (c == '\\') {
      escape = true;
    } else if (c == '"') {
      in_string = false;
      return depth == 0;
    }
    return false;
  }
  if (c == '"') {
    in_string = true;
  } else if (c == '{' || c == '[') {
    ++depth;
  } else if (c == '}' || c == ']') {
    return --depth == 0;
  }
  return false;
}

ToolCallParser::ToolCallParser(ToolCallParserOptions options)
    : options_(std::move(options)),
      markers_(OpenMarkers(options_.format)),
      mode_(options_.format == ToolCallFormat::kLlama3Json ? Mode::kStart : Mode::kContent) {}

bool ToolCallParser::DecodeString(const std::string& text, std::string* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return false;
  *out = j.get<std::string>();
  return true;
}

void ToolCallParser::Refeed(std::string_view text) { queue_.insert(queue_pos_, text); }

void ToolCallParser::Run(ToolParseDelta* out) {
  while (queue_pos_ < queue_.size()) Next(queue_[queue_pos_++], out);
  queue_.clear();
  queue_pos_ = 0;
}

bool ToolCallParser::InAttempt() const {
  return !header_out_ && (mode_ == Mode::kCall || mode_ == Mode::kMistralOpen ||
                          mode_ == Mode::kMistralName || mode_ == Mode::kMistralArgs);
}

ToolParseDelta ToolCallParser::Feed(std::string_view text) {
  ToolParseDelta out;
  queue_.append(text);
  Run(&out);
  if (mode_ == Mode::kContent && !pending_.empty()) {
    // Emit all but what may still open a call.
    const size_t keep = MarkerPrefixLength(pending_, markers_);
    EmitContent(std::string_view(pending_).substr(0, pending_.size() - keep), &out);
    pending_.erase(0, pending_.size() - keep);
  }
  return out;
}

ToolParseDelta ToolCallParser::Finish() {
  ToolParseDelta out;
  // An attempt still without its name is content; read again, its text may open another
  // (later) attempt, so repeat: each round gives back at least its opening.
  while (InAttempt()) {
    Abandon(&out);
    Run(&out);
  }
  switch (mode_) {
    case Mode::kStart:
    case Mode::kContent:
      EmitContent(pending_, &out);
      pending_.clear();
      break;
    case Mode::kCall:
    case Mode::kMistralOpen:
    case Mode::kMistralName:
    case Mode::kMistralArgs:
      // A call cut short (max_tokens): it keeps what it has.
      if (mode_ == Mode::kMistralArgs && mistral_value_.is_string) EmitArgs(mistral_text_, &out);
      if (mode_ == Mode::kCall && obj_.role == ObjectScan::Role::kArgs &&
          obj_.state == ObjectScan::State::kInValue && obj_.value.is_string) {
        EmitArgs(obj_.text, &out);
      }
      EndCall(&out);
      break;
    case Mode::kAfterCall: {
      // Spaces, a separator or a closing tag's start are not content; anything else is.
      std::string_view r = after_;
      while (!r.empty() && IsSpace(r.front())) r.remove_prefix(1);
      const bool dropped = r.empty() || StartsWith(kToolCallClose, r) ||
                           r == ";" || r == "," || r == "]";
      if (!dropped) EmitContent(after_, &out);
      after_.clear();
      mode_ = Mode::kContent;
      break;
    }
  }
  // Trailing whitespace is content only when there was no call.
  if (num_seen_ == 0) out.content += held_space_;
  held_space_.clear();
  return out;
}

void ToolCallParser::EmitContent(std::string_view text, ToolParseDelta* out) {
  if (after_call_) {
    // Spaces right after a call are not content.
    while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  }
  if (text.empty()) return;
  size_t end = text.size();
  while (end > 0 && IsSpace(text[end - 1])) --end;
  if (end == 0) {
    held_space_.append(text);
    return;
  }
  after_call_ = false;
  out->content += held_space_;
  held_space_.clear();
  out->content.append(text.substr(0, end));
  held_space_.assign(text.substr(end));
}

void ToolCallParser::BeginCall(std::string opening, Mode mode) {
  opening_ = std::move(opening);
  raw_.clear();
  obj_ = ObjectScan();
  header_out_ = false;
  dropped_ = false;
  args_held_.clear();
  args_out_ = false;
  mistral_name_.clear();
  mistral_tag_.clear();
  mistral_id_.clear();
  mistral_in_id_ = false;
  mistral_text_.clear();
  mistral_value_ = ValueScan();
  mistral_value_open_ = false;
  mode_ = mode;
}

void ToolCallParser::Abandon(ToolParseDelta* out) {
  std::string opening = std::exchange(opening_, "");
  std::string raw = std::exchange(raw_, "");
  in_list_ = false;
  mode_ = Mode::kContent;
  // The opening is content as it is (read again it would open the same attempt).
  EmitContent(std::exchange(pending_, "") + opening, out);
  Refeed(raw);
}

void ToolCallParser::EmitHeader(std::string name, ToolParseDelta* out) {
  header_out_ = true;
  opening_.clear();
  raw_.clear();
  ++num_seen_;
  held_space_.clear();  // whitespace before a call is not content
  dropped_ = num_calls_ >= options_.max_calls;
  if (dropped_) return;
  ToolCallDelta d;
  d.index = num_calls_++;
  d.id = options_.make_id ? options_.make_id() : NewToolCallId(options_.format);
  d.name = std::move(name);
  out->calls.push_back(std::move(d));
  if (!args_held_.empty()) EmitArgs(std::exchange(args_held_, ""), out);
}

void ToolCallParser::EmitArgs(std::string_view text, ToolParseDelta* out) {
  if (!header_out_) {
    args_held_.append(text);
    return;
  }
  if (dropped_ || text.empty()) return;
  args_out_ = true;
  const int32_t index = num_calls_ - 1;
  if (out->calls.empty() || out->calls.back().index != index) {
    ToolCallDelta d;
    d.index = index;
    out->calls.push_back(std::move(d));
  }
  out->calls.back().arguments.append(text);
}

void ToolCallParser::EndCall(ToolParseDelta* out) {
  if (header_out_ && !args_out_) EmitArgs("{}", out);
  header_out_ = false;
  dropped_ = false;
  opening_.clear();
  raw_.clear();
  after_.clear();
  after_call_ = true;
  mode_ = Mode::kAfterCall;
}

void ToolCallParser::Next(char c, ToolParseDelta* out) {
  switch (mode_) {
    case Mode::kStart:
      if (IsSpace(c)) {
        pending_.push_back(c);
      } else if (c == '{') {
        BeginCall(std::exchange(pending_, "") + "{", Mode::kCall);
        obj_.state = ObjectScan::State::kKey;
      } else {
        mode_ = Mode::kContent;
        NextContent(c, out);
      }
      return;
    case Mode::kContent:
      return NextContent(c, out);
    case Mode::kCall: {
      if (!header_out_) raw_.push_back(c);
      const Step s = NextObject(c, out);
      if (s == Step::kFail) {
        if (!header_out_) return Abandon(out);
        // Broken after the name: the call ends here; the rest is read after it.
        EndCall(out);
        return Refeed(std::string_view(&c, 1));
      }
      if (s == Step::kDone) {
        if (!obj_.have_name) return Abandon(out);
        EndCall(out);
      }
      return;
    }
    case Mode::kAfterCall:
      return NextAfterCall(c, out);
    case Mode::kMistralOpen:
    case Mode::kMistralName:
    case Mode::kMistralArgs:
      if (!header_out_) raw_.push_back(c);
      return NextMistral(c, out);
  }
}

void ToolCallParser::NextContent(char c, ToolParseDelta* out) {
  pending_.push_back(c);
  for (const std::string& m : markers_) {
    if (!EndsWith(pending_, m)) continue;
    EmitContent(std::string_view(pending_).substr(0, pending_.size() - m.size()), out);
    pending_.clear();
    BeginCall(m, options_.format == ToolCallFormat::kMistral ? Mode::kMistralOpen
                                                              : Mode::kCall);
    return;
  }
}

ToolCallParser::Step ToolCallParser::NextObject(char c, ToolParseDelta* out) {
  using State = ObjectScan::State;
  using Role = ObjectScan::Role;
  ObjectScan& o = obj_;
  switch (o.state) {
    case State::kOpen:
      if (IsSpace(c)) return Step::kOk;
      if (c != '{') return Step::kFail;
      o.state = State::kKey;
      return Step::kOk;
    case State::kKey:
      if (IsSpace(c)) return Step::kOk;
      if (c == '}' && o.num_keys == 0) return Step::kDone;
      if (c != '"') return Step::kFail;
      o.key.clear();
      o.key_escape = false;
      o.state = State::kInKey;
      return Step::kOk;
    case State::kInKey: {
      if (o.key_escape || c != '"') {
        o.key_escape = !o.key_escape && c == '\\';
        o.key.push_back(c);
        return o.key.size() > 4096 ? Step::kFail : Step::kOk;
      }
      std::string key;
      if (!DecodeString(absl::StrCat("\"", o.key, "\""), &key)) return Step::kFail;
      ++o.num_keys;
      // Llama 3's calls open with "name" (or "type": "function"); other JSON is content.
      if (options_.format == ToolCallFormat::kLlama3Json && o.num_keys == 1 && key != "name" &&
          key != "type") {
        return Step::kFail;
      }
      o.role = Role::kSkip;
      if (key == "name" && !o.have_name) o.role = Role::kName;
      if ((key == "arguments" || key == "parameters") && !o.have_args) o.role = Role::kArgs;
      o.state = State::kColon;
      return Step::kOk;
    }
    case State::kColon:
      if (IsSpace(c)) return Step::kOk;
      if (c != ':') return Step::kFail;
      o.state = State::kValue;
      return Step::kOk;
    case State::kValue:
      if (IsSpace(c)) return Step::kOk;
      o.value = ValueScan();
      o.text.clear();
      o.state = State::kInValue;
      [[fallthrough]];
    case State::kInValue: {
      bool consumed = true;
      const bool ended = o.value.Step(c, &consumed);
      if (o.role == Role::kName && !o.value.is_string) return Step::kFail;
      if (consumed) {
        if (o.role == Role::kName || (o.role == Role::kArgs && o.value.is_string)) {
          o.text.push_back(c);
          if (o.role == Role::kName && o.text.size() > 4096) return Step::kFail;
        } else if (o.role == Role::kArgs) {
          EmitArgs(std::string_view(&c, 1), out);
        }
      }
      if (!ended) return Step::kOk;
      if (o.role == Role::kName) {
        std::string name;
        if (!DecodeString(o.text, &name) || name.empty()) return Step::kFail;
        o.have_name = true;
        EmitHeader(std::move(name), out);
      } else if (o.role == Role::kArgs) {
        o.have_args = true;
        if (o.value.is_string) {
          std::string args;
          if (!DecodeString(o.text, &args)) return Step::kFail;
          EmitArgs(args.empty() ? "{}" : args, out);
        }
      }
      o.role = Role::kSkip;
      o.state = State::kComma;
      if (consumed) return Step::kOk;
      return NextObject(c, out);  // the character after a number, read as a separator
    }
    case State::kComma:
      if (IsSpace(c)) return Step::kOk;
      if (c == ',') {
        o.state = State::kKey;
        return Step::kOk;
      }
      if (c == '}') return Step::kDone;
      return Step::kFail;
  }
  return Step::kFail;
}

void ToolCallParser::NextAfterCall(char c, ToolParseDelta* out) {
  after_.push_back(c);
  std::string_view a = after_;
  while (!a.empty() && IsSpace(a.front())) a.remove_prefix(1);
  if (a.empty()) return;  // spaces: wait
  switch (options_.format) {
    case ToolCallFormat::kHermes:
      if (a == kToolCallClose) {
        after_.clear();
        mode_ = Mode::kContent;
        return;
      }
      if (StartsWith(kToolCallClose, a)) return;
      break;
    case ToolCallFormat::kLlama3Json:
      if (a == ";") {
        after_.clear();
        mode_ = Mode::kStart;
        return;
      }
      break;
    case ToolCallFormat::kMistral:
      if (in_list_) {
        if (a == ",") {
          after_.clear();
          BeginCall("", Mode::kCall);
          return;
        }
        if (a == "]") {
          after_.clear();
          in_list_ = false;
          mode_ = Mode::kContent;
          return;
        }
        in_list_ = false;
      }
      break;
  }
  // Not a separator: content (or the next call's marker), read again.
  mode_ = Mode::kContent;
  Refeed(std::exchange(after_, ""));
}

void ToolCallParser::NextMistral(char c, ToolParseDelta* out) {
  switch (mode_) {
    case Mode::kMistralOpen:
      if (IsSpace(c)) return;
      if (c == '[') {
        in_list_ = true;
        mode_ = Mode::kCall;
        obj_ = ObjectScan();
        return;
      }
      mode_ = Mode::kMistralName;
      [[fallthrough]];
    case Mode::kMistralName: {
      // name, an optional [CALL_ID]id, then [ARGS].
      if (!mistral_tag_.empty() || c == '[') {
        mistral_tag_.push_back(c);
        if (mistral_tag_ == kMistralArgs) {
          if (mistral_name_.empty()) return Abandon(out);
          mode_ = Mode::kMistralArgs;
          EmitHeader(std::exchange(mistral_name_, ""), out);
          return;
        }
        if (mistral_tag_ == kMistralCallId) {
          if (mistral_in_id_ || mistral_name_.empty()) return Abandon(out);
          mistral_in_id_ = true;
          mistral_tag_.clear();
          return;
        }
        if (StartsWith(kMistralArgs, mistral_tag_) ||
            StartsWith(kMistralCallId, mistral_tag_)) {
          return;
        }
        return Abandon(out);
      }
      std::string& word = mistral_in_id_ ? mistral_id_ : mistral_name_;
      if (!IsNameChar(c) || word.size() >= kMaxMistralName) return Abandon(out);
      word.push_back(c);
      return;
    }
    case Mode::kMistralArgs: {
      if (!mistral_value_open_ && IsSpace(c)) return;
      mistral_value_open_ = true;
      bool consumed = true;
      const bool ended = mistral_value_.Step(c, &consumed);
      if (consumed) {
        if (mistral_value_.is_string) {
          mistral_text_.push_back(c);
        } else {
          EmitArgs(std::string_view(&c, 1), out);
        }
      }
      if (!ended) return;
      if (mistral_value_.is_string) {
        std::string args;
        EmitArgs(DecodeString(mistral_text_, &args) ? (args.empty() ? "{}" : args)
                                                    : mistral_text_,
                 out);
        mistral_text_.clear();
      }
      EndCall(out);
      if (!consumed) Refeed(std::string_view(&c, 1));
      return;
    }
    default:
      return;
  }
}

}  // namespace folio::frontend

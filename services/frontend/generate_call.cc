#include "services/frontend/generate_call.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <span>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "nlohmann/json.hpp"
#include "services/frontend/completion_text.h"
#include "services/frontend/chat/reasoning_parser.h"
#include "services/frontend/chat/tool_call_grammar.h"
#include "services/frontend/request_id.h"
#include "services/frontend/resumable_stream.h"

namespace folio::frontend {
namespace pb = folio::v1;
namespace ipb = folio::internal::v1;

GenerateInput GenerateInputFromProto(const pb::GenerateRequest& request) {
  GenerateInput in;
  in.request_id = request.request_id();
  in.prompt = request.prompt();
  if (request.has_parse_special()) in.parse_special = request.parse_special();
  in.prompt_token_ids.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  const pb::SamplingOptions& s = request.sampling();
  if (s.has_max_tokens()) in.max_tokens = s.max_tokens();
  if (s.has_temperature()) in.temperature = s.temperature();
  if (s.has_top_p()) in.top_p = s.top_p();
  if (s.has_top_k()) in.top_k = s.top_k();
  if (s.has_min_p()) in.min_p = s.min_p();
  if (s.has_seed()) in.seed = s.seed();
  in.stop.assign(s.stop().begin(), s.stop().end());
  in.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  if (s.has_logprobs()) in.logprobs = s.logprobs();
  in.ignore_eos = s.ignore_eos();
  if (s.has_n()) in.n = s.n();
  if (s.has_beam_width()) in.beam_width = s.beam_width();
  if (s.has_length_penalty()) in.length_penalty = s.length_penalty();
  if (s.has_presence_penalty()) in.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) in.frequency_penalty = s.frequency_penalty();
  if (s.has_repetition_penalty()) in.repetition_penalty = s.repetition_penalty();
  in.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  if (s.has_min_tokens()) in.min_tokens = s.min_tokens();
  if (s.has_num_speculative_tokens()) in.num_speculative_tokens = s.num_speculative_tokens();
  using Kind = structured::StructuredOutput::Kind;
  switch (s.structured().kind_case()) {
    case pb::StructuredOutput::kJsonSchema:
      in.structured = {Kind::kJsonSchema, s.structured().json_schema()};
      break;
    case pb::StructuredOutput::kJsonObject:
      if (s.structured().json_object()) in.structured = {Kind::kJsonObject, ""};
      break;
    case pb::StructuredOutput::kRegex:
      in.structured = {Kind::kRegex, s.structured().regex()};
      break;
    case pb::StructuredOutput::kGrammar:
      in.structured = {Kind::kGrammar, s.structured().grammar()};
      break;
    case pb::StructuredOutput::KIND_NOT_SET:
      break;
  }
  return in;
}

absl::StatusOr<std::optional<ToolCalling>> ToolCallingFromProto(const pb::ToolCalling& t,
                                                                const Tokenizer& tokenizer,
                                                                GenerateInput* input) {
  using nlohmann::json;
  auto bad = [](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat("tool_calling.", message));
  };
  if (t.tools().empty()) {
    if (t.tool_choice() != pb::TOOL_CHOICE_AUTO || !t.function().empty() ||
        t.has_parallel_tool_calls() || !t.format().empty()) {
      return bad("tool_choice, function, parallel_tool_calls and format need tools");
    }
    return std::nullopt;
  }
  if (t.format().empty()) {
    return bad(absl::StrCat("format is required with tools: one of ", ToolCallFormatNames()));
  }
  absl::StatusOr<ToolCallFormat> format = ToolCallFormatByName(t.format());
  if (!format.ok()) return bad(absl::StrCat("format: ", format.status().message()));
  json tools = json::array();
  for (int i = 0; i < t.tools_size(); ++i) {
    const pb::Tool& tool = t.tools(i);
    const std::string field = absl::StrCat("tools[", i, "]");
    if (tool.name().empty() || tool.name().size() > 64) {
      return bad(absl::StrCat(field, ".name must have 1 to 64 bytes"));
    }
    for (const json& seen : tools) {
      if (seen["function"]["name"] == tool.name()) {
        return bad(absl::StrCat(field, ".name '", tool.name(), "' is given twice"));
      }
    }
    json parameters = {{"type", "object"}};
    if (!tool.parameters_json().empty()) {
      parameters = json::parse(tool.parameters_json(), nullptr, /*allow_exceptions=*/false);
      if (!parameters.is_object()) {
        return bad(absl::StrCat(field, ".parameters_json must be a JSON object (a JSON Schema)"));
      }
    }
    tools.push_back({{"type", "function"},
                     {"function", {{"name", tool.name()},
                                   {"description", tool.description()},
                                   {"parameters", std::move(parameters)}}}});
  }
  const pb::ToolChoice choice = t.tool_choice();
  if (choice == pb::TOOL_CHOICE_FUNCTION) {
    bool found = false;
    for (const json& f : tools) found = found || f["function"]["name"] == t.function();
    if (!found) {
      return bad(absl::StrCat("function '", t.function().substr(0, 64),
                              "' (TOOL_CHOICE_FUNCTION) is not one of the tools"));
    }
  } else if (!t.function().empty()) {
    return bad("function is only for tool_choice TOOL_CHOICE_FUNCTION");
  }
  if (choice != pb::TOOL_CHOICE_AUTO && choice != pb::TOOL_CHOICE_NONE &&
      choice != pb::TOOL_CHOICE_REQUIRED && choice != pb::TOOL_CHOICE_FUNCTION) {
    return bad(absl::StrCat("tool_choice ", static_cast<int>(choice), " is not a ToolChoice"));
  }
  if (choice == pb::TOOL_CHOICE_NONE) return std::nullopt;
  const bool parallel = !t.has_parallel_tool_calls() || t.parallel_tool_calls();
  // The grammar's errors name "tools[i].function.parameters"; here that is parameters_json.
  auto grammar_error = [&](const absl::Status& s) {
    return bad(absl::StrReplaceAll(s.message(), {{".function.parameters:", ".parameters_json:"}}));
  };
  const auto markers = MarkerControlTokens(tokenizer, *format);
  using Kind = structured::StructuredOutput::Kind;
  if (choice == pb::TOOL_CHOICE_REQUIRED || choice == pb::TOOL_CHOICE_FUNCTION) {
    if (input->structured.kind != Kind::kNone) {
      return bad(
          "tool_choice REQUIRED or FUNCTION and sampling.structured both constrain the output; "
          "give one");
    }
    absl::StatusOr<std::string> grammar = ToolCallGrammar(
        *format, tools, choice == pb::TOOL_CHOICE_FUNCTION ? t.function() : "", parallel);
    if (!grammar.ok()) return grammar_error(grammar.status());
    input->structured = {Kind::kGrammar, *std::move(grammar)};
  } else {
    absl::StatusOr<LazyToolCallGrammar> lazy = AutoToolCallGrammar(*format, tools, parallel, markers);
    if (!lazy.ok()) return grammar_error(lazy.status());
    // With structured output of its own, that constrains instead.
    if (input->structured.kind == Kind::kNone) {
      input->structured = {Kind::kGrammar, std::move(lazy->grammar)};
      input->grammar_triggers = std::move(lazy->triggers);
    }
  }
  ToolCalling out;
  out.parser.format = *format;
  if (!parallel) out.parser.max_calls = 1;
  for (const auto& [marker, id] : markers) out.preserved_tokens.push_back(id);
  return out;
}

// GenerateRequest.reasoning_parser: where the output starts (read from the prompt's end),
// with the request's constraint moved after the reasoning; nullopt when off.
absl::StatusOr<std::optional<ReasoningStart>> ReasoningFromProto(const pb::GenerateRequest& request,
                                                                 const Tokenizer& tokenizer,
                                                                 GenerateInput* input) {
  if (request.reasoning_parser().empty()) return std::nullopt;
  absl::StatusOr<ReasoningParserMode> mode = ReasoningParserModeByName(request.reasoning_parser());
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("reasoning_parser: ", mode.status().message()));
  }
  if (*mode == ReasoningParserMode::kNone) return std::nullopt;
  if (*mode == ReasoningParserMode::kAuto) {
    return absl::InvalidArgumentError(
        "reasoning_parser: auto chooses by the chat template, which a gRPC prompt has already "
        "been through; use think or none");
  }
  std::string prompt = request.prompt();
  if (prompt.empty() && request.prompt_token_ids_size() > 0) {
    absl::StatusOr<std::string> text = tokenizer.Decode(std::vector<int32_t>(
        request.prompt_token_ids().begin(), request.prompt_token_ids().end()));
    if (text.ok()) prompt = *std::move(text);  // a bad id is the validator's to name
  }
  const ReasoningStart start = ReasoningStartOfPrompt(prompt);
  if (absl::Status s = ConstrainAfterReasoning(start, input); !s.ok()) return s;
  return start;
}

ipb::ScheduleRequest ToScheduleRequest(const ValidatedRequest& r) {
  ipb::ScheduleRequest out;
  out.set_request_id(r.request_id);
  out.mutable_prompt_token_ids()->Assign(r.prompt_token_ids.begin(), r.prompt_token_ids.end());
  ipb::SamplingParams* sampling = out.mutable_sampling();
  sampling->set_temperature(r.temperature);
  sampling->set_top_p(r.top_p);
  sampling->set_top_k(r.top_k);
  sampling->set_min_p(r.min_p);
  sampling->set_seed(r.seed);
  sampling->set_presence_penalty(r.presence_penalty);
  sampling->set_frequency_penalty(r.frequency_penalty);
  sampling->set_repetition_penalty(r.repetition_penalty);
  for (const auto& [token, bias] : r.logit_bias) {
    ipb::LogitBias* b = sampling->add_logit_bias();
    b->set_token_id(token);
    b->set_bias(bias);
  }
  out.set_min_tokens(r.min_tokens);
  if (r.num_speculative_tokens >= 0) out.set_num_speculative_tokens(r.num_speculative_tokens);
  out.set_grammar(r.grammar);
  for (const structured::GrammarTrigger& t : r.grammar_triggers) {
    ipb::GrammarTrigger* g = out.add_grammar_triggers();
    g->set_text(t.text);
    if (t.token_id.has_value()) g->set_token_id(*t.token_id);
    g->set_at_start(t.at_start);
  }
  out.set_max_tokens(r.max_tokens);
  out.mutable_stop_token_ids()->Assign(r.stop_token_ids.begin(), r.stop_token_ids.end());
  out.set_ignore_eos(r.ignore_eos == IgnoreEos::kYes);
  out.set_num_logprobs(r.logprobs.value_or(0));
  out.set_n(r.n);
  out.set_beam_width(r.beam_width);
  if (r.beam_width > 0) out.set_length_penalty(r.length_penalty);
  return out;
}

namespace {

pb::FinishReason ToPublic(ipb::FinishReason reason) {
  switch (reason) {
    case ipb::FINISH_REASON_LENGTH:
      return pb::FINISH_REASON_LENGTH;
    case ipb::FINISH_REASON_STOP:
      return pb::FINISH_REASON_STOP;
    case ipb::FINISH_REASON_CANCELLED:
      return pb::FINISH_REASON_CANCELLED;
    default:
      return pb::FINISH_REASON_UNSPECIFIED;
  }
}

// The client sees the scheduler's code; the message says where it came from.
grpc::Status FromScheduler(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return grpc::Status(status.error_code(),
                        absl::StrCat("scheduler unavailable: ", status.error_message()));
  }
  return grpc::Status(status.error_code(), absl::StrCat("scheduler: ", status.error_message()));
}

// A cancellation this close to the client's deadline is counted as the deadline.
constexpr std::chrono::milliseconds kDeadlineSlack(200);

// A request id fit for a log line even when the client's is not (too long, odd bytes).
std::string LoggableId(const std::string& id) {
  std::string out = id.substr(0, 64);
  for (char& c : out) {
    if (c < 0x21 || c > 0x7e) c = '?';
  }
  return out;
}

// The state and the scheduler side of one Generate or Complete call. The derived classes
// add the server side and decide when the next scheduler event is read.
class GenerationCall : public ResumableStream::Listener {
 public:
  GenerationCall(const char* method, grpc::CallbackServerContext* ctx, CallEnv env)
      : method_(method), server_ctx_(ctx), env_(std::move(env)), start_(absl::Now()) {
    env_.metrics->active_streams.Add(1);
  }

  // Scheduler side (resumable_stream.h): an event, and the end of the stream.
  void OnEvent(const ipb::ScheduleEvent& event) override;
  void OnEnd(const grpc::Status& status) override;

 protected:
  // Validates `request` and starts the scheduler call. On error nothing is started and the
  // caller must finish the server side with the returned status.
  absl::Status Begin(const pb::GenerateRequest& request);

  // Derived: the next piece of output. Non-final: call ReadNext() when ready for more.
  // Final: finish the server side with OK (the chunk has finish_reason and usage).
  virtual void Deliver(pb::GenerateResponse chunk, bool final)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // Derived: finish the server side with `status`. Called at most once, never after a
  // final Deliver.
  virtual void Fail(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  void ReadNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { stream_->Read(); }
  // No more reads from outside the stream's reactions (see Begin); idempotent.
  void ReleaseHold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!hold_) return;
    hold_ = false;
    stream_->Release();
  }
  // Cancels the scheduler call (and any wait for a scheduler to resume it).
  void CancelUpstream() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<ResumableStream> stream;
    {
      absl::MutexLock lock(&mu_);
      stream = stream_;
    }
    if (stream != nullptr) stream->Cancel();
  }
  // Marks the call finished with `status` (logged and counted) and fails it.
  void FailWith(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The server side saw the client cancel or its deadline pass.
  void ClientCancelled();
  // The server side is done (its OnDone): record metrics, drop its reference.
  void ServerDone();

  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // a final Deliver or a Fail happened

 private:
  // Turns `event` into output. Returns true when the scheduler call must be cancelled.
  bool HandleEvent(const ipb::ScheduleEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddTokenInfo(const ipb::GeneratedToken& token, pb::GenerateResponse* chunk) const;
  void Unref();

  const char* const method_;
  grpc::CallbackServerContext* const server_ctx_;
  const CallEnv env_;
  const absl::Time start_;

  // One completion of the request (n > 1 has several, by index).
  struct Choice {
    Choice(const Tokenizer& tokenizer, std::vector<std::string> stops,
           std::span<const int32_t> prompt, const std::optional<ToolCalling>& tools,
           std::optional<ReasoningStart> reasoning_start)
        : text(tokenizer, std::move(stops), prompt,
               tools.has_value() ? tools->preserved_tokens : std::vector<int32_t>{}) {
      if (tools.has_value()) parser.emplace(tools->parser);
      if (reasoning_start.has_value()) reasoning.emplace(*reasoning_start);
    }
    CompletionText text;
    std::optional<ReasoningParser> reasoning;  // reasoning_parser: runs before `parser`
    std::optional<ToolCallParser> parser;  // tool calling
    bool done = false;  // its last message is out
    bool cut = false;   // ended here by a stop string: the scheduler may still run it
  };
  // Tool calling: the chunk's text through the choice's parser (finished with the choice):
  // content stays text, calls become ToolCall deltas; a choice that called and stopped
  // finishes with TOOL_CALLS.
  static void ParseToolCalls(Choice& choice, pb::GenerateResponse* chunk);
  // reasoning_parser: the chunk's text split into its reasoning and the rest.
  static void ParseReasoning(Choice& choice, pb::GenerateResponse* chunk);
  // Ends the call: the last message, with usage. `chunk` may carry a choice's last text.
  // Returns true when the scheduler call must be cancelled.
  bool DeliverFinal(pb::GenerateResponse chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string request_id_;
  std::optional<int32_t> logprobs_;
  std::deque<Choice> choices_ ABSL_GUARDED_BY(mu_);
  int32_t num_choices_done_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<ResumableStream> stream_ ABSL_GUARDED_BY(mu_);  // the scheduler side

  bool upstream_started_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool upstream_done_ ABSL_GUARDED_BY(mu_) = false;
  bool client_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool client_deadline_passed_ ABSL_GUARDED_BY(mu_) = false;
  bool first_token_sent_ ABSL_GUARDED_BY(mu_) = false;
  int32_t num_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t num_cached_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusCode final_code_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kUnknown;
  int refs_ ABSL_GUARDED_BY(mu_) = 1;  // the server side; +1 while the scheduler call runs
};

absl::Status GenerationCall::Begin(const pb::GenerateRequest& request) {
  GenerateInput input = GenerateInputFromProto(request);
  if (input.request_id.empty()) input.request_id = NewRequestId();
  request_id_ = input.request_id;
  absl::StatusOr<std::optional<ToolCalling>> tools =
      ToolCallingFromProto(request.tool_calling(), env_.model->tokenizer(), &input);
  if (!tools.ok()) return tools.status();
  absl::StatusOr<std::optional<ReasoningStart>> reasoning =
      ReasoningFromProto(request, env_.model->tokenizer(), &input);
  if (!reasoning.ok()) return reasoning.status();
  absl::StatusOr<ValidatedRequest> validated = env_.model->validator().Validate(input);
  if (!validated.ok()) return validated.status();

  absl::MutexLock lock(&mu_);
  logprobs_ = validated->logprobs;
  num_prompt_tokens_ = static_cast<int32_t>(validated->prompt_token_ids.size());
  for (int32_t i = 0; i < validated->n; ++i) {
    choices_.emplace_back(env_.model->tokenizer(), validated->stop, validated->prompt_token_ids,
                          *tools, *reasoning);
  }
  env_.metrics->prompt_tokens.Increment(num_prompt_tokens_);
  VLOG(1) << "request " << request_id_ << ": " << method_ << ", " << num_prompt_tokens_
          << " prompt tokens, max_tokens " << validated->max_tokens;
  // The client's deadline (infinite when it set none) bounds the scheduler call too.
  const auto deadline = server_ctx_->deadline();
  const absl::Time until = deadline == std::chrono::system_clock::time_point::max()
                               ? absl::InfiniteFuture()
                               : absl::FromChrono(deadline);
  upstream_started_ = true;
  ++refs_;
  // StreamCall starts reads from the server side (OnWriteDone), outside the stream's own
  // reactions; the stream holds its call open for them until ReleaseHold: at the end of
  // the stream, when the call is finished, or when the client is gone.
  hold_ = true;
  stream_ = ResumableStream::Start(env_.router, ToScheduleRequest(*validated), until,
                                   env_.resume, this, env_.calls);
  stream_->Read();
  return absl::OkStatus();
}

void GenerationCall::OnEvent(const ipb::ScheduleEvent& event) {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) {
      // Drain what the scheduler still sends so that its stream can end.
      ReadNext();
      return;
    }
    cancel = HandleEvent(event);
  }
  // Outside the lock: cancellation may run reactions of this call.
  if (cancel) CancelUpstream();
}

bool GenerationCall::HandleEvent(const ipb::ScheduleEvent& event) {
  if (event.num_prompt_tokens() > 0) num_prompt_tokens_ = event.num_prompt_tokens();
  if (event.num_cached_prompt_tokens() > 0) {
    num_cached_prompt_tokens_ = event.num_cached_prompt_tokens();
  }
  const int32_t index = event.index();
  if (index < 0 || index >= static_cast<int32_t>(choices_.size())) {
    FailWith(grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("scheduler sent choice ", index, " of ", choices_.size())));
    return true;
  }
  Choice& choice = choices_[index];
  if (choice.done) {
    // A choice cut by a stop string: the scheduler still runs it; its tokens are dropped.
    ReadNext();
    return false;
  }
  std::vector<int32_t> ids;
  ids.reserve(event.tokens_size());
  for (const ipb::GeneratedToken& t : event.tokens()) ids.push_back(t.token_id());
  absl::StatusOr<CompletionText::Delta> delta = choice.text.AddTokens(ids);
  if (!delta.ok()) {
    FailWith(grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("scheduler sent a bad token: ", delta.status().message())));
    return true;
  }
  pb::GenerateResponse chunk;
  chunk.set_request_id(request_id_);
  chunk.set_index(index);
  chunk.set_cumulative_logprob(event.cumulative_logprob());
  chunk.set_text(std::move(delta->text));
  for (int i = 0; i < delta->num_tokens_used; ++i) AddTokenInfo(event.tokens(i), &chunk);

  if (delta->stopped) {
    choice.done = true;
    choice.cut = true;  // the scheduler would otherwise keep generating it
    chunk.set_finish_reason(pb::FINISH_REASON_STOP);
    env_.metrics->stop_string_matches.Increment();
  } else if (event.finish_reason() == ipb::FINISH_REASON_ERROR) {
    FailWith(grpc::Status(grpc::StatusCode::INTERNAL,
                          "scheduler: the request failed (finish reason ERROR)"));
    return true;
  } else if (event.finish_reason() != ipb::FINISH_REASON_UNSPECIFIED) {
    choice.done = true;
    CompletionText::Delta rest = choice.text.Finish();
    chunk.mutable_text()->append(rest.text);
    if (rest.stopped) env_.metrics->stop_string_matches.Increment();
    chunk.set_finish_reason(rest.stopped ? pb::FINISH_REASON_STOP
                                         : ToPublic(event.finish_reason()));
  }
  if (choice.reasoning.has_value()) ParseReasoning(choice, &chunk);
  if (choice.parser.has_value()) ParseToolCalls(choice, &chunk);
  if (choice.done) ++num_choices_done_;

  if (chunk.tokens_size() > 0) {
    env_.metrics->streamed_tokens.Increment(chunk.tokens_size());
    if (!first_token_sent_) {
      first_token_sent_ = true;
      env_.metrics->time_to_first_token.Observe(absl::ToDoubleSeconds(absl::Now() - start_));
    }
  }
  if (num_choices_done_ == static_cast<int32_t>(choices_.size())) {
    return DeliverFinal(std::move(chunk));
  }
  if (chunk.tokens_size() > 0 || !chunk.text().empty() || chunk.tool_calls_size() > 0 ||
      !chunk.reasoning().empty() ||
      chunk.finish_reason() != pb::FINISH_REASON_UNSPECIFIED) {
    Deliver(std::move(chunk), /*final=*/false);
  } else {
    ReadNext();
  }
  return false;
}

void GenerationCall::ParseReasoning(Choice& choice, pb::GenerateResponse* chunk) {
  ReasoningDelta p = choice.reasoning->Feed(chunk->text(), chunk->tokens_size());
  if (choice.done) {
    ReasoningDelta rest = choice.reasoning->Finish();
    p.reasoning += rest.reasoning;
    p.content += rest.content;
  }
  chunk->set_text(std::move(p.content));
  chunk->set_reasoning(std::move(p.reasoning));
}

void GenerationCall::ParseToolCalls(Choice& choice, pb::GenerateResponse* chunk) {
  ToolParseDelta p = choice.parser->Feed(chunk->text());
  if (choice.done) {
    ToolParseDelta rest = choice.parser->Finish();
    p.content += rest.content;
    for (ToolCallDelta& c : rest.calls) p.calls.push_back(std::move(c));
    if (chunk->finish_reason() == pb::FINISH_REASON_STOP && choice.parser->num_calls() > 0) {
      chunk->set_finish_reason(pb::FINISH_REASON_TOOL_CALLS);
    }
  }
  chunk->set_text(std::move(p.content));
  for (ToolCallDelta& c : p.calls) {
    pb::ToolCall* call = chunk->add_tool_calls();
    call->set_index(c.index);
    call->set_id(std::move(c.id));
    call->set_name(std::move(c.name));
    call->set_arguments(std::move(c.arguments));
  }
}

bool GenerationCall::DeliverFinal(pb::GenerateResponse chunk) {
  int32_t completion_tokens = 0;
  int32_t reasoning_tokens = 0;
  bool cancel = false;
  for (const Choice& c : choices_) {
    completion_tokens += c.text.num_tokens();
    if (c.reasoning.has_value()) reasoning_tokens += c.reasoning->reasoning_tokens();
    cancel = cancel || c.cut;
  }
  pb::Usage* usage = chunk.mutable_usage();
  usage->set_prompt_tokens(num_prompt_tokens_);  // once, however many choices share it
  usage->set_completion_tokens(completion_tokens);
  usage->set_cached_prompt_tokens(num_cached_prompt_tokens_);
  usage->set_reasoning_tokens(reasoning_tokens);
  finished_ = true;
  final_code_ = absl::StatusCode::kOk;
  LOG(INFO) << "request " << request_id_ << ": " << method_ << " finished ("
            << pb::FinishReason_Name(chunk.finish_reason()) << "), " << num_prompt_tokens_
            << " prompt + " << completion_tokens << " completion tokens in "
            << absl::FormatDuration(absl::Trunc(absl::Now() - start_, absl::Microseconds(100)));
  Deliver(std::move(chunk), /*final=*/true);
  // From here on reads are started only from this stream's own reactions.
  if (!cancel && !upstream_done_) ReadNext();  // drain to the end of the scheduler's stream
  ReleaseHold();
  return cancel;
}

void GenerationCall::AddTokenInfo(const ipb::GeneratedToken& token,
                                  pb::GenerateResponse* chunk) const {
  pb::TokenInfo* info = chunk->add_tokens();
  info->set_token_id(token.token_id());
  if (!logprobs_.has_value()) return;
  info->set_logprob(token.logprob());
  const int n = std::min(token.top_logprobs_size(), *logprobs_);
  for (int i = 0; i < n; ++i) {
    const ipb::TokenLogprob& alt = token.top_logprobs(i);
    pb::TokenLogprob* out = info->add_top_logprobs();
    out->set_token_id(alt.token_id());
    out->set_token(TokenDisplayText(env_.model->tokenizer(), alt.token_id()));
    out->set_logprob(alt.logprob());
  }
}

void GenerationCall::OnEnd(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    upstream_done_ = true;
    if (!finished_) {
      if (client_deadline_passed_ || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        FailWith(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "the client's deadline passed before the completion was done"));
      } else if (client_cancelled_) {
        FailWith(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
      } else if (status.ok() && num_choices_done_ > 0) {
        // Beam search found fewer finished beams than n: the choices it sent are all.
        pb::GenerateResponse chunk;
        chunk.set_request_id(request_id_);
        DeliverFinal(std::move(chunk));
      } else if (status.ok()) {
        FailWith(grpc::Status(grpc::StatusCode::INTERNAL,
                              "scheduler ended the stream without a finish reason"));
      } else {
        FailWith(FromScheduler(status));
      }
    }
  }
  Unref();
}

void GenerationCall::FailWith(const grpc::Status& status) {
  finished_ = true;
  ReleaseHold();
  final_code_ = FromGrpcStatus(status).code();
  LOG(WARNING) << "request " << LoggableId(request_id_) << ": " << method_
               << " failed: " << absl::StatusCodeToString(final_code_) << ": "
               << status.error_message();
  Fail(status);
}

void GenerationCall::ClientCancelled() {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    client_cancelled_ = true;
    // server_ctx_ is valid here (a server-side reaction), perhaps not by the scheduler's
    // OnDone, so decide now whether this was the deadline. The client's own deadline timer
    // often cancels the stream a little before the server's copy of the deadline (taken
    // when the request arrived) passes, hence the slack.
    client_deadline_passed_ =
        server_ctx_->deadline() <= std::chrono::system_clock::now() + kDeadlineSlack;
    cancel = upstream_started_ && !upstream_done_;
  }
  if (cancel) {
    VLOG(1) << "request " << request_id_ << ": client cancelled, cancelling the scheduler call";
    CancelUpstream();
  }
}

void GenerationCall::ServerDone() {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    env_.metrics->RecordRequest(method_, final_code_, absl::Now() - start_);
    env_.metrics->active_streams.Add(-1);
    // Normally the scheduler's stream has ended (or is about to, after its last event);
    // cancelling makes sure a stream that lingers cannot keep this call alive.
    cancel = upstream_started_ && !upstream_done_;
  }
  if (cancel) CancelUpstream();
  Unref();
}

void GenerationCall::Unref() {
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    last = --refs_ == 0;
  }
  if (last) delete this;
}

// Generate: one GenerateResponse per scheduler event that produced tokens or text; the
// next event is read once the previous message is written.
class StreamCall final : public GenerationCall,
                         public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  StreamCall(grpc::CallbackServerContext* ctx, CallEnv env)
      : GenerationCall("Generate", ctx, std::move(env)) {}

  void Start(const pb::GenerateRequest& request) {
    absl::Status status = Begin(request);
    if (status.ok()) return;
    absl::MutexLock lock(&mu_);
    FailWith(ToGrpcStatus(status));
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (pending_finish_.has_value()) {
        Finish(*std::move(pending_finish_));
        pending_finish_.reset();
        return;
      }
      if (ok) {
        if (!finished_) ReadNext();
        return;
      }
      ReleaseHold();  // no more reads from here
    }
    // The client is gone. OnCancel follows and does the same; doing it here too does not
    // rely on that.
    ClientCancelled();
  }
  void OnCancel() override { ClientCancelled(); }
  void OnDone() override { ServerDone(); }

 private:
  void Deliver(pb::GenerateResponse chunk, bool final) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    response_ = std::move(chunk);
    if (final) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      write_in_flight_ = true;
      StartWrite(&response_);
    }
  }
  void Fail(const grpc::Status& status) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Finish only once the write in flight is done, so response_ stays untouched.
    if (write_in_flight_) {
      pending_finish_ = status;
    } else {
      Finish(status);
    }
  }

  pb::GenerateResponse response_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
};

// Complete: everything gathered into one CompleteResponse; events are read back to back.
class UnaryCall final : public GenerationCall, public grpc::ServerUnaryReactor {
 public:
  UnaryCall(grpc::CallbackServerContext* ctx, pb::CompleteResponse* response, CallEnv env)
      : GenerationCall("Complete", ctx, std::move(env)), response_(response) {}

  void Start(const pb::GenerateRequest& request) {
    absl::Status status = Begin(request);
    if (status.ok()) return;
    absl::MutexLock lock(&mu_);
    FailWith(ToGrpcStatus(status));
  }

  void OnCancel() override { ClientCancelled(); }
  void OnDone() override { ServerDone(); }

 private:
  void Deliver(pb::GenerateResponse chunk, bool final) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    response_->set_request_id(chunk.request_id());
    while (response_->choices_size() <= chunk.index()) {
      response_->add_choices()->set_index(response_->choices_size() - 1);
    }
    pb::Choice* choice = response_->mutable_choices(chunk.index());
    choice->mutable_text()->append(chunk.text());
    choice->mutable_reasoning()->append(chunk.reasoning());
    for (pb::TokenInfo& t : *chunk.mutable_tokens()) *choice->add_tokens() = std::move(t);
    // Tool call deltas joined into whole calls.
    for (const pb::ToolCall& c : chunk.tool_calls()) {
      if (!c.name().empty()) {
        *choice->add_tool_calls() = c;
      } else if (c.index() >= 0 && c.index() < choice->tool_calls_size()) {
        choice->mutable_tool_calls(c.index())->mutable_arguments()->append(c.arguments());
      }
    }
    if (chunk.finish_reason() != pb::FINISH_REASON_UNSPECIFIED) {
      choice->set_finish_reason(chunk.finish_reason());
    }
    if (chunk.cumulative_logprob() != 0.0) {
      choice->set_cumulative_logprob(chunk.cumulative_logprob());
    }
    if (!final) {
      ReadNext();
      return;
    }
    // The top-level fields are choice 0's.
    const pb::Choice& first = response_->choices(0);
    response_->set_text(first.text());
    *response_->mutable_tokens() = first.tokens();
    response_->set_finish_reason(first.finish_reason());
    *response_->mutable_tool_calls() = first.tool_calls();
    response_->set_reasoning(first.reasoning());
    *response_->mutable_usage() = chunk.usage();
    Finish(grpc::Status::OK);
  }
  void Fail(const grpc::Status& status) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Finish(status);
  }

  pb::CompleteResponse* const response_;
};

}  // namespace

grpc::ServerWriteReactor<pb::GenerateResponse>* StartGenerate(grpc::CallbackServerContext* ctx,
                                                              const pb::GenerateRequest& request,
                                                              CallEnv env) {
  auto* call = new StreamCall(ctx, std::move(env));
  call->Start(request);
  return call;
}

grpc::ServerUnaryReactor* StartComplete(grpc::CallbackServerContext* ctx,
                                        const pb::GenerateRequest& request,
                                        pb::CompleteResponse* response, CallEnv env) {
  auto* call = new UnaryCall(ctx, response, std::move(env));
  call->Start(request);
  return call;
}

}  // namespace folio::frontend

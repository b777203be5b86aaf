#include "services/frontend/http/openai_server.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/version.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "services/frontend/http/chat_page.h"
#include "services/frontend/chat/chat_template.h"
#include "services/frontend/http/generation_group.h"
#include "services/frontend/http/tokenize_api.h"
#include "services/frontend/chat/tool_call_grammar.h"

namespace folio::frontend {

using json = nlohmann::json;
using openai::Endpoint;

namespace {

constexpr char kNotReady[] = "the frontend is starting: waiting for the scheduler's cluster info";

HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorResponse(const openai::HttpError& e) {
  HttpResponse r = JsonResponse(e.http_status, e.body);
  if (e.http_status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// The control tokens among `format`'s markers, which the decoder must render for the parser
// to see them ("<|python_tag|>" and "[TOOL_CALLS]" are control tokens; "<tool_call>" is
// usually a user-defined token, text already).
std::vector<int32_t> MarkerTokens(const Tokenizer& tokenizer, ToolCallFormat format) {
  std::vector<int32_t> ids;
  for (const auto& [marker, id] : MarkerControlTokens(tokenizer, format)) ids.push_back(id);
  return ids;
}

// Runs `d` through its choice's tool-call parser: its text becomes the content and the
// calls' deltas; a choice that called a tool and stopped finishes with "tool_calls".
void ParseToolCalls(ToolCallParser& parser, openai::ChoiceDelta& d) {
  ToolParseDelta p = parser.Feed(d.text);
  if (!d.finish_reason.empty()) {
    ToolParseDelta rest = parser.Finish();
    p.content += rest.content;
    for (ToolCallDelta& c : rest.calls) {
      if (!p.calls.empty() && p.calls.back().index == c.index && c.name.empty()) {
        p.calls.back().arguments += c.arguments;
      } else {
        p.calls.push_back(std::move(c));
      }
    }
    if (d.finish_reason == "stop" && parser.num_calls() > 0) d.finish_reason = "tool_calls";
  }
  d.text = std::move(p.content);
  d.tool_calls = std::move(p.calls);
}

// Runs `d` through its choice's reasoning parser: the reasoning goes to d.reasoning and
// `d.text` keeps the rest (which a tool-call parser then reads).
void ParseReasoning(ReasoningParser& parser, openai::ChoiceDelta& d) {
  ReasoningDelta p = parser.Feed(d.text, static_cast<int32_t>(d.tokens.size()));
  if (!d.finish_reason.empty()) {
    ReasoningDelta rest = parser.Finish();
    p.reasoning += rest.reasoning;
    p.content += rest.content;
  }
  d.text = std::move(p.content);
  d.reasoning = std::move(p.reasoning);
}

// The chat page (chat_page.h). Its policy lets it run its own inline script and style and
// talk to this origin only: no other origin's code, fetches or frames, and no page may
// frame it (it holds the API key).
HttpResponse ChatPageResponse() {
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(ChatPageHtml());
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; "
                         "style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; "
                         "form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Cache-Control", "no-cache");
  return r;
}

const char* MethodName(Endpoint e) {
  return e == Endpoint::kChatCompletions ? "http_chat_completions" : "http_completions";
}

}  // namespace

// One generation in flight. Its fields are touched by the Generation's listener only (one
// update at a time), except `generation`, which is set once it has started.
struct OpenAiServer::Call {
  Endpoint endpoint = Endpoint::kCompletions;
  absl::Time start;
  std::shared_ptr<HttpExchange> exchange;
  openai::ResponseHeader header;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  // completions with echo: each prompt's text, sent first in its choices (prompt k's
  // choices are k * choices_per_prompt ...).
  std::vector<std::string> echoes;
  int32_t choices_per_prompt = 1;
  // Chat with tools: one tool-call parser per choice (none: the text is all content).
  std::vector<ToolCallParser> parsers;
  // Chat with a reasoning parser: one per choice, run before the tool-call parser.
  std::vector<ReasoningParser> reasoning_parsers;
  std::vector<openai::ChoiceDelta> choices;  // not streamed: the whole answer so far
  bool started = false;                      // streamed: the response head is out
  absl::Mutex mu;
  std::weak_ptr<GenerationGroup> generation ABSL_GUARDED_BY(mu);
};

OpenAiServer::OpenAiServer(OpenAiServerOptions options, ModelSource model,
                           std::shared_ptr<grpc::ChannelInterface> channel,
                           FrontendMetrics* metrics)
    : options_(std::move(options)),
      model_(std::move(model)),
      scheduler_(folio::internal::v1::Scheduler::NewStub(channel)),
      router_(options_.router != nullptr
                  ? options_.router
                  : std::make_shared<routing::StubRouter>(scheduler_.get())),
      scheduler_health_(grpc::health::v1::Health::NewStub(channel)),
      metrics_(metrics),
      created_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(
    OpenAiServerOptions options, ModelSource model,
    std::shared_ptr<grpc::ChannelInterface> scheduler_channel, FrontendMetrics* metrics) {
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), std::move(model),
                                                   std::move(scheduler_channel), metrics));
  const OpenAiServerOptions& o = s->options_;
  HttpServerOptions http;
  http.host = o.host;
  http.port = o.port;
  http.listen_backlog = o.listen_backlog;
  http.num_threads = o.num_threads;
  http.max_body_bytes = o.max_body_bytes;
  http.request_timeout = o.request_timeout;
  http.idle_timeout = o.idle_timeout;
  http.write_timeout = o.write_timeout;
  http.max_stream_buffer_bytes = o.max_stream_buffer_bytes;
  http.socket_send_buffer_bytes = o.socket_send_buffer_bytes;
  http.tls = o.tls;
  http.error_response = [](int status, std::string message) {
    const char* code = status == 413 ? "request_too_large" : "";
    return ErrorResponse(openai::MakeError(status, "invalid_request_error", code, message));
  };
  OpenAiServer* self = s.get();
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      std::move(http),
      [self](HttpRequest req, std::shared_ptr<HttpExchange> x) { self->Handle(std::move(req), std::move(x)); });
  if (!server.ok()) return server.status();
  s->http_ = *std::move(server);
  LOG(INFO) << "OpenAI-compatible HTTP API on " << (o.tls.has_value() ? "https://" : "http://")
            << o.host << ":" << s->http_->port()
            << (o.api_keys.enabled() ? absl::StrCat(" (", o.api_keys.size(), " API keys)") : "");
  return s;
}

OpenAiServer::~OpenAiServer() { Stop(); }

void OpenAiServer::Stop() {
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return active_.empty() && health_checks_ == 0;
  };
  std::vector<std::shared_ptr<GenerationGroup>> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    if (!mu_.AwaitWithTimeout(absl::Condition(&idle), options_.drain_timeout)) {
      LOG(WARNING) << "HTTP API: cancelling " << active_.size() << " requests at shutdown";
      for (const std::shared_ptr<Call>& c : active_) {
        absl::MutexLock call_lock(&c->mu);
        if (std::shared_ptr<GenerationGroup> g = c->generation.lock()) {
          cancel.push_back(std::move(g));
        }
      }
    }
  }
  if (!cancel.empty()) {
    // Outside the lock: cancelling may run a call's last update, which unregisters it.
    for (const std::shared_ptr<GenerationGroup>& g : cancel) g->Cancel();
    cancel.clear();
    // A cancelled call ends at once; the scheduler's health check has a 2 s deadline.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(10));
  }
  // A call's last callback may still be running after it unregistered: wait until gRPC
  // has let go of every scheduler call, so that nothing of ours is left in gRPC.
  if (!calls_.WaitIdle(absl::Seconds(10))) {
    LOG(WARNING) << "HTTP API: " << calls_.live() << " scheduler calls still in gRPC at shutdown";
  }
  // Every exchange is released once its call has ended: the HTTP server may go.
  if (http_ != nullptr) http_->Stop();
}

bool OpenAiServer::Register(const std::shared_ptr<Call>& call) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  active_.insert(call);
  metrics_->active_streams.Add(1);
  return true;
}

void OpenAiServer::Unregister(const std::shared_ptr<Call>& call) {
  absl::MutexLock lock(&mu_);
  if (active_.erase(call) > 0) metrics_->active_streams.Add(-1);
}

bool OpenAiServer::BeginHealthCheck() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  ++health_checks_;
  return true;
}

void OpenAiServer::EndHealthCheck() {
  absl::MutexLock lock(&mu_);
  --health_checks_;
}

std::string OpenAiServer::ModelName(const ModelContext& model) const {
  if (!options_.served_model_names.empty()) return options_.served_model_names.front();
  const std::string& name = model.info().model().name();
  return name.empty() ? "default" : name;
}

bool OpenAiServer::ServesModel(const ModelContext& model, const std::string& name) const {
  if (options_.served_model_names.empty()) return name == ModelName(model);
  return std::find(options_.served_model_names.begin(), options_.served_model_names.end(),
                   name) != options_.served_model_names.end();
}

std::optional<std::string> OpenAiServer::CorsOrigin(const HttpRequest& req) const {
  const std::optional<std::string_view> origin = req.header("origin");
  if (!origin.has_value() || options_.allowed_origins.empty()) return std::nullopt;
  if (options_.allowed_origins == "*") return std::string("*");
  for (absl::string_view allowed : absl::StrSplit(options_.allowed_origins, ',')) {
    const absl::string_view a = absl::StripAsciiWhitespace(allowed);
    if (std::string_view(a.data(), a.size()) == *origin) return std::string(*origin);
  }
  return std::nullopt;
}

namespace {

// An exchange whose responses (whole or streamed) carry the CORS headers.
class CorsExchange final : public HttpExchange {
 public:
  CorsExchange(std::shared_ptr<HttpExchange> inner, std::string origin)
      : inner_(std::move(inner)), origin_(std::move(origin)) {}
  void Respond(HttpResponse response) override { inner_->Respond(With(std::move(response))); }
  void StartStream(HttpResponse head, std::string cut_event) override {
    inner_->StartStream(With(std::move(head)), std::move(cut_event));
  }
  bool Write(std::string data) override { return inner_->Write(std::move(data)); }
  void EndStream() override { inner_->EndStream(); }
  void OnClose(std::function<void()> on_close) override { inner_->OnClose(std::move(on_close)); }
  bool closed() const override { return inner_->closed(); }

 private:
  HttpResponse With(HttpResponse r) const {
    r.headers.emplace_back("Access-Control-Allow-Origin", origin_);
    if (origin_ != "*") r.headers.emplace_back("Vary", "Origin");
    return r;
  }
  const std::shared_ptr<HttpExchange> inner_;
  const std::string origin_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const ChatTemplate>> OpenAiServer::TemplateFor(
    const std::shared_ptr<const ModelContext>& model, bool has_tools) {
  {
    absl::MutexLock lock(&mu_);
    if (template_model_ != model) {
      template_model_ = model;
      template_ = nullptr;
      tools_template_ = nullptr;
    }
    const std::shared_ptr<const ChatTemplate>& cached = has_tools ? tools_template_ : template_;
    if (cached != nullptr) return cached;
  }
  const Tokenizer& tok = model->tokenizer();
  auto piece = [&](int32_t id) {
    absl::StatusOr<std::string_view> p = tok.TokenToPiece(id);
    return p.ok() ? std::string(*p) : std::string();
  };
  const folio::internal::v1::TokenizerSpec& spec = model->info().tokenizer();
  const std::map<std::string, std::string> named(spec.named_chat_templates().begin(),
                                                 spec.named_chat_templates().end());
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Create(SelectChatTemplate(spec.chat_template(), named, has_tools),
                           piece(tok.bos_id()), piece(tok.eos_id()));
  if (!t.ok()) {
    return absl::InternalError(
        absl::StrCat("the model's chat template cannot be used: ", t.status().message()));
  }
  auto shared = std::make_shared<const ChatTemplate>(*std::move(t));
  absl::MutexLock lock(&mu_);
  if (template_model_ == model) (has_tools ? tools_template_ : template_) = shared;
  return shared;
}

void OpenAiServer::Handle(HttpRequest req, std::shared_ptr<HttpExchange> x) {
  struct Route {
    const char* path;
    const char* method;
  };
  static constexpr Route kRoutes[] = {{"/v1/completions", "POST"},
                                      {"/v1/chat/completions", "POST"},
                                      {"/v1/models", "GET"},
                                      {"/health", "GET"},
                                      {"/metrics", "GET"},
                                      {"/version", "GET"},
                                      {"/tokenize", "POST"},
                                      {"/detokenize", "POST"},
                                      {"/", "GET"},
                                      {"/index.html", "GET"}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (req.path == r.path) route = &r;
  }
  if (std::optional<std::string> origin = CorsOrigin(req)) {
    if (route != nullptr && req.method == "OPTIONS" &&
        req.header("access-control-request-method").has_value()) {
      // A browser's preflight: it carries no credentials, so no API key is asked for.
      HttpResponse r;
      r.status = 204;
      r.content_type.clear();
      r.headers.emplace_back("Access-Control-Allow-Origin", *origin);
      if (*origin != "*") r.headers.emplace_back("Vary", "Origin");
      r.headers.emplace_back("Access-Control-Allow-Methods", absl::StrCat(route->method, ", OPTIONS"));
      const std::optional<std::string_view> asked = req.header("access-control-request-headers");
      r.headers.emplace_back("Access-Control-Allow-Headers",
                             asked.has_value() ? std::string(*asked)
                                               : "authorization, content-type, x-request-id");
      r.headers.emplace_back("Access-Control-Max-Age", "600");
      return x->Respond(std::move(r));
    }
    x = std::make_shared<CorsExchange>(std::move(x), *std::move(origin));
  }
  // The chat page is open too: it holds no data, and its API calls carry the key the user
  // types into it.
  const bool chat_page = req.path == "/" || req.path == "/index.html";
  const bool open =
      chat_page || req.path == "/health" || req.path == "/metrics" || req.path == "/version";
  if (!open && options_.api_keys.enabled()) {
    const absl::Status st = options_.api_keys.Check(req.header("authorization"));
    if (!st.ok()) return x->Respond(ErrorResponse(openai::ErrorFromStatus(st)));
  }
  if (route != nullptr) {
    if (req.method != route->method) {
      HttpResponse r = ErrorResponse(openai::MakeError(
          405, "invalid_request_error", "",
          absl::StrCat("method ", req.method, " is not allowed on ", req.path)));
      r.headers.emplace_back("Allow", route->method);
      return x->Respond(std::move(r));
    }
    if (req.path == "/v1/completions") return HandleGenerate(Endpoint::kCompletions, req, x);
    if (req.path == "/v1/chat/completions") {
      return HandleGenerate(Endpoint::kChatCompletions, req, x);
    }
    if (req.path == "/v1/models") return HandleModels(*x);
    if (chat_page) return x->Respond(ChatPageResponse());
    if (req.path == "/tokenize" || req.path == "/detokenize") {
      std::shared_ptr<const ModelContext> model = model_();
      if (model == nullptr) {
        return x->Respond(
            ErrorResponse(openai::ErrorFromStatus(absl::UnavailableError(kNotReady))));
      }
      absl::StatusOr<json> out =
          req.path == "/tokenize"
              ? TokenizeBody(*model, req.body, [&] { return TemplateFor(model, false); })
              : DetokenizeBody(*model, req.body);
      if (!out.ok()) return x->Respond(ErrorResponse(openai::ErrorFromStatus(out.status())));
      return x->Respond(JsonResponse(200, *out));
    }
    if (req.path == "/version") {
      return x->Respond(JsonResponse(200, {{"version", kVersionNumber}, {"revision", kGitRevision}}));
    }
    if (req.path == "/metrics") {
      if (!options_.metrics_text) {
        return x->Respond(ErrorResponse(openai::MakeError(
            404, "invalid_request_error", "unknown_url", "this server has no /metrics")));
      }
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = options_.metrics_text();
      return x->Respond(std::move(r));
    }
    return HandleHealth(std::move(x));
  }
  x->Respond(ErrorResponse(openai::MakeError(
      404, "invalid_request_error", "unknown_url",
      absl::StrCat("no such endpoint: ", req.method, " ", req.path))));
}

void OpenAiServer::HandleModels(HttpExchange& x) {
  std::shared_ptr<const ModelContext> model = model_();
  if (model == nullptr) {
    return x.Respond(ErrorResponse(openai::ErrorFromStatus(absl::UnavailableError(kNotReady))));
  }
  json entry = {{"id", ModelName(*model)},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "folio"},
                {"max_model_len", model->info().max_model_len()},
                {"bos_token_id", model->tokenizer().bos_id()},
                {"eos_token_id", model->tokenizer().eos_id()},
                {"eog_token_ids", model->tokenizer().eog_ids()},
                {"stored_type", model->info().model().stored_type()}};
  // One entry per served name (--served_model_name), the first as the model's id.
  json data = json::array({entry});
  for (size_t i = 1; i < options_.served_model_names.size(); ++i) {
    json alias = entry;
    alias["id"] = options_.served_model_names[i];
    data.push_back(std::move(alias));
  }
  x.Respond(JsonResponse(200, {{"object", "list"}, {"data", std::move(data)}}));
}

void OpenAiServer::HandleHealth(std::shared_ptr<HttpExchange> x) {
  if (model_() == nullptr) {
    return x->Respond(ErrorResponse(openai::ErrorFromStatus(absl::UnavailableError(kNotReady))));
  }
  if (options_.replicas_serving) {
    if (!options_.replicas_serving()) {
      return x->Respond(ErrorResponse(
          openai::ErrorFromStatus(absl::UnavailableError("no replica is serving"))));
    }
    return x->Respond(JsonResponse(200, {{"status", "ok"}}));
  }
  if (!BeginHealthCheck()) {
    return x->Respond(ErrorResponse(
        openai::ErrorFromStatus(absl::UnavailableError("the frontend is shutting down"))));
  }
  struct Check {
    CallTracker::Hold hold;  // first: released after the context is gone
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
  };
  auto check = std::make_shared<Check>();
  check->hold = CallTracker::Enter(&calls_);
  check->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  scheduler_health_->async()->Check(
      &check->ctx, &check->request, &check->response,
      [this, check, x](grpc::Status status) {
        if (!status.ok() ||
            check->response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
          x->Respond(ErrorResponse(openai::ErrorFromStatus(absl::UnavailableError(absl::StrCat(
              "the scheduler is not serving",
              status.ok() ? "" : absl::StrCat(": ", status.error_message()))))));
        } else {
          x->Respond(JsonResponse(200, {{"status", "ok"}}));
        }
        EndHealthCheck();
      });
}

void OpenAiServer::HandleGenerate(Endpoint endpoint, const HttpRequest& req,
                                  std::shared_ptr<HttpExchange> x) {
  const absl::Time start = absl::Now();
  auto fail = [&](const absl::Status& status) {
    metrics_->RecordRequest(MethodName(endpoint), status.code(), absl::Now() - start);
    x->Respond(ErrorResponse(openai::ErrorFromStatus(status)));
  };
  absl::StatusOr<openai::Request> parsed = openai::ParseRequest(endpoint, req.body);
  if (!parsed.ok()) return fail(parsed.status());
  openai::Request& r = *parsed;
  std::shared_ptr<const ModelContext> model = model_();
  if (model == nullptr) return fail(absl::UnavailableError(kNotReady));
  const std::string served = ModelName(*model);
  if (!r.model.empty() && !ServesModel(*model, r.model)) {
    return fail(absl::NotFoundError(absl::StrCat("the model '", r.model,
                                                 "' does not exist; this server serves '",
                                                 served, "'")));
  }
  if (std::optional<std::string_view> id = req.header("x-request-id")) {
    r.input.request_id = std::string(*id);
  }
  std::optional<ToolCallFormat> tool_format;
  std::optional<ReasoningStart> reasoning_start;  // set: split out the <think> reasoning
  if (endpoint == Endpoint::kChatCompletions) {
    // Tools are rendered into the prompt by the template; the model's calls are parsed out
    // of its output in the template family's format (or --tool_call_parser's).
    const bool has_tools = r.has_tools;
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = TemplateFor(model, has_tools);
    if (!t.ok()) return fail(t.status());
    using Mode = openai::ToolChoice::Mode;
    if (has_tools && r.tool_choice.mode != Mode::kNone) {
      tool_format = options_.tool_call_parser.has_value() ? options_.tool_call_parser
                                                          : (*t)->tool_call_format();
    }
    if (r.tool_choice.mode == Mode::kRequired || r.tool_choice.mode == Mode::kFunction) {
      // Enforced: the grammar of the format's call with the functions' parameter schemas.
      if (!tool_format.has_value()) {
        return fail(absl::InvalidArgumentError(
            "tool_choice needs a tool-call format, and the model's chat template shows none "
            "(start the frontend with --tool_call_parser)"));
      }
      if (r.input.structured.kind != structured::StructuredOutput::Kind::kNone) {
        return fail(absl::InvalidArgumentError(
            "tool_choice \"required\" or a named function and response_format (or regex, "
            "grammar) both constrain the output; give one"));
      }
      absl::StatusOr<std::string> grammar = ToolCallGrammar(
          *tool_format, r.tools,
          r.tool_choice.mode == Mode::kFunction ? r.tool_choice.function : "",
          r.parallel_tool_calls);
      if (!grammar.ok()) return fail(grammar.status());
      r.input.structured.kind = structured::StructuredOutput::Kind::kGrammar;
      r.input.structured.text = *std::move(grammar);
    } else if (r.tool_choice.mode == Mode::kAuto && tool_format.has_value() &&
               r.input.structured.kind == structured::StructuredOutput::Kind::kNone) {
      // "auto": free text, but a call the model opens (its format's marker) is held to the
      // tools' grammar from the marker on: a lazy grammar the scheduler switches on per
      // choice. With response_format as well, response_format constrains instead.
      absl::StatusOr<LazyToolCallGrammar> lazy =
          AutoToolCallGrammar(*tool_format, r.tools, r.parallel_tool_calls,
                              MarkerControlTokens(model->tokenizer(), *tool_format));
      if (!lazy.ok()) return fail(lazy.status());
      r.input.structured.kind = structured::StructuredOutput::Kind::kGrammar;
      r.input.structured.text = std::move(lazy->grammar);
      r.input.grammar_triggers = std::move(lazy->triggers);
    }
    absl::StatusOr<std::string> prompt = (*t)->Render(r.chat);
    if (!prompt.ok()) return fail(prompt.status());
    if (options_.reasoning_parser == ReasoningParserMode::kThink ||
        (options_.reasoning_parser == ReasoningParserMode::kAuto && (*t)->mentions_think())) {
      // A prompt ending in <think> (DeepSeek-R1, Qwen3-Thinking) starts the output inside.
      reasoning_start = ReasoningStartOfPrompt(*prompt);
      // A constrained answer (response_format, a required or named tool call) is held to
      // the content after the reasoning.
      if (absl::Status s = ConstrainAfterReasoning(*reasoning_start, &r.input); !s.ok()) {
        return fail(s);
      }
    }
    absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(model->tokenizer(), *prompt);
    if (!ids.ok()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("messages: ", ids.status().message())));
    }
    r.input.prompt_token_ids = *std::move(ids);
  }
  // A list of prompts: each is validated as a request of its own (the sampling shared).
  std::vector<ValidatedRequest> requests;
  std::vector<GenerateInput> inputs;
  if (r.prompts.empty()) {
    inputs.push_back(r.input);
  } else {
    for (const openai::PromptInput& p : r.prompts) {
      GenerateInput in = r.input;
      in.prompt = p.text;
      in.prompt_token_ids = p.token_ids;
      inputs.push_back(std::move(in));
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs.size() > 1 && !r.input.request_id.empty()) {
      inputs[k].request_id = absl::StrCat(r.input.request_id, "-", k);
    }
    absl::StatusOr<ValidatedRequest> v = model->validator().Validate(inputs[k]);
    if (!v.ok()) {
      if (inputs.size() == 1) return fail(v.status());
      return fail(absl::Status(v.status().code(),
                               absl::StrCat("prompt[", k, "]: ", v.status().message())));
    }
    requests.push_back(*std::move(v));
  }
  const ValidatedRequest* validated = &requests[0];
  const int32_t num_choices = validated->n * static_cast<int32_t>(requests.size());

  auto call = std::make_shared<Call>();
  call->endpoint = endpoint;
  call->start = start;
  call->exchange = x;
  call->header.id = absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                                 validated->request_id);
  call->header.created = absl::ToUnixSeconds(start);
  call->header.model = served;
  call->header.endpoint = endpoint;
  call->header.logprobs = validated->logprobs.has_value();
  call->n = num_choices;
  call->choices_per_prompt = validated->n;
  call->stream = r.stream;
  std::vector<int32_t> preserved;
  if (tool_format.has_value()) {
    preserved = MarkerTokens(model->tokenizer(), *tool_format);
    ToolCallParserOptions po;
    po.format = *tool_format;
    if (!r.parallel_tool_calls) po.max_calls = 1;
    call->parsers.reserve(static_cast<size_t>(num_choices));
    for (int32_t i = 0; i < num_choices; ++i) call->parsers.emplace_back(po);
  }
  if (reasoning_start.has_value()) {
    call->reasoning_parsers.assign(static_cast<size_t>(num_choices),
                                   ReasoningParser(*reasoning_start));
  }
  call->include_usage = r.include_usage;
  if (r.echo) {
    for (const GenerateInput& in : inputs) {
      if (!in.prompt.empty() || in.prompt_token_ids.empty()) {
        call->echoes.push_back(in.prompt);
      } else {
        absl::StatusOr<std::string> text = model->tokenizer().Decode(in.prompt_token_ids);
        call->echoes.push_back(text.ok() ? *text : std::string());
      }
    }
  }
  if (!call->stream) {
    call->choices.resize(static_cast<size_t>(num_choices));
    for (int32_t i = 0; i < num_choices; ++i) {
      call->choices[i].index = i;
      if (!call->echoes.empty()) call->choices[i].text = call->echoes[i / validated->n];
    }
  }
  if (!Register(call)) return fail(absl::UnavailableError("the frontend is shutting down"));
  for (const ValidatedRequest& v : requests) {
    metrics_->prompt_tokens.Increment(static_cast<double>(v.prompt_token_ids.size()));
  }
  VLOG(1) << "request " << validated->request_id << ": " << MethodName(endpoint) << ", "
          << requests.size() << " prompt(s), " << validated->prompt_token_ids.size()
          << " tokens in the first";
  std::shared_ptr<GenerationGroup> gen = GenerationGroup::Start(
      model, router_.get(), requests, validated->n, options_.resume, &calls_,
      [this, call](Generation::Update u) { OnUpdate(call, std::move(u)); },
      std::move(preserved));
  {
    absl::MutexLock lock(&call->mu);
    call->generation = gen;
  }
  // The client leaving (or a stream cut for a slow reader) cancels the scheduler call.
  std::weak_ptr<GenerationGroup> weak = gen;
  x->OnClose([weak, id = call->header.id] {
    if (std::shared_ptr<GenerationGroup> g = weak.lock()) {
      LOG(INFO) << "request " << id << ": the HTTP client went away; cancelled";
      g->Cancel();
    }
  });
  bool stopping = false;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  if (stopping) gen->Cancel();  // Stop() may have looked before the generation was set
}

void OpenAiServer::OnUpdate(const std::shared_ptr<Call>& call, Generation::Update u) {
  HttpExchange& x = *call->exchange;
  auto finish = [&](absl::StatusCode code) {
    metrics_->streamed_tokens.Increment(u.usage.completion_tokens);
    metrics_->RecordRequest(MethodName(call->endpoint), code, absl::Now() - call->start);
    call->exchange.reset();
    Unregister(call);
  };
  if (!call->reasoning_parsers.empty()) {
    for (openai::ChoiceDelta& d : u.deltas) ParseReasoning(call->reasoning_parsers[d.index], d);
    if (u.done) {
      int32_t reasoning_tokens = 0;
      for (const ReasoningParser& p : call->reasoning_parsers) {
        reasoning_tokens += p.reasoning_tokens();
      }
      u.usage.reasoning_tokens = reasoning_tokens;
    }
  }
  if (!call->parsers.empty()) {
    for (openai::ChoiceDelta& d : u.deltas) ParseToolCalls(call->parsers[d.index], d);
  }
  if (!call->stream) {
    for (openai::ChoiceDelta& d : u.deltas) {
      openai::ChoiceDelta& c = call->choices[d.index];
      c.text += d.text;
      c.reasoning += d.reasoning;
      for (ToolCallDelta& t : d.tool_calls) {
        if (!t.name.empty()) {
          c.tool_calls.push_back(std::move(t));
        } else if (!c.tool_calls.empty()) {
          c.tool_calls.back().arguments += t.arguments;
        }
      }
      for (openai::TokenOut& t : d.tokens) c.tokens.push_back(std::move(t));
      if (!d.finish_reason.empty()) c.finish_reason = d.finish_reason;
    }
    if (!u.done) return;
    if (!u.status.ok()) {
      x.Respond(ErrorResponse(openai::ErrorFromStatus(u.status)));
    } else {
      x.Respond(JsonResponse(200, openai::BuildResponse(call->header, call->choices, u.usage)));
    }
    return finish(u.status.code());
  }

  // Streaming. The response starts with the first update, so that errors the scheduler
  // reports at once (queue full, no replica) get their own HTTP status rather than an
  // error event in a 200 stream.
  auto write_deltas = [&](std::vector<openai::ChoiceDelta> deltas) {
    // A tool-call or reasoning parser may hold a delta's whole text back: nothing to send
    // for it.
    std::erase_if(deltas, [](const openai::ChoiceDelta& d) {
      return d.text.empty() && d.tokens.empty() && d.finish_reason.empty() &&
             d.tool_calls.empty() && d.reasoning.empty();
    });
    if (deltas.empty()) return;
    x.Write(openai::SseEvent(openai::BuildChunk(call->header, deltas, call->include_usage)));
  };
  if (!call->started) {
    if (u.done && !u.status.ok()) {
      x.Respond(ErrorResponse(openai::ErrorFromStatus(u.status)));
      return finish(u.status.code());
    }
    call->started = true;
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    x.StartStream(std::move(head),
                  openai::SseEvent(openai::MakeError(
                      503, "server_error", "stream_cut",
                      absl::StrCat("the client read the stream too slowly (more than ",
                                   options_.max_stream_buffer_bytes,
                                   " bytes unread); the request was cancelled"))
                                       .body));
    if (call->endpoint == Endpoint::kChatCompletions) {
      x.Write(openai::SseEvent(openai::BuildRoleChunk(call->header, call->n, call->include_usage)));
    } else if (!call->echoes.empty()) {
      std::vector<openai::ChoiceDelta> echo(static_cast<size_t>(call->n));
      for (int32_t i = 0; i < call->n; ++i) {
        echo[i].index = i;
        echo[i].text = call->echoes[i / call->choices_per_prompt];
      }
      write_deltas(std::move(echo));
    }
  }
  write_deltas(std::move(u.deltas));
  if (!u.done) return;
  if (!u.status.ok()) {
    // The response has started: the error travels as an event, as OpenAI's does.
    x.Write(openai::SseEvent(openai::ErrorFromStatus(u.status).body));
  } else if (call->include_usage) {
    x.Write(openai::SseEvent(openai::BuildUsageChunk(call->header, u.usage)));
  }
  x.Write(openai::kSseDone);
  const bool complete = !x.closed();
  x.EndStream();
  finish(complete ? u.status.code() : absl::StatusCode::kCancelled);
}

}  // namespace folio::frontend

#include "services/frontend/http/openai_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "httplib.h"
#include "services/frontend/http/chat_template.h"
#include "services/frontend/http/generation.h"
#include "services/frontend/http/openai_json.h"

namespace folio::frontend {
namespace {

using json = nlohmann::json;
using openai::Endpoint;

constexpr char kJson[] = "application/json";
constexpr char kNotReady[] = "the frontend is starting: waiting for the scheduler's cluster info";

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

void SendError(httplib::Response& res, const openai::HttpError& e) {
  if (e.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  SendJson(res, e.http_status, e.body);
}

const char* MethodName(Endpoint e) {
  return e == Endpoint::kChatCompletions ? "http_chat_completions" : "http_completions";
}

// Per stream: the generation and what the SSE writer still has to send.
struct StreamState {
  std::unique_ptr<Generation> generation;
  openai::ResponseHeader header;
  int32_t n = 1;
  bool include_usage = false;
  std::string echo;                         // completions: the prompt, sent first
  std::vector<openai::ChoiceDelta> pending;  // read before the response started
  bool started = false;
  bool finished = false;
};

}  // namespace

OpenAiServer::OpenAiServer(OpenAiServerOptions options, ModelSource model,
                           std::shared_ptr<grpc::ChannelInterface> channel,
                           FrontendMetrics* metrics)
    : options_(std::move(options)),
      model_(std::move(model)),
      scheduler_(folio::internal::v1::Scheduler::NewStub(channel)),
      scheduler_health_(grpc::health::v1::Health::NewStub(channel)),
      metrics_(metrics),
      created_(absl::ToUnixSeconds(absl::Now())),
      http_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(
    OpenAiServerOptions options, ModelSource model,
    std::shared_ptr<grpc::ChannelInterface> scheduler_channel, FrontendMetrics* metrics) {
  std::unique_ptr<OpenAiServer> s(new OpenAiServer(std::move(options), std::move(model),
                                                   std::move(scheduler_channel), metrics));
  httplib::Server& http = *s->http_;
  OpenAiServer* self = s.get();
  const int threads = std::max(1, s->options_.num_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(s->options_.max_body_bytes);
  http.set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || !self->options_.api_keys.enabled()) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::optional<std::string> auth;  // owns the value: get_header_value returns a copy
    if (req.has_header("Authorization")) auth = req.get_header_value("Authorization");
    const absl::Status st = self->options_.api_keys.Check(
        auth.has_value() ? std::optional<std::string_view>(*auth) : std::nullopt);
    if (!st.ok()) {
      SendError(res, openai::ErrorFromStatus(st));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own errors (no route, body too large, a request it cannot parse) come with
  // an empty body; give them OpenAI's error object. Handlers' errors keep their body.
  const size_t max_body = s->options_.max_body_bytes;
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    std::string code;
    switch (res.status) {
      case 404:
        message = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
        code = "unknown_url";
        break;
      case 413:
        message = absl::StrCat("the request body is larger than ", max_body, " bytes");
        code = "request_too_large";
        break;
      case 405:
        message = absl::StrCat("method ", req.method, " is not allowed on ", req.path);
        break;
      default:
        message = absl::StrCat("the HTTP request could not be served (status ", res.status, ")");
        break;
    }
    const int status = res.status;
    SendJson(res, status, openai::MakeError(status, "invalid_request_error", code, message).body);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.Post("/v1/completions", [self](const httplib::Request& req, httplib::Response& res) {
    self->HandleGenerate(static_cast<int>(Endpoint::kCompletions), req, res);
  });
  http.Post("/v1/chat/completions", [self](const httplib::Request& req, httplib::Response& res) {
    self->HandleGenerate(static_cast<int>(Endpoint::kChatCompletions), req, res);
  });
  http.Get("/v1/models", [self](const httplib::Request& req, httplib::Response& res) {
    self->HandleModels(req, res);
  });
  http.Get("/health", [self](const httplib::Request& req, httplib::Response& res) {
    self->HandleHealth(req, res);
  });

  const std::string& host = s->options_.host;
  if (s->options_.port == 0) {
    s->port_ = http.bind_to_any_port(host);
  } else {
    s->port_ = http.bind_to_port(host, s->options_.port) ? s->options_.port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the HTTP API to ", host, ":", s->options_.port));
  }
  s->thread_ = std::thread([self] { self->http_->listen_after_bind(); });
  LOG(INFO) << "OpenAI-compatible HTTP API on " << host << ":" << s->port_
            << (s->options_.api_keys.enabled()
                    ? absl::StrCat(" (", s->options_.api_keys.size(), " API keys)")
                    : "");
  return s;
}

OpenAiServer::~OpenAiServer() { Stop(); }

void OpenAiServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&idle), options_.drain_timeout)) {
      LOG(WARNING) << "HTTP API: cancelling " << active_.size() << " requests at shutdown";
    }
    for (Generation* g : active_) g->Cancel();
  }
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

bool OpenAiServer::Register(Generation* g) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  active_.insert(g);
  metrics_->active_streams.Add(1);
  return true;
}

void OpenAiServer::Unregister(Generation* g) {
  absl::MutexLock lock(&mu_);
  if (active_.erase(g) > 0) metrics_->active_streams.Add(-1);
}

std::string OpenAiServer::ModelName(const ModelContext& model) const {
  const std::string& name = model.info().model().name();
  return name.empty() ? "default" : name;
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> OpenAiServer::TemplateFor(
    const std::shared_ptr<const ModelContext>& model) {
  {
    absl::MutexLock lock(&mu_);
    if (template_model_ == model && template_ != nullptr) return template_;
  }
  const Tokenizer& tok = model->tokenizer();
  auto piece = [&](int32_t id) {
    absl::StatusOr<std::string_view> p = tok.TokenToPiece(id);
    return p.ok() ? std::string(*p) : std::string();
  };
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
      model->info().tokenizer().chat_template(), piece(tok.bos_id()), piece(tok.eos_id()));
  if (!t.ok()) {
    return absl::InternalError(
        absl::StrCat("the model's chat template cannot be used: ", t.status().message()));
  }
  auto shared = std::make_shared<const ChatTemplate>(*std::move(t));
  absl::MutexLock lock(&mu_);
  template_model_ = model;
  template_ = shared;
  return shared;
}

void OpenAiServer::HandleModels(const httplib::Request&, httplib::Response& res) {
  std::shared_ptr<const ModelContext> model = model_();
  if (model == nullptr) {
    SendError(res, openai::ErrorFromStatus(absl::UnavailableError(kNotReady)));
    return;
  }
  json entry = {{"id", ModelName(*model)},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "folio"},
                {"max_model_len", model->info().max_model_len()},
                {"bos_token_id", model->tokenizer().bos_id()},
                {"eos_token_id", model->tokenizer().eos_id()},
                {"eog_token_ids", model->tokenizer().eog_ids()}};
  SendJson(res, 200, {{"object", "list"}, {"data", json::array({entry})}});
}

void OpenAiServer::HandleHealth(const httplib::Request&, httplib::Response& res) {
  if (model_() == nullptr) {
    SendError(res, openai::ErrorFromStatus(absl::UnavailableError(kNotReady)));
    return;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status status =
      scheduler_health_->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!status.ok() || resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    SendError(res, openai::ErrorFromStatus(absl::UnavailableError(absl::StrCat(
                       "the scheduler is not serving",
                       status.ok() ? "" : absl::StrCat(": ", status.error_message())))));
    return;
  }
  SendJson(res, 200, {{"status", "ok"}});
}

void OpenAiServer::HandleGenerate(int endpoint_int, const httplib::Request& req,
                                  httplib::Response& res) {
  const Endpoint endpoint = static_cast<Endpoint>(endpoint_int);
  const absl::Time start = absl::Now();
  auto fail = [&](const absl::Status& status) {
    metrics_->RecordRequest(MethodName(endpoint), status.code(), absl::Now() - start);
    SendError(res, openai::ErrorFromStatus(status));
  };
  absl::StatusOr<openai::Request> parsed = openai::ParseRequest(endpoint, req.body);
  if (!parsed.ok()) return fail(parsed.status());
  openai::Request& r = *parsed;
  std::shared_ptr<const ModelContext> model = model_();
  if (model == nullptr) return fail(absl::UnavailableError(kNotReady));
  const std::string served = ModelName(*model);
  if (!r.model.empty() && r.model != served) {
    return fail(absl::NotFoundError(absl::StrCat("the model '", r.model,
                                                 "' does not exist; this server serves '",
                                                 served, "'")));
  }
  if (req.has_header("X-Request-Id")) r.input.request_id = req.get_header_value("X-Request-Id");
  if (endpoint == Endpoint::kChatCompletions) {
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = TemplateFor(model);
    if (!t.ok()) return fail(t.status());
    absl::StatusOr<std::string> prompt = (*t)->Render(r.messages, r.add_generation_prompt);
    if (!prompt.ok()) return fail(prompt.status());
    absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(model->tokenizer(), *prompt);
    if (!ids.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("messages: ", ids.status().message())));
    r.input.prompt_token_ids = *std::move(ids);
  }
  absl::StatusOr<ValidatedRequest> validated = model->validator().Validate(r.input);
  if (!validated.ok()) return fail(validated.status());

  auto state = std::make_shared<StreamState>();
  state->header.id = absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                                  validated->request_id);
  state->header.created = absl::ToUnixSeconds(start);
  state->header.model = served;
  state->header.endpoint = endpoint;
  state->header.logprobs = validated->logprobs.has_value();
  state->n = r.n;
  state->include_usage = r.include_usage;
  if (r.echo) {
    if (!r.input.prompt.empty() || r.input.prompt_token_ids.empty()) {
      state->echo = r.input.prompt;
    } else {
      absl::StatusOr<std::string> text = model->tokenizer().Decode(r.input.prompt_token_ids);
      state->echo = text.ok() ? *text : std::string();
    }
  }
  metrics_->prompt_tokens.Increment(static_cast<double>(validated->prompt_token_ids.size()));
  state->generation =
      std::make_unique<Generation>(*model, scheduler_.get(), *validated, r.n);
  Generation* gen = state->generation.get();
  if (!Register(gen)) {
    gen->Cancel();
    return fail(absl::UnavailableError("the frontend is shutting down"));
  }
  VLOG(1) << "request " << validated->request_id << ": " << MethodName(endpoint) << ", "
          << validated->prompt_token_ids.size() << " prompt tokens";

  if (!r.stream) {
    std::vector<openai::ChoiceDelta> choices(static_cast<size_t>(r.n));
    for (int32_t i = 0; i < r.n; ++i) {
      choices[i].index = i;
      choices[i].text = state->echo;
    }
    std::vector<openai::ChoiceDelta> deltas;
    absl::Status status;
    while (!gen->done()) {
      status = gen->Next(&deltas);
      if (!status.ok()) break;
      for (openai::ChoiceDelta& d : deltas) {
        openai::ChoiceDelta& c = choices[d.index];
        c.text += d.text;
        for (openai::TokenOut& t : d.tokens) c.tokens.push_back(std::move(t));
        if (!d.finish_reason.empty()) c.finish_reason = d.finish_reason;
      }
    }
    const openai::Usage usage = gen->usage();
    const openai::ResponseHeader header = state->header;
    state.reset();  // ends the scheduler call before answering
    Unregister(gen);
    if (!status.ok()) return fail(status);
    metrics_->streamed_tokens.Increment(usage.completion_tokens);
    metrics_->RecordRequest(MethodName(endpoint), absl::StatusCode::kOk, absl::Now() - start);
    SendJson(res, 200, openai::BuildResponse(header, choices, usage));
    return;
  }

  // Streaming. The first event is read before the response starts, so that errors the
  // scheduler reports at once (queue full, no replica, n > 1 unsupported) get their own
  // HTTP status rather than an error event in a 200 stream.
  absl::Status first = gen->Next(&state->pending);
  if (!first.ok()) {
    state.reset();
    Unregister(gen);
    return fail(first);
  }
  FrontendMetrics* metrics = metrics_;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto write_deltas = [&](const std::vector<openai::ChoiceDelta>& deltas) {
          if (deltas.empty()) return true;
          return write(openai::SseEvent(openai::BuildChunk(state->header, deltas, state->include_usage)));
        };
        if (!state->started) {
          state->started = true;
          if (state->header.endpoint == Endpoint::kChatCompletions) {
            if (!write(openai::SseEvent(openai::BuildRoleChunk(state->header, state->n, state->include_usage)))) return false;
          } else if (!state->echo.empty()) {
            std::vector<openai::ChoiceDelta> echo(static_cast<size_t>(state->n));
            for (int32_t i = 0; i < state->n; ++i) {
              echo[i].index = i;
              echo[i].text = state->echo;
            }
            if (!write_deltas(echo)) return false;
          }
          if (!write_deltas(state->pending)) return false;
        } else {
          std::vector<openai::ChoiceDelta> deltas;
          absl::Status status = state->generation->Next(&deltas);
          if (!status.ok()) {
            // The response has started: the error travels as an event, as OpenAI's does.
            write(openai::SseEvent(openai::ErrorFromStatus(status).body));
            write(openai::kSseDone);
            state->finished = true;
            sink.done();
            return true;
          }
          if (!write_deltas(deltas)) return false;
        }
        if (state->generation->done()) {
          if (state->include_usage &&
              !write(openai::SseEvent(openai::BuildUsageChunk(state->header, state->generation->usage())))) {
            return false;
          }
          if (!write(openai::kSseDone)) return false;
          state->finished = true;
          sink.done();
        }
        return true;
      },
      [this, state, gen, metrics, endpoint, start](bool success) {
        // A client that went away (success false, or the stream not finished) cancels
        // its request; the Generation's destructor waits for the scheduler call to end.
        const bool complete = success && state->finished;
        if (!complete) gen->Cancel();
        metrics->streamed_tokens.Increment(state->generation->usage().completion_tokens);
        metrics->RecordRequest(MethodName(endpoint),
                               complete ? absl::StatusCode::kOk : absl::StatusCode::kCancelled,
                               absl::Now() - start);
        if (!complete) {
          LOG(INFO) << "request " << state->header.id << ": the HTTP client went away; cancelled";
        }
        state->generation.reset();
        Unregister(gen);
      });
}

}  // namespace folio::frontend

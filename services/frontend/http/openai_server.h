// OpenAiServer: the OpenAI-compatible HTTP API of the frontend (docs/http-api.md).
//
//   POST /v1/completions       text or token-id prompt, streamed (SSE) or not
//   POST /v1/chat/completions  messages through the model's chat template (chat_template.h);
//                              with tools, the model's calls parsed out of its output
//                              (tool_call_parser.h) as OpenAI's tool_calls; a reasoning
//                              model's <think> part as reasoning_content (reasoning_parser.h)
//   GET  /v1/models            the served model
//   GET  /health               200 only when the model is known and the scheduler serves
//   GET  / and /index.html     the chat page (chat_page.h), open even with API keys
//
// Requests are parsed at the edge (openai_json.h), validated by the same RequestValidator
// as the gRPC API and run through the scheduler (generation.h). Errors are OpenAI error
// objects with the HTTP status of their kind (400, 401, 404, 405, 413, 429, 501, 503...).
//
// Everything is asynchronous: the HTTP server (http_server.h, Boost.Beast) runs on a few
// I/O threads and the scheduler stream on gRPC's callback threads; nothing waits. A client
// that goes away (streaming or not), or a streaming client that falls too far behind,
// cancels its scheduler call at once, so the request's blocks are freed.
//
// Thread-safe. Stop() is idempotent; the destructor calls it.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "services/frontend/api_keys.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/frontend_metrics.h"
#include "services/frontend/call_tracker.h"
#include "services/frontend/http/generation.h"
#include "services/frontend/http/http_server.h"
#include "services/frontend/http/openai_json.h"
#include "services/frontend/chat/reasoning_parser.h"
#include "services/frontend/routing/stream_router.h"

namespace folio::frontend {

class ChatTemplate;

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0 picks a free port
  size_t max_body_bytes = 1 << 20;       // larger request bodies get 413
  int num_threads = 2;                   // HTTP I/O threads (connections are not threads)
  int listen_backlog = 4096;             // queued new connections (a burst's size)
  absl::Duration request_timeout = absl::Seconds(10);  // a request's head and body
  absl::Duration idle_timeout = absl::Seconds(60);     // keep-alive between requests
  absl::Duration write_timeout = absl::Seconds(30);    // a reader that takes nothing
  size_t max_stream_buffer_bytes = 1 << 20;  // a stream's unread bytes before it is cut
  int socket_send_buffer_bytes = 0;          // SO_SNDBUF per connection; 0: the kernel's
  std::optional<TlsFiles> tls;           // HTTPS (and client certificates with a CA)
  ApiKeys api_keys;                      // none: no authentication
  absl::Duration drain_timeout = absl::Seconds(10);  // Stop() waits this long for requests
  ResumeOptions resume;  // a stream whose scheduler is lost (resumable_stream.h)
  // The tool-call parser of chat requests with tools; unset: the one the chat template's
  // family uses (ToolCallFormatOfTemplate), none when it shows no format.
  std::optional<ToolCallFormat> tool_call_parser;
  // Whether chat answers' <think> reasoning is split out as reasoning_content
  // (reasoning_parser.h): kAuto for chat templates that mention <think>.
  ReasoningParserMode reasoning_parser = ReasoningParserMode::kAuto;
  // Where generation streams go (routing/stream_router.h); null: the scheduler on the
  // channel given to Start.
  std::shared_ptr<routing::StreamRouter> router;
  // Set with many replicas: /health is 200 while this answers true (some replica serves),
  // in place of asking the channel's scheduler.
  std::function<bool()> replicas_serving;
  // The names the model answers to in requests' "model" (--served_model_name); the first is
  // the id /v1/models lists first and the one responses carry. Empty: the model's own name.
  std::vector<std::string> served_model_names;
  // CORS (--allowed_origins): "*" lets any origin's page call the API, a comma-separated
  // list only those origins, empty turns CORS off. Preflights (OPTIONS) are answered
  // without an API key; the requests themselves still need one where keys are set.
  std::string allowed_origins = "*";
  // GET /metrics on this port answers this text (the frontend's Prometheus metrics); unset:
  // 404. Open like /health and /version, as on vLLM's API port.
  std::function<std::string()> metrics_text;
};

class OpenAiServer {
 public:
  // The model context, or null while the frontend has none yet.
  using ModelSource = std::function<std::shared_ptr<const ModelContext>()>;

  // Binds host:port and starts serving. `scheduler_channel` reaches the scheduler;
  // `metrics` (not owned) must outlive the server. Unavailable when the port cannot be
  // bound, InvalidArgument for unusable TLS files.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(
      OpenAiServerOptions options, ModelSource model,
      std::shared_ptr<grpc::ChannelInterface> scheduler_channel, FrontendMetrics* metrics);
  ~OpenAiServer();

  int port() const { return http_->port(); }
  int num_connections() const { return http_->num_connections(); }

  // Refuses new generations (503), lets those in flight finish for drain_timeout, cancels
  // the rest, then stops serving.
  void Stop();

  struct Call;  // one generation in flight (openai_server.cc)

 private:
  OpenAiServer(OpenAiServerOptions options, ModelSource model,
               std::shared_ptr<grpc::ChannelInterface> channel, FrontendMetrics* metrics);

  void Handle(HttpRequest req, std::shared_ptr<HttpExchange> x);
  void HandleGenerate(openai::Endpoint endpoint, const HttpRequest& req,
                      std::shared_ptr<HttpExchange> x);
  void HandleModels(HttpExchange& x);
  void HandleHealth(std::shared_ptr<HttpExchange> x);
  // One scheduler update of `call` (on a gRPC callback thread).
  void OnUpdate(const std::shared_ptr<Call>& call, Generation::Update update);
  // The chat template for `model` (parsed once per model context): SelectChatTemplate of
  // its default and named templates, the one named "tool_use" when `has_tools`.
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> TemplateFor(
      const std::shared_ptr<const ModelContext>& model, bool has_tools);
  std::string ModelName(const ModelContext& model) const;
  // Whether a request's "model" names the served model (any of its names).
  bool ServesModel(const ModelContext& model, const std::string& name) const;
  // The CORS origin to allow for `req` ("*" or the request's Origin), or nullopt.
  std::optional<std::string> CorsOrigin(const HttpRequest& req) const;

  bool Register(const std::shared_ptr<Call>& call);
  void Unregister(const std::shared_ptr<Call>& call);
  bool BeginHealthCheck();
  void EndHealthCheck();

  const OpenAiServerOptions options_;
  const ModelSource model_;
  const std::unique_ptr<folio::internal::v1::Scheduler::Stub> scheduler_;
  const std::shared_ptr<routing::StreamRouter> router_;  // options_.router or one on scheduler_
  const std::unique_ptr<grpc::health::v1::Health::Stub> scheduler_health_;
  FrontendMetrics* const metrics_;
  const int64_t created_;  // Unix seconds at start, reported as the model's "created"
  std::unique_ptr<HttpServer> http_;
  CallTracker calls_;  // scheduler streams and health checks until gRPC lets go of them

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<std::shared_ptr<Call>> active_ ABSL_GUARDED_BY(mu_);
  int health_checks_ ABSL_GUARDED_BY(mu_) = 0;  // scheduler health checks in flight
  std::shared_ptr<const ModelContext> template_model_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ChatTemplate> template_ ABSL_GUARDED_BY(mu_);        // no tools
  std::shared_ptr<const ChatTemplate> tools_template_ ABSL_GUARDED_BY(mu_);  // with tools
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_

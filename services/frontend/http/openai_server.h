// OpenAiServer: the OpenAI-compatible HTTP API of the frontend (docs/http-api.md).
//
//   POST /v1/completions       text or token-id prompt, streamed (SSE) or not
//   POST /v1/chat/completions  messages through the model's chat template (chat_template.h)
//   GET  /v1/models            the served model
//   GET  /health               200 only when the model is known and the scheduler serves
//
// Requests are parsed at the edge (openai_json.h), validated by the same RequestValidator
// as the gRPC API and run through the scheduler (generation.h). Errors are OpenAI error
// objects with the HTTP status of their kind (400, 401, 404, 413, 429, 501, 503...). A
// streaming client that goes away is noticed at the next write, which cancels the
// scheduler call, so the request's blocks are freed.
//
// cpp-httplib serves each connection on a thread of its pool (`num_threads`), and a
// generation blocks that thread while it runs.
//
// Thread-safe. Stop() is idempotent; the destructor calls it.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

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

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace folio::frontend {

class Generation;
class ChatTemplate;

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0 picks a free port
  size_t max_body_bytes = 1 << 20;       // larger request bodies get 413
  int num_threads = 256;                 // connections served at once
  ApiKeys api_keys;                      // none: no authentication
  absl::Duration drain_timeout = absl::Seconds(10);  // Stop() waits this long for requests
};

class OpenAiServer {
 public:
  // The model context, or null while the frontend has none yet.
  using ModelSource = std::function<std::shared_ptr<const ModelContext>()>;

  // Binds host:port and starts serving. `scheduler_channel` reaches the scheduler;
  // `metrics` (not owned) must outlive the server. Unavailable when the port cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(
      OpenAiServerOptions options, ModelSource model,
      std::shared_ptr<grpc::ChannelInterface> scheduler_channel, FrontendMetrics* metrics);
  ~OpenAiServer();

  int port() const { return port_; }

  // Refuses new generations (503), lets those in flight finish for drain_timeout, cancels
  // the rest, then stops serving.
  void Stop();

 private:
  OpenAiServer(OpenAiServerOptions options, ModelSource model,
               std::shared_ptr<grpc::ChannelInterface> channel, FrontendMetrics* metrics);

  void HandleGenerate(int endpoint, const httplib::Request& req, httplib::Response& res);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleHealth(const httplib::Request& req, httplib::Response& res);
  // The chat template for `model` (parsed once per model context).
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> TemplateFor(
      const std::shared_ptr<const ModelContext>& model);
  std::string ModelName(const ModelContext& model) const;

  bool Register(Generation* g);
  void Unregister(Generation* g);

  const OpenAiServerOptions options_;
  const ModelSource model_;
  const std::unique_ptr<folio::internal::v1::Scheduler::Stub> scheduler_;
  const std::unique_ptr<grpc::health::v1::Health::Stub> scheduler_health_;
  FrontendMetrics* const metrics_;
  const int64_t created_;  // Unix seconds at start, reported as the model's "created"
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Generation*> active_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelContext> template_model_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ChatTemplate> template_ ABSL_GUARDED_BY(mu_);
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_SERVER_H_

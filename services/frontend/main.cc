// folio-frontend: the public folio.v1.TextGeneration API in front of one model replica's
// scheduler. Stateless: it fetches the tokenizer and limits from the scheduler at start-up.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "common/server_flags.h"
#include "common/service_runner.h"
#include "glog/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "services/frontend/api_keys.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/http/chat_template.h"
#include "services/frontend/http/openai_server.h"
#include "services/frontend/service.h"

ABSL_FLAG(std::string, scheduler, "",
          "Required. Address (HOST:PORT) of the replica's folio-scheduler.");
ABSL_FLAG(int, port, 50051, "gRPC port of the public API; 0 picks a free one (see --port_file).");
ABSL_FLAG(int, startup_timeout_s, 300,
          "Give up (exit 1) when the scheduler has not answered GetClusterInfo for this long.");
ABSL_FLAG(int, max_stop_strings, 8, "Stop strings a request may give, at most.");
ABSL_FLAG(int, max_stop_string_bytes, 256, "Bytes per stop string, at most.");
ABSL_FLAG(int, max_logprobs, 20, "SamplingOptions.logprobs may be at most this.");
ABSL_FLAG(int, recovery_timeout_ms, 60000,
          "A stream whose scheduler is lost (it died, restarts, or was replaced) waits this "
          "long for a scheduler to continue it, token for token, before it ends UNAVAILABLE; "
          "0 ends it at once.");
ABSL_FLAG(int, http_port, 8000,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
          "/v1/models, /health); 0 picks a free one (see --port_file), -1 turns it off.");
ABSL_FLAG(int, http_threads, 2,
          "I/O threads of the HTTP API. Connections are not threads: a few serve thousands.");
ABSL_FLAG(int, http_backlog, 4096,
          "Listen backlog of the HTTP API: new connections the kernel queues in a burst "
          "(capped by net.core.somaxconn).");
ABSL_FLAG(int, http_request_timeout_ms, 10000,
          "An HTTP request's head and body must arrive within this (a slow client is cut).");
ABSL_FLAG(int, http_idle_timeout_ms, 60000,
          "A keep-alive HTTP connection idle this long between requests is closed.");
ABSL_FLAG(int, http_write_timeout_ms, 30000,
          "An HTTP client that takes none of the answer for this long is cut.");
ABSL_FLAG(int, http_stream_buffer_bytes, 1 << 20,
          "Bytes of a streamed answer a slow HTTP reader may leave unread before the stream is "
          "cut with an error event (and the request cancelled).");
ABSL_FLAG(std::string, http_tls_cert, "",
          "PEM certificate chain: with --http_tls_key, the HTTP API speaks HTTPS only.");
ABSL_FLAG(std::string, http_tls_key, "", "PEM private key of --http_tls_cert.");
ABSL_FLAG(std::string, http_tls_ca, "",
          "PEM CA certificates: when set, HTTPS clients must present a certificate it signed.");
ABSL_FLAG(int, http_socket_send_buffer_bytes, 0,
          "SO_SNDBUF of each HTTP connection (kernel memory a slow reader can hold); 0 leaves "
          "it to the kernel's autotuning.");
ABSL_FLAG(int, http_max_body_bytes, 1 << 20, "HTTP request bodies larger than this get 413.");
ABSL_FLAG(std::vector<std::string>, api_key, {},
          "API keys (comma-separated). When any key is set (here or in --api_key_file), the "
          "HTTP API needs 'Authorization: Bearer <key>' and the gRPC API the metadata "
          "'authorization: Bearer <key>'; health checks stay open.");
ABSL_FLAG(std::string, chat_template, "",
          "A Jinja chat template file that /v1/chat/completions renders with instead of the "
          "model's own (GGUF tokenizer.chat_template); checked at startup.");
ABSL_FLAG(std::string, tool_call_parser, "",
          "How /v1/chat/completions reads tool calls out of the model's output: llama3_json, "
          "hermes (also Qwen2.5/Qwen3) or mistral. Empty: the one the chat template's family "
          "uses (none when it shows no tool-call format).");
ABSL_FLAG(std::string, api_key_file, "",
          "File of API keys, one per line ('#' starts a comment line).");

namespace {

// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitStartupFailed = 1;
constexpr int kExitBadFlags = 2;

}  // namespace

namespace {

// Readiness follows the scheduler's once the frontend is up: NOT_SERVING while no
// scheduler is SERVING (it died, restarts, recovers its replica, or was fenced), when
// streams wait to be continued; liveness stays SERVING throughout. Polls every 250 ms
// until `stop`.
void FollowSchedulerReadiness(const std::shared_ptr<grpc::Channel>& channel,
                              folio::ServiceRunner* runner, const std::atomic<bool>* stop) {
  runner->SetHealth("liveness", folio::ServingState::kServing);
  auto health = grpc::health::v1::Health::NewStub(channel);
  bool ready = true;
  while (!stop->load()) {
    absl::SleepFor(absl::Milliseconds(250));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    const bool serving = health->Check(&ctx, req, &resp).ok() &&
                         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    if (serving != ready) {
      ready = serving;
      LOG(INFO) << "the scheduler is " << (ready ? "serving again" : "not serving")
                << "; readiness " << (ready ? "SERVING" : "NOT_SERVING");
      runner->SetServing(ready ? folio::ServingState::kServing
                               : folio::ServingState::kNotServing);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  folio::BlockTerminationSignals();
  folio::InitProcess(
      argc, argv,
      "the public gRPC API (folio.v1.TextGeneration) of a Folio model replica.\n"
      "Usage: folio-frontend --scheduler=HOST:PORT [--port=50051] [--metrics_port=N] ...\n"
      "Tokenizes, validates, streams, applies stop strings; the scheduler does the rest.\n"
      "Health (grpc.health.v1) reports NOT_SERVING until the scheduler has answered.");
  const std::string target = absl::GetFlag(FLAGS_scheduler);
  if (target.empty()) {
    LOG(ERROR) << "--scheduler=HOST:PORT is required";
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_startup_timeout_s) <= 0 || absl::GetFlag(FLAGS_max_stop_strings) < 0 ||
      absl::GetFlag(FLAGS_recovery_timeout_ms) < 0 ||
      absl::GetFlag(FLAGS_max_stop_string_bytes) <= 0 || absl::GetFlag(FLAGS_max_logprobs) < 0) {
    LOG(ERROR) << "--startup_timeout_s and --max_stop_string_bytes must be positive, "
                  "--max_stop_strings, --max_logprobs and --recovery_timeout_ms non-negative";
    return kExitBadFlags;
  }
  const int http_port = absl::GetFlag(FLAGS_http_port);
  if (http_port < -1 || http_port > 65535 || absl::GetFlag(FLAGS_http_threads) <= 0 ||
      absl::GetFlag(FLAGS_http_max_body_bytes) <= 0 || absl::GetFlag(FLAGS_http_backlog) <= 0 ||
      absl::GetFlag(FLAGS_http_request_timeout_ms) <= 0 ||
      absl::GetFlag(FLAGS_http_idle_timeout_ms) <= 0 ||
      absl::GetFlag(FLAGS_http_write_timeout_ms) <= 0 ||
      absl::GetFlag(FLAGS_http_stream_buffer_bytes) <= 0) {
    LOG(ERROR) << "--http_port must be -1 (off), 0 (any free port) or a port number; "
                  "--http_threads, --http_max_body_bytes, --http_backlog, the --http_*_ms "
                  "timeouts and --http_stream_buffer_bytes must be positive";
    return kExitBadFlags;
  }
  const bool http_tls = !absl::GetFlag(FLAGS_http_tls_cert).empty() ||
                        !absl::GetFlag(FLAGS_http_tls_key).empty();
  if (http_tls && (absl::GetFlag(FLAGS_http_tls_cert).empty() ||
                   absl::GetFlag(FLAGS_http_tls_key).empty())) {
    LOG(ERROR) << "--http_tls_cert and --http_tls_key go together";
    return kExitBadFlags;
  }
  if (!http_tls && !absl::GetFlag(FLAGS_http_tls_ca).empty()) {
    LOG(ERROR) << "--http_tls_ca needs --http_tls_cert and --http_tls_key";
    return kExitBadFlags;
  }
  absl::StatusOr<folio::frontend::ApiKeys> api_keys = folio::frontend::ApiKeys::Create(
      absl::GetFlag(FLAGS_api_key), absl::GetFlag(FLAGS_api_key_file));
  if (!api_keys.ok()) {
    LOG(ERROR) << api_keys.status();
    return kExitBadFlags;
  }
  std::string chat_template;
  if (const std::string path = absl::GetFlag(FLAGS_chat_template); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      LOG(ERROR) << "--chat_template: cannot read " << path;
      return kExitBadFlags;
    }
    chat_template = text.str();
    absl::StatusOr<folio::frontend::ChatTemplate> t =
        folio::frontend::ChatTemplate::Create(chat_template, "<s>", "</s>");
    if (chat_template.empty() || !t.ok()) {
      LOG(ERROR) << "--chat_template " << path << ": "
                 << (chat_template.empty() ? "the file is empty" : t.status().message());
      return kExitBadFlags;
    }
  }
  std::optional<folio::frontend::ToolCallFormat> tool_call_parser;
  if (const std::string name = absl::GetFlag(FLAGS_tool_call_parser); !name.empty()) {
    absl::StatusOr<folio::frontend::ToolCallFormat> f =
        folio::frontend::ToolCallFormatByName(name);
    if (!f.ok()) {
      LOG(ERROR) << "--tool_call_parser: " << f.status().message();
      return kExitBadFlags;
    }
    tool_call_parser = *f;
  }
  folio::ExitIfCheckingFlags();
  // A client that drops its HTTP connection must not take the process with it: writes to
  // it fail with EPIPE instead.
  signal(SIGPIPE, SIG_IGN);

  folio::MetricsRegistry registry;
  folio::frontend::FrontendOptions options;
  options.validator.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  options.validator.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  options.validator.max_logprobs = absl::GetFlag(FLAGS_max_logprobs);
  options.api_keys = *api_keys;
  options.chat_template = std::move(chat_template);
  options.resume.recovery_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_recovery_timeout_ms));
  const folio::TlsConfig tls = folio::TlsConfigFromFlagsOrExit();
  std::shared_ptr<grpc::Channel> channel =
      folio::frontend::MakeSchedulerChannel(target, absl::Seconds(2), tls);
  folio::frontend::FrontendService service(options, channel, &registry);

  // The HTTP API binds first, so that the port file (written by the runner) can name it.
  std::unique_ptr<folio::frontend::OpenAiServer> http;
  if (http_port >= 0) {
    folio::frontend::OpenAiServerOptions http_options;
    http_options.host = absl::GetFlag(FLAGS_host);
    http_options.port = http_port;
    http_options.num_threads = absl::GetFlag(FLAGS_http_threads);
    http_options.max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_http_max_body_bytes));
    http_options.listen_backlog = absl::GetFlag(FLAGS_http_backlog);
    http_options.request_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_http_request_timeout_ms));
    http_options.idle_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_http_idle_timeout_ms));
    http_options.write_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_http_write_timeout_ms));
    http_options.max_stream_buffer_bytes =
        static_cast<size_t>(absl::GetFlag(FLAGS_http_stream_buffer_bytes));
    if (http_tls) {
      http_options.tls = folio::frontend::TlsFiles{absl::GetFlag(FLAGS_http_tls_cert),
                                                   absl::GetFlag(FLAGS_http_tls_key),
                                                   absl::GetFlag(FLAGS_http_tls_ca)};
    }
    http_options.socket_send_buffer_bytes =
        std::max(0, absl::GetFlag(FLAGS_http_socket_send_buffer_bytes));
    http_options.api_keys = *api_keys;
    http_options.drain_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_drain_timeout_ms));
    http_options.resume = options.resume;
    http_options.tool_call_parser = tool_call_parser;
    auto started = folio::frontend::OpenAiServer::Start(
        http_options, [&service] { return service.model(); }, channel, service.metrics());
    if (!started.ok()) {
      LOG(ERROR) << started.status();
      return kExitStartupFailed;
    }
    http = *std::move(started);
  }

  folio::ServerOptions server_options =
      folio::ServerOptionsFromFlags("folio.v1.TextGeneration", absl::GetFlag(FLAGS_port));
  if (http) server_options.extra_ports = {{"http_port", http->port()}};
  auto runner = folio::ServiceRunner::Start(server_options, {&service}, &registry);
  if (!runner.ok()) {
    LOG(ERROR) << runner.status();
    return kExitStartupFailed;
  }

  // Start-up runs beside the signal wait so that SIGTERM during a long wait for the
  // scheduler is honoured at once. On failure it raises SIGTERM itself to wake main.
  std::atomic<bool> stop{false};
  std::atomic<bool> startup_failed{false};
  folio::ServiceRunner* r = runner->get();
  std::thread startup([&] {
    auto stub = folio::internal::v1::Scheduler::NewStub(channel);
    folio::frontend::FetchOptions fetch;
    fetch.target = target;
    fetch.timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
    absl::StatusOr<folio::internal::v1::ClusterInfo> info =
        folio::frontend::FetchClusterInfo(stub.get(), fetch, &stop);
    absl::Status status = info.ok() ? service.SetClusterInfo(*std::move(info)) : info.status();
    if (status.ok()) {
      r->SetServing(folio::ServingState::kServing);
      FollowSchedulerReadiness(channel, r, &stop);
      return;
    }
    if (stop.load()) return;
    LOG(ERROR) << "start-up failed: " << status;
    startup_failed = true;
    kill(getpid(), SIGTERM);
  });

  const int sig = folio::WaitForTerminationSignal();
  stop = true;
  startup.join();
  if (startup_failed) {
    if (http) http->Stop();
    (*runner)->Shutdown();
    return kExitStartupFailed;
  }
  LOG(INFO) << "signal " << sig << ", shutting down";
  if (http) http->Stop();
  (*runner)->Shutdown();
  return kExitOk;
}

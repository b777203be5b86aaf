// folio-frontend: the public folio.v1.TextGeneration API in front of one model replica's
// scheduler. Stateless: it fetches the tokenizer and limits from the scheduler at start-up.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
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
#include "services/frontend/chat/chat_template.h"
#include "services/frontend/chat/reasoning_parser.h"
#include "services/frontend/http/openai_server.h"
#include "services/frontend/routing/replica_set.h"
#include "services/frontend/service.h"

ABSL_FLAG(std::string, scheduler, "",
          "Address (HOST:PORT) of the one replica's folio-scheduler (or use --replicas).");
ABSL_FLAG(std::string, replicas, "",
          "The replicas' schedulers: HOST:PORT[,HOST:PORT...], or dns:///NAME:PORT (a headless "
          "Service; resolved again every --replica_resolve_ms, so replicas join and leave "
          "without a restart). Requests are routed by --routing; a stream whose replica is "
          "lost continues on another. One of --scheduler and --replicas is required.");
ABSL_FLAG(std::string, routing, "kv",
          "How requests pick a replica: kv (the fewest prompt blocks to compute, from each "
          "replica's prefix cache, weighed against its load), least-loaded, round-robin, "
          "random. Only used with more than one replica.");
ABSL_FLAG(double, kv_prefill_weight, 1.0,
          "--routing=kv: weight of a prompt block to compute against a block of queued work "
          "(> 1 favours cache hits, < 1 balance).");
ABSL_FLAG(double, kv_disk_hit_cost, 0.1,
          "--routing=kv: what loading a prompt block from a replica's disk KV tier costs, as a "
          "share of computing it (a hit in the pool or host tier costs nothing), in [0, 1].");
ABSL_FLAG(int, replica_poll_ms, 50,
          "How often the router asks every replica for its load and prefix-cache events.");
ABSL_FLAG(int, replica_resolve_ms, 5000, "How often a dns:/// --replicas name is resolved again.");
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
ABSL_FLAG(std::vector<std::string>, served_model_name, {},
          "Names the model answers to in the HTTP API's \"model\" field (comma-separated; "
          "the first is the id /v1/models gives and responses carry). Default: the model's "
          "own name.");
ABSL_FLAG(std::string, allowed_origins, "*",
          "CORS on the HTTP API: * (any origin), a comma-separated list of origins, or empty "
          "(off). Preflights are answered without an API key; requests still need one.");
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
ABSL_FLAG(std::string, reasoning_parser, "auto",
          "Whether /v1/chat/completions splits a reasoning model's <think>...</think> out of "
          "the answer as message.reasoning_content / delta.reasoning_content: think (always), "
          "none (never), auto (when the chat template mentions <think>: Qwen3, QwQ, "
          "DeepSeek-R1).");
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
// With many replicas, "the scheduler" is any replica: `serving` says whether one serves.
void FollowSchedulerReadiness(const std::function<bool()>& serving_now,
                              folio::ServiceRunner* runner, const std::atomic<bool>* stop) {
  runner->SetHealth("liveness", folio::ServingState::kServing);
  bool ready = true;
  while (!stop->load()) {
    absl::SleepFor(absl::Milliseconds(250));
    const bool serving = serving_now();
    if (serving != ready) {
      ready = serving;
      LOG(INFO) << "the scheduler is " << (ready ? "serving again" : "not serving")
                << "; readiness " << (ready ? "SERVING" : "NOT_SERVING");
      runner->SetServing(ready ? folio::ServingState::kServing
                               : folio::ServingState::kNotServing);
    }
  }
}

// Asks the scheduler on `channel` whether it serves (grpc.health.v1).
std::function<bool()> SchedulerHealth(const std::shared_ptr<grpc::Channel>& channel) {
  std::shared_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(channel);
  return [health] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    return health->Check(&ctx, req, &resp).ok() &&
           resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  };
}

// GetClusterInfo from whichever replica answers first (they serve one model), trying each
// in turn until `timeout`.
absl::StatusOr<folio::internal::v1::ClusterInfo> FetchFromAnyReplica(
    folio::frontend::routing::ReplicaSet* set, absl::Duration timeout,
    const std::atomic<bool>* stop) {
  const absl::Time give_up = absl::Now() + timeout;
  absl::Status last = absl::UnavailableError("no replica yet");
  absl::Time next_log = absl::Now() + absl::Seconds(5);
  while (!stop->load() && absl::Now() < give_up) {
    for (const auto& [address, stub] : set->Stubs()) {
      folio::frontend::FetchOptions one;
      one.target = address;
      one.timeout = absl::Seconds(2);
      absl::StatusOr<folio::internal::v1::ClusterInfo> info =
          folio::frontend::FetchClusterInfo(stub.get(), one, stop);
      if (info.ok()) {
        LOG(INFO) << "model description from replica " << address;
        return info;
      }
      last = info.status();
    }
    if (absl::Now() >= next_log) {
      LOG(INFO) << "waiting for a replica to answer: " << last;
      next_log = absl::Now() + absl::Seconds(5);
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  if (stop->load()) return absl::CancelledError("stopped");
  return absl::DeadlineExceededError(absl::StrCat(
      "no replica answered GetClusterInfo within ", absl::FormatDuration(timeout), ": ",
      last.message()));
}

}  // namespace

int main(int argc, char** argv) {
  folio::CatchTerminationSignals();
  folio::InitProcess(
      argc, argv,
      "the public gRPC API (folio.v1.TextGeneration) of a Folio model replica.\n"
      "Usage: folio-frontend --scheduler=HOST:PORT [--port=50051] [--metrics_port=N] ...\n"
      "       folio-frontend --replicas=HOST:PORT,HOST:PORT|dns:///NAME:PORT [--routing=kv]\n"
      "Tokenizes, validates, streams, applies stop strings; the scheduler does the rest.\n"
      "Health (grpc.health.v1) reports NOT_SERVING until the scheduler has answered.");
  const std::string replicas_flag = absl::GetFlag(FLAGS_replicas);
  if (absl::GetFlag(FLAGS_scheduler).empty() == replicas_flag.empty()) {
    LOG(ERROR) << "give one of --scheduler=HOST:PORT and --replicas=HOST:PORT,... (see --help)";
    return kExitBadFlags;
  }
  std::optional<folio::frontend::routing::ReplicaTargets> replica_targets;
  if (!replicas_flag.empty()) {
    absl::StatusOr<folio::frontend::routing::ReplicaTargets> t =
        folio::frontend::routing::ParseReplicaTargets(replicas_flag);
    if (!t.ok()) {
      LOG(ERROR) << t.status().message();
      return kExitBadFlags;
    }
    replica_targets = *std::move(t);
  }
  const std::string target = replica_targets.has_value()
                                 ? (replica_targets->dns_name.empty()
                                        ? replica_targets->addresses.front()
                                        : "dns:///" + replica_targets->dns_name)
                                 : absl::GetFlag(FLAGS_scheduler);
  absl::StatusOr<folio::frontend::routing::RoutingPolicy> routing =
      folio::frontend::routing::ParseRoutingPolicy(absl::GetFlag(FLAGS_routing));
  if (!routing.ok()) {
    LOG(ERROR) << "--routing: " << routing.status().message();
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_replica_poll_ms) <= 0 || absl::GetFlag(FLAGS_replica_resolve_ms) <= 0 ||
      !(absl::GetFlag(FLAGS_kv_prefill_weight) > 0)) {
    LOG(ERROR) << "--replica_poll_ms, --replica_resolve_ms and --kv_prefill_weight must be "
                  "positive";
    return kExitBadFlags;
  }
  if (!(absl::GetFlag(FLAGS_kv_disk_hit_cost) >= 0 && absl::GetFlag(FLAGS_kv_disk_hit_cost) <= 1)) {
    LOG(ERROR) << "--kv_disk_hit_cost must lie in [0, 1], got "
               << absl::GetFlag(FLAGS_kv_disk_hit_cost);
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
  for (const std::string& name : absl::GetFlag(FLAGS_served_model_name)) {
    if (name.empty()) {
      LOG(ERROR) << "--served_model_name: an empty name (expected NAME[,NAME...])";
      return kExitBadFlags;
    }
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
  absl::StatusOr<folio::frontend::ReasoningParserMode> reasoning_parser =
      folio::frontend::ReasoningParserModeByName(absl::GetFlag(FLAGS_reasoning_parser));
  if (!reasoning_parser.ok()) {
    LOG(ERROR) << "--reasoning_parser: " << reasoning_parser.status().message();
    return kExitBadFlags;
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
  // One --scheduler: a channel to it, as a one-replica frontend always had. --replicas: a
  // replica set (routing/replica_set.h) routes the streams and decides readiness; the
  // channel (to the first replica, or gRPC's own dns:/// resolution) is then unused.
  std::shared_ptr<grpc::Channel> channel =
      folio::frontend::MakeSchedulerChannel(target, absl::Seconds(2), tls);
  std::shared_ptr<folio::frontend::routing::ReplicaSet> replica_set;
  if (replica_targets.has_value()) {
    folio::frontend::routing::ReplicaSetOptions set_options;
    set_options.targets = *replica_targets;
    set_options.policy = *routing;
    set_options.kv_prefill_weight = absl::GetFlag(FLAGS_kv_prefill_weight);
    set_options.kv_disk_hit_cost = absl::GetFlag(FLAGS_kv_disk_hit_cost);
    set_options.poll_interval = absl::Milliseconds(absl::GetFlag(FLAGS_replica_poll_ms));
    set_options.resolve_interval = absl::Milliseconds(absl::GetFlag(FLAGS_replica_resolve_ms));
    set_options.make_channel = [tls](const std::string& address) {
      return std::shared_ptr<grpc::ChannelInterface>(
          folio::frontend::MakeSchedulerChannel(address, absl::Seconds(2), tls));
    };
    set_options.registry = &registry;
    absl::StatusOr<std::unique_ptr<folio::frontend::routing::ReplicaSet>> set =
        folio::frontend::routing::ReplicaSet::Create(std::move(set_options));
    if (!set.ok()) {
      LOG(ERROR) << "--replicas: " << set.status().message();
      return kExitBadFlags;
    }
    replica_set = *std::move(set);
    options.router = replica_set;
    LOG(INFO) << "routing over " << replicas_flag << " by "
              << folio::frontend::routing::RoutingPolicyName(*routing);
  }
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
    http_options.reasoning_parser = *reasoning_parser;
    http_options.served_model_names = absl::GetFlag(FLAGS_served_model_name);
    http_options.allowed_origins = absl::GetFlag(FLAGS_allowed_origins);
    http_options.metrics_text = [&registry] { return registry.Serialize(); };
    http_options.router = replica_set;
    if (replica_set != nullptr) {
      http_options.replicas_serving = [set = replica_set.get()] { return set->AnyServing(); };
    }
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
    const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
    absl::StatusOr<folio::internal::v1::ClusterInfo> info;
    if (replica_set != nullptr) {
      info = FetchFromAnyReplica(replica_set.get(), timeout, &stop);
    } else {
      auto stub = folio::internal::v1::Scheduler::NewStub(channel);
      folio::frontend::FetchOptions fetch;
      fetch.target = target;
      fetch.timeout = timeout;
      info = folio::frontend::FetchClusterInfo(stub.get(), fetch, &stop);
    }
    absl::Status status = info.ok() ? service.SetClusterInfo(*std::move(info)) : info.status();
    if (status.ok()) {
      r->SetServing(folio::ServingState::kServing);
      FollowSchedulerReadiness(replica_set != nullptr
                                   ? std::function<bool()>([set = replica_set.get()] {
                                       return set->AnyServing();
                                     })
                                   : SchedulerHealth(channel),
                               r, &stop);
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

// folio-bench: drives a running Folio cluster through its public gRPC API
// (folio.v1.TextGeneration/Generate) or any OpenAI-compatible HTTP server
// (/v1/completions) with a seeded workload and reports throughput, latency, goodput and
// the servers' own gauges. See kUsage.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/process.h"
#include "nlohmann/json.hpp"
#include "tools/bench/goodput.h"
#include "tools/bench/grpc_client.h"
#include "tools/bench/http_url.h"
#include "tools/bench/metrics_poller.h"
#include "tools/bench/model_file.h"
#include "tools/bench/openai_client.h"
#include "tools/bench/report.h"
#include "tools/bench/workload.h"

ABSL_FLAG(std::string, backend, "grpc",
          "grpc (Folio's gRPC API at --server) or openai (an OpenAI-compatible HTTP server "
          "at --base_url).");
ABSL_FLAG(std::string, server, "localhost:50051",
          "grpc: address (HOST:PORT) of folio-frontend.");
ABSL_FLAG(std::string, base_url, "", "openai: the server's http://HOST:PORT.");
ABSL_FLAG(std::string, api_key, "", "openai: sent as 'Authorization: Bearer KEY'.");
ABSL_FLAG(std::string, served_model_name, "",
          "openai: the request's \"model\"; empty: the first id of GET /v1/models.");
ABSL_FLAG(std::string, model_file, "",
          "openai: the served model file (GGUF or llama2.c), read for its vocabulary size, "
          "context length and special token ids.");
ABSL_FLAG(int, vocab_size, 0, "openai: the model's vocabulary size (instead of --model_file).");
ABSL_FLAG(int, max_model_len, 0,
          "openai: prompt + output cap; default: /v1/models' max_model_len, else the model "
          "file's context length.");
ABSL_FLAG(std::string, workload, "sharegpt-like",
          "sharegpt-like, alpaca-like, fixed, shared-prefix, parallel-sampling (n in 2..6, "
          "temperature 1, seeded) or beam (width in 2..6, every beam returned).");
ABSL_FLAG(int, num_requests, 64, "Requests to send.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the workload and of the arrival times.");
ABSL_FLAG(double, request_rate, std::numeric_limits<double>::infinity(),
          "Poisson arrivals at this many requests per second; inf sends all at once.");
ABSL_FLAG(int, max_concurrency, 0, "Requests in flight at most; 0 means no limit.");
ABSL_FLAG(double, duration_s, 0,
          "Stop sending after this many seconds and cut off requests still running then "
          "(they count as failed, DEADLINE_EXCEEDED); 0 means no bound.");
ABSL_FLAG(int, max_input_len, 512, "sharegpt-like, alpaca-like: prompt length cap.");
ABSL_FLAG(int, max_output_len, 512, "sharegpt-like, alpaca-like: output length cap.");
ABSL_FLAG(int, input_len, 128, "fixed: prompt length in tokens.");
ABSL_FLAG(int, output_len, 128, "fixed, shared-prefix: output length in tokens.");
ABSL_FLAG(int, prefix_len, 1000, "shared-prefix: tokens of the prefix common to all requests.");
ABSL_FLAG(int, suffix_len, 32, "shared-prefix: tokens of each request's own part.");
ABSL_FLAG(std::string, result_json, "", "Write the figures and per-request results here.");
ABSL_FLAG(bool, progress, true, "Print a progress line on stderr while running.");
ABSL_FLAG(std::vector<std::string>, metrics_url, {},
          "Prometheus /metrics pages to scrape during the run (comma-separated), e.g. the "
          "cachemgr's http://127.0.0.1:PORT/metrics.");
ABSL_FLAG(std::string, goodput, "",
          "Service-level objectives ttft:MS,tpot:MS,e2e:MS (any subset): also report the "
          "requests per second that met all of them.");
ABSL_FLAG(int, metrics_interval_ms, 250, "Scrape the --metrics_url pages this often.");
ABSL_FLAG(std::vector<std::string>, metrics_gauges, folio::bench::DefaultMetricsGauges(),
          "Gauges kept from the --metrics_url pages (comma-separated); each is summed over "
          "its label sets.");

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "drives a running Folio cluster (or any OpenAI-compatible server) with a seeded\n"
    "workload and reports throughput, latency, goodput and the servers' gauges.\n"
    "\n"
    "Usage: folio-bench [--backend=grpc] --server=HOST:PORT [options]\n"
    "       folio-bench --backend=openai --base_url=http://HOST:PORT\n"
    "         (--model_file=PATH.gguf | --vocab_size=N [--max_model_len=N])\n"
    "         [--served_model_name=NAME] [--api_key=KEY] [options]\n"
    "Options: [--workload=sharegpt-like|alpaca-like|fixed|shared-prefix|parallel-sampling|beam]\n"
    "         [--num_requests=N]\n"
    "         [--request_rate=R|inf] [--max_concurrency=C] [--seed=S] [--duration_s=T]\n"
    "         [--result_json=FILE] [--goodput=ttft:MS,tpot:MS,e2e:MS]\n"
    "         [--metrics_url=URL[,URL...] [--metrics_interval_ms=MS] [--metrics_gauges=G,...]]\n"
    "\n"
    "Prompts are random token ids drawn from the served vocabulary (never the unknown,\n"
    "BOS or EOS id); each request asks for its output length with max_tokens and\n"
    "ignore_eos, greedy except parallel-sampling (temperature 1, a seed per request).\n"
    "With n > 1 (parallel-sampling, beam) output tokens count every choice. Lengths are\n"
    "held to the model's max_model_len. Exits 0\n"
    "once the run is reported (failed requests are counted in the report), 1 when the\n"
    "server cannot be reached, 2 on bad flags.\n"
    "\n"
    "grpc (default): folio.v1.TextGeneration/Generate streams on --server; the model's\n"
    "vocabulary, max_model_len and special ids come from GetModelInfo. Failures are\n"
    "counted by gRPC status.\n"
    "\n"
    "openai: streamed POST /v1/completions on --base_url with the prompt as a token-id\n"
    "array, stream_options.include_usage and n (parallel sampling); the model is\n"
    "--served_model_name or the first id of GET /v1/models. The HTTP API does not tell\n"
    "the vocabulary: --model_file reads it (and the context length and special ids) from\n"
    "the served model file, or give --vocab_size (special ids then 0, 1, 2);\n"
    "max_model_len is --max_model_len, else /v1/models' max_model_len, else the file's.\n"
    "TTFT is taken at the first chunk carrying text, ITL between such chunks; output\n"
    "tokens come from the usage chunk. Failures are counted as HTTP_<status> (with the\n"
    "OpenAI error message), ERROR_EVENT (an error inside the stream), UNAVAILABLE or\n"
    "DEADLINE_EXCEEDED. Beam-search requests are refused (the HTTP API has no beam).\n"
    "\n"
    "Server metrics: with --metrics_url, the Prometheus pages are scraped every\n"
    "--metrics_interval_ms during the run; the gauges of --metrics_gauges (default: the\n"
    "cachemgr's KV / slot utilization, sequences and blocks, the scheduler's running and\n"
    "waiting requests), each summed over its labels, go to \"server_metrics\" in the JSON:\n"
    "the series with the client's requests in flight, and mean / max / min over the samples\n"
    "taken while at least one request was in flight. tools/serve.py --info_file lists the\n"
    "services' /metrics URLs. An unreachable URL at the start exits 1.\n"
    "\n"
    "Goodput: --goodput=ttft:500,tpot:50 (any subset of ttft, tpot, e2e, in ms) counts the\n"
    "requests that completed within every bound: \"goodput\" in the JSON holds the bounds,\n"
    "those requests per second and their fraction of the requests sent.\n";

int UsageError(const std::string& message) {
  std::cerr << "folio-bench: " << message << "\nRun folio-bench --help for usage.\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = folio::InitProcess(argc, argv, kUsage);
  if (args.size() > 1) return UsageError(std::string("unexpected argument: ") + args[1]);
  const double rate = absl::GetFlag(FLAGS_request_rate);
  if (!(rate > 0)) return UsageError("--request_rate must be positive (or inf)");
  const int max_concurrency = absl::GetFlag(FLAGS_max_concurrency);
  if (max_concurrency < 0) return UsageError("--max_concurrency must be >= 0");
  const double duration_s = absl::GetFlag(FLAGS_duration_s);
  if (duration_s < 0 || !std::isfinite(duration_s)) {
    return UsageError("--duration_s must be finite and >= 0");
  }
  const int metrics_interval_ms = absl::GetFlag(FLAGS_metrics_interval_ms);
  if (metrics_interval_ms <= 0) return UsageError("--metrics_interval_ms must be positive");
  std::optional<folio::bench::Slo> slo;
  if (const std::string spec = absl::GetFlag(FLAGS_goodput); !spec.empty()) {
    absl::StatusOr<folio::bench::Slo> parsed = folio::bench::ParseSlo(spec);
    if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
    slo = *parsed;
  }
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  if (backend_name != "grpc" && backend_name != "openai") {
    return UsageError("--backend must be grpc or openai, not '" + backend_name + "'");
  }
  if (backend_name == "openai") {
    const std::string base_url = absl::GetFlag(FLAGS_base_url);
    if (base_url.empty()) return UsageError("--backend=openai needs --base_url=http://HOST:PORT");
    if (absl::StatusOr<folio::bench::HttpUrl> u = folio::bench::ParseHttpUrl(base_url); !u.ok()) {
      return UsageError("--base_url: " + std::string(u.status().message()));
    }
    if (absl::GetFlag(FLAGS_vocab_size) < 0 || absl::GetFlag(FLAGS_max_model_len) < 0) {
      return UsageError("--vocab_size and --max_model_len must be positive");
    }
  }
  folio::ExitIfCheckingFlags();

  std::unique_ptr<folio::bench::Backend> backend;
  std::string target;
  if (backend_name == "grpc") {
    target = absl::GetFlag(FLAGS_server);
    backend = std::make_unique<folio::bench::GrpcBackend>(target);
  } else {
    folio::bench::OpenAiOptions o;
    o.base_url = target = absl::GetFlag(FLAGS_base_url);
    o.api_key = absl::GetFlag(FLAGS_api_key);
    o.served_model_name = absl::GetFlag(FLAGS_served_model_name);
    o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
    o.max_model_len = absl::GetFlag(FLAGS_max_model_len);
    if (const std::string path = absl::GetFlag(FLAGS_model_file); !path.empty()) {
      absl::StatusOr<folio::bench::ModelFacts> facts = folio::bench::ReadModelFile(path);
      if (!facts.ok()) return UsageError("--model_file: " + std::string(facts.status().message()));
      o.model_file = *facts;
    }
    auto created = folio::bench::OpenAiBackend::Create(std::move(o));
    if (!created.ok()) return UsageError("--base_url: " + std::string(created.status().message()));
    backend = *std::move(created);
  }
  absl::StatusOr<folio::bench::ModelFacts> info = backend->Connect();
  if (!info.ok()) {
    std::cerr << "folio-bench: " << info.status().message() << "\n";
    return info.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  folio::bench::WorkloadOptions wo;
  wo.name = absl::GetFlag(FLAGS_workload);
  wo.num_requests = absl::GetFlag(FLAGS_num_requests);
  wo.seed = absl::GetFlag(FLAGS_seed);
  wo.max_input_len = absl::GetFlag(FLAGS_max_input_len);
  wo.max_output_len = absl::GetFlag(FLAGS_max_output_len);
  wo.input_len = absl::GetFlag(FLAGS_input_len);
  wo.output_len = absl::GetFlag(FLAGS_output_len);
  wo.prefix_len = absl::GetFlag(FLAGS_prefix_len);
  wo.suffix_len = absl::GetFlag(FLAGS_suffix_len);
  wo.vocab_size = info->vocab_size;
  wo.max_model_len = info->max_model_len;
  wo.special_ids = info->special_ids;
  auto workload = folio::bench::MakeWorkload(wo);
  if (!workload.ok()) return UsageError(std::string(workload.status().message()));
  for (const folio::bench::BenchRequest& request : *workload) {
    if (absl::Status s = backend->CanSend(request); !s.ok()) {
      return UsageError(std::string(s.message()));
    }
  }
  const int n = static_cast<int>(workload->size());
  const std::vector<double> arrivals = folio::bench::ArrivalTimes(n, rate, wo.seed);

  std::atomic<int> in_flight{0};
  std::unique_ptr<folio::bench::MetricsPoller> poller;
  if (const std::vector<std::string> urls = absl::GetFlag(FLAGS_metrics_url); !urls.empty()) {
    auto created = folio::bench::MetricsPoller::Create(
        urls, metrics_interval_ms / 1e3, absl::GetFlag(FLAGS_metrics_gauges),
        [&in_flight] { return in_flight.load(); });
    if (!created.ok()) {
      std::cerr << "folio-bench: --metrics_url: " << created.status().message() << "\n";
      return created.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    poller = *std::move(created);
  }

  std::vector<folio::bench::RequestResult> results(n);
  std::counting_semaphore<> slots(max_concurrency > 0 ? max_concurrency : n);
  std::atomic<int> done{0};
  std::atomic<bool> finished{false};
  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> deadline;
  if (duration_s > 0) {
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(duration_s));
  }
  if (poller) poller->Start(start);
  std::thread progress([&] {
    if (!absl::GetFlag(FLAGS_progress)) return;
    while (true) {
      const bool last = finished.load();
      std::fprintf(stderr, "\r[folio-bench] %d/%d requests done, %.1f s elapsed", done.load(), n,
                   folio::bench::Seconds(Clock::now() - start));
      if (last) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    std::fprintf(stderr, "\n");
  });
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    const Clock::time_point at = start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(arrivals[i]));
    if (deadline && at >= *deadline) break;
    std::this_thread::sleep_until(at);
    if (deadline) {
      if (!slots.try_acquire_until(*deadline)) break;
    } else {
      slots.acquire();
    }
    in_flight.fetch_add(1);
    threads.emplace_back([&, i] {
      backend->Run((*workload)[i], deadline, &results[i]);
      in_flight.fetch_sub(1);
      done.fetch_add(1);
      slots.release();
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = folio::bench::Seconds(Clock::now() - start);
  if (poller) poller->Stop();
  finished.store(true);
  progress.join();

  nlohmann::json summary = folio::bench::Summarize(results, elapsed);
  summary["config"] = {{"backend", backend_name},
                       {"server", target},
                       {"model", info->name},
                       {"workload", wo.name},
                       {"seed", wo.seed},
                       {"request_rate", std::isfinite(rate) ? nlohmann::json(rate) : "inf"},
                       {"max_concurrency", max_concurrency},
                       {"duration_s", duration_s}};
  if (poller) summary["server_metrics"] = poller->Result();
  if (slo) summary["goodput"] = folio::bench::Goodput(results, elapsed, *slo);
  std::cout << folio::bench::FormatTable(summary);
  const std::string path = absl::GetFlag(FLAGS_result_json);
  if (!path.empty()) {
    std::ofstream file(path);
    file << summary.dump(2) << "\n";
    if (!file) {
      std::cerr << "folio-bench: cannot write " << path << "\n";
      return 1;
    }
  }
  return 0;
}

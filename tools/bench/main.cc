// folio-bench: drives a running Folio cluster through the public gRPC API
// (folio.v1.TextGeneration/Generate) with a seeded workload and reports throughput and
// latency. See kUsage.
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
#include "common/grpc_status.h"
#include "common/process.h"
#include "folio/v1/folio.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "nlohmann/json.hpp"
#include "tools/bench/goodput.h"
#include "tools/bench/metrics_poller.h"
#include "tools/bench/report.h"
#include "tools/bench/workload.h"

ABSL_FLAG(std::string, server, "localhost:50051", "Address (HOST:PORT) of folio-frontend.");
ABSL_FLAG(std::string, workload, "sharegpt-like", "sharegpt-like, alpaca-like or fixed.");
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
ABSL_FLAG(int, output_len, 128, "fixed: output length in tokens.");
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

namespace pb = folio::v1;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "drives a running Folio cluster through its gRPC API and reports throughput and latency.\n"
    "\n"
    "Usage: folio-bench --server=HOST:PORT [--workload=sharegpt-like|alpaca-like|fixed]\n"
    "         [--num_requests=N] [--request_rate=R|inf] [--max_concurrency=C] [--seed=S]\n"
    "         [--duration_s=T] [--result_json=FILE]\n"
    "         [--metrics_url=URL[,URL...] [--metrics_interval_ms=MS] [--metrics_gauges=G,...]]\n"
    "         [--goodput=ttft:MS,tpot:MS,e2e:MS]\n"
    "\n"
    "Prompts are random token ids (prompt_token_ids) drawn from the served vocabulary;\n"
    "each request asks for its output length with max_tokens and ignore_eos. Lengths are\n"
    "held to the model's max_model_len. Exits 0 once the run is reported (failed requests\n"
    "are counted in the report), 1 when the server cannot be reached, 2 on bad flags.\n"
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

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string FinishReasonName(pb::FinishReason reason) {
  switch (reason) {
    case pb::FINISH_REASON_LENGTH:
      return "length";
    case pb::FINISH_REASON_STOP:
      return "stop";
    case pb::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "";
  }
}

void RunOne(pb::TextGeneration::Stub* stub, const folio::bench::BenchRequest& req,
            std::optional<Clock::time_point> deadline, folio::bench::RequestResult* out) {
  pb::GenerateRequest request;
  request.mutable_prompt_token_ids()->Assign(req.prompt_token_ids.begin(),
                                             req.prompt_token_ids.end());
  pb::SamplingOptions* s = request.mutable_sampling();
  s->set_max_tokens(req.output_len);
  s->set_ignore_eos(true);
  s->set_temperature(0);
  grpc::ClientContext ctx;
  if (deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        *deadline - Clock::now());
    ctx.set_deadline(std::chrono::system_clock::now() + left);
  }
  out->sent = true;
  out->prompt_tokens = static_cast<int>(req.prompt_token_ids.size());
  out->requested_output = req.output_len;
  const Clock::time_point start = Clock::now();
  Clock::time_point last;
  auto reader = stub->Generate(&ctx, request);
  pb::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.tokens_size() > 0) {
      const Clock::time_point now = Clock::now();
      if (out->output_tokens == 0) {
        out->ttft_s = Seconds(now - start);
      } else {
        out->itl_s.push_back(Seconds(now - last));
      }
      last = now;
      out->output_tokens += response.tokens_size();
    }
    if (response.finish_reason() != pb::FINISH_REASON_UNSPECIFIED) {
      out->finish_reason = FinishReasonName(response.finish_reason());
    }
  }
  const grpc::Status status = reader->Finish();
  out->e2e_s = Seconds(Clock::now() - start);
  out->ok = status.ok();
  out->status = absl::StatusCodeToString(folio::FromGrpcStatus(status).code());
  if (!status.ok()) out->error_message = status.error_message();
}

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
  folio::ExitIfCheckingFlags();

  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_server),
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::TextGeneration::NewStub(channel);
  pb::ModelInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = stub->GetModelInfo(&ctx, pb::GetModelInfoRequest(), &info);
    if (!status.ok()) {
      std::cerr << "folio-bench: GetModelInfo at " << absl::GetFlag(FLAGS_server) << " failed: "
                << absl::StatusCodeToString(folio::FromGrpcStatus(status).code()) << ": "
                << status.error_message() << "\n";
      return 1;
    }
  }
  folio::bench::WorkloadOptions wo;
  wo.name = absl::GetFlag(FLAGS_workload);
  wo.num_requests = absl::GetFlag(FLAGS_num_requests);
  wo.seed = absl::GetFlag(FLAGS_seed);
  wo.max_input_len = absl::GetFlag(FLAGS_max_input_len);
  wo.max_output_len = absl::GetFlag(FLAGS_max_output_len);
  wo.input_len = absl::GetFlag(FLAGS_input_len);
  wo.output_len = absl::GetFlag(FLAGS_output_len);
  wo.vocab_size = info.vocab_size();
  wo.max_model_len = info.max_model_len();
  wo.special_ids = {0, info.bos_id(), info.eos_id()};
  auto workload = folio::bench::MakeWorkload(wo);
  if (!workload.ok()) return UsageError(std::string(workload.status().message()));
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
                   Seconds(Clock::now() - start));
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
      RunOne(stub.get(), (*workload)[i], deadline, &results[i]);
      in_flight.fetch_sub(1);
      done.fetch_add(1);
      slots.release();
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = Seconds(Clock::now() - start);
  if (poller) poller->Stop();
  finished.store(true);
  progress.join();

  nlohmann::json summary = folio::bench::Summarize(results, elapsed);
  summary["config"] = {{"server", absl::GetFlag(FLAGS_server)},
                       {"model", info.name()},
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

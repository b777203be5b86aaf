#include "tools/bench/report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"

namespace folio::bench {

using nlohmann::json;

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

json Distribution(std::vector<double> values_s) {
  std::sort(values_s.begin(), values_s.end());
  double sum = 0;
  for (double v : values_s) sum += v;
  const double mean = values_s.empty() ? 0 : sum / static_cast<double>(values_s.size());
  return {{"mean", mean * 1e3},
          {"p50", Percentile(values_s, 0.50) * 1e3},
          {"p90", Percentile(values_s, 0.90) * 1e3},
          {"p99", Percentile(values_s, 0.99) * 1e3}};
}

json Summarize(const std::vector<RequestResult>& results, double duration_s) {
  std::vector<double> ttft, tpot, itl, e2e, normalized;
  std::map<std::string, int> failures;
  int sent = 0, completed = 0;
  long input_tokens = 0, output_tokens = 0;
  json requests = json::array();
  for (const RequestResult& r : results) {
    requests.push_back({{"sent", r.sent},
                        {"status", r.status},
                        {"prompt_tokens", r.prompt_tokens},
                        {"requested_output_tokens", r.requested_output},
                        {"output_tokens", r.output_tokens},
                        {"finish_reason", r.finish_reason},
                        {"ttft_ms", r.ttft_s * 1e3},
                        {"e2e_ms", r.e2e_s * 1e3}});
    if (!r.error_message.empty()) requests.back()["error"] = r.error_message;
    if (!r.sent) continue;
    ++sent;
    if (!r.ok) {
      ++failures[r.status];
      continue;
    }
    ++completed;
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    if (r.output_tokens > 0) {
      ttft.push_back(r.ttft_s);
      e2e.push_back(r.e2e_s);
      normalized.push_back(r.e2e_s / r.output_tokens);
    }
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / (r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  double normalized_mean = 0;
  for (double v : normalized) normalized_mean += v;
  if (!normalized.empty()) normalized_mean /= static_cast<double>(normalized.size());
  const double d = duration_s > 0 ? duration_s : 0;
  return {{"num_requests", static_cast<int>(results.size())},
          {"sent", sent},
          {"completed", completed},
          {"failed", sent - completed},
          {"failures", failures},
          {"not_sent", static_cast<int>(results.size()) - sent},
          {"duration_s", d},
          {"total_input_tokens", input_tokens},
          {"total_output_tokens", output_tokens},
          {"request_throughput", d > 0 ? completed / d : 0.0},
          {"output_throughput", d > 0 ? static_cast<double>(output_tokens) / d : 0.0},
          {"ttft_ms", Distribution(ttft)},
          {"tpot_ms", Distribution(tpot)},
          {"itl_ms", Distribution(itl)},
          {"e2e_latency_ms", Distribution(e2e)},
          {"normalized_latency_ms_per_token", normalized_mean * 1e3},
          {"requests", requests}};
}

std::string FormatTable(const json& s) {
  std::string out;
  auto line = [&](const std::string& name, const std::string& value) {
    out += absl::StrFormat("%-36s %s\n", name, value);
  };
  out += "============ folio-bench result ============\n";
  line("Requests completed / sent / total",
       absl::StrFormat("%d / %d / %d", s["completed"].get<int>(), s["sent"].get<int>(),
                       s["num_requests"].get<int>()));
  line("Failed requests", std::to_string(s["failed"].get<int>()));
  for (const auto& [status, count] : s["failures"].items()) {
    line("  " + status, std::to_string(count.get<int>()));
  }
  line("Duration (s)", absl::StrFormat("%.2f", s["duration_s"].get<double>()));
  line("Input / output tokens", absl::StrFormat("%d / %d", s["total_input_tokens"].get<long>(),
                                                s["total_output_tokens"].get<long>()));
  line("Request throughput (req/s)",
       absl::StrFormat("%.2f", s["request_throughput"].get<double>()));
  line("Output token throughput (tok/s)",
       absl::StrFormat("%.2f", s["output_throughput"].get<double>()));
  out += absl::StrFormat("%-36s %10s %10s %10s %10s\n", "Latency (ms)", "mean", "p50", "p90",
                         "p99");
  for (const auto& [key, name] : std::vector<std::pair<std::string, std::string>>{
           {"ttft_ms", "TTFT"},
           {"tpot_ms", "TPOT"},
           {"itl_ms", "ITL"},
           {"e2e_latency_ms", "End-to-end"}}) {
    const json& d = s[key];
    out += absl::StrFormat("%-36s %10.2f %10.2f %10.2f %10.2f\n", name, d["mean"].get<double>(),
                           d["p50"].get<double>(), d["p90"].get<double>(),
                           d["p99"].get<double>());
  }
  line("Normalized latency (ms/token, mean)",
       absl::StrFormat("%.2f", s["normalized_latency_ms_per_token"].get<double>()));
  if (s.contains("goodput")) {
    const json& g = s["goodput"];
    std::string bounds;
    for (const auto& [name, ms] : g["slo_ms"].items()) {
      bounds += absl::StrFormat("%s%s<=%g", bounds.empty() ? "" : ",", name, ms.get<double>());
    }
    line("Goodput (req/s) at " + bounds + " ms",
         absl::StrFormat("%.2f (%.1f%% of sent)", g["requests_per_s"].get<double>(),
                         100 * g["fraction"].get<double>()));
  }
  if (s.contains("server_metrics")) {
    const json& m = s["server_metrics"];
    line("Server metrics samples (errors)",
         absl::StrFormat("%d (%d)", m["samples"].get<int>(), m["scrape_errors"].get<int>()));
    out += absl::StrFormat("%-36s %10s %10s %10s\n", "  while requests in flight", "mean", "min",
                           "max");
    for (const auto& [name, g] : m["gauges"].items()) {
      out += absl::StrFormat("  %-50s %10.3f %10.3f %10.3f\n", name, g["mean"].get<double>(),
                             g["min"].get<double>(), g["max"].get<double>());
    }
  }
  out += "============================================\n";
  return out;
}

}  // namespace folio::bench
